"""KAI scheduler (ex-Run:ai) annotations: `gpu-fraction` (0 < f <= 1) or `gpu-memory` (MiB) per device,
`gpu-fraction-num-devices` devices, for `gpu-fraction-container-name` (default the first container; init
containers too). KAI's own rules hold: fraction and memory are exclusive, a device count needs one of them,
and no other container of a fractional pod asks for whole GPUs (`nvidia.com/gpu`). On the fractional
container itself fgpu reads `nvidia.com/gpu` as the device count, as for every spelling: it must agree, and
it is what fgpu's own patch adds, so an admitted pod reads the same again."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_number, show, whole

from ..config import AdmissionConfig
from ..podview import PodView
from .common import MAX_DEVICES, Claims, fraction, note

SOURCE = "kai"


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    frac, mem, num = (note(view, k) for k in (keys.KAI_FRACTION, keys.KAI_MEMORY, keys.KAI_NUM_DEVICES))
    if not (frac or mem):
        if num:
            raise InputError(f"{show(num[0])} devices, but not how much of each", field=num[1],
                             allowed=[f"with {keys.KAI_FRACTION} or {keys.KAI_MEMORY}"])
        return Claims(SOURCE)
    if frac and mem:
        raise InputError(f"{show(frac[0])} cannot be combined with {mem[1]} (KAI's rule)", field=frac[1],
                         allowed=[f"{keys.KAI_FRACTION} or {keys.KAI_MEMORY}, not both"])
    asked, gpu, target = frac or mem, config.resources.gpu, view.target()
    whole_gpus = next((c for c in view.containers if c.name != target.name and c.resource(gpu) is not None), None)
    if whole_gpus is not None:
        raise InputError(f"{show(asked[0])} cannot be combined with {whole_gpus.resource_field(gpu)} in the same "
                         "pod (KAI's rule)", field=asked[1], allowed=["a fraction, or whole GPUs"])
    out = Claims(SOURCE, target.name)
    if frac:
        out.add("milli_gpu", fraction(*frac, counts=False)[1], *frac)
    if mem:
        mib = parse_number(*mem, allowed=["a number of MiB, e.g. 2000"])
        out.add("mem_bytes", whole(mib, *mem, 1, 1 << 40, "a number of MiB") << 20, *mem)
    if num:
        out.add("count", whole(parse_number(*num), *num, 1, MAX_DEVICES, "a device count"), *num)
    return out
