"""Peers' spellings fgpu does not read (Volcano's vGPU resources, tkestack gpu-manager's vcuda ones). A pod
that fgpu schedules and carries one is refused with the fgpu spelling that means the same; a pod for
another scheduler that only carries these is not fgpu's business (gpu-manager runs beside the default
scheduler)."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

from ..podview import PodView

_INSTEAD = {
    keys.VOLCANO_VGPU_NUMBER: "nvidia.com/gpu (same meaning)",
    keys.VOLCANO_VGPU_MEMORY: "nvidia.com/gpumem (same meaning, MiB)",
    keys.VOLCANO_VGPU_CORES: "nvidia.com/gpucores (same meaning, %)",
    keys.TENCENT_VCUDA_CORE: "fgpu.io/gpu-fraction = vcuda-core / 100",
    keys.TENCENT_VCUDA_MEMORY: "fgpu.io/gpu-memory = vcuda-memory x 256Mi",
}


def refuse(view: PodView) -> None:
    for c in view.containers:
        for key in c.resource_keys():
            if key in _INSTEAD:
                raise InputError(f"fgpu does not read {key.split('/')[0]}'s GPU resources",
                                 field=c.resource_field(key), allowed=[_INSTEAD[key]])
