"""GPU facts the placement core needs (memory, SMs, MIG capability), for every GPU model fgpu knows.

Two sources, in this order: the openb trace's own model names (FGD simulator's memory table, so replays stay
byte-identical), then simgpu's catalog (V100 ... H200, with names, short names and aliases) for live clusters.
"""
from __future__ import annotations

from functools import cache

#: Per-model GPU memory in MiB for the openb trace's models. Public models: the FGD simulator's
#: `MapGpuTypeMemoryMiB` (kubernetes-scheduler-simulator, pkg/type/open-gpu-share/utils/const.go). G1-G3 are
#: undisclosed Alibaba models; the placeholder sizes follow the openb data README.
TRACE_GPU_MEMORY_MIB: dict[str, int] = {
    "P4": 7611, "2080": 11019, "1080": 11178, "M40": 11448, "T4": 15109, "V100M16": 16160, "P100": 16280,
    "A10": 22731, "3090": 24268, "V100M32": 32510, "A100": 81251, "G1": 10000, "G2": 20000, "G3": 30000,
}
_MIB = 1 << 20


@cache
def _catalog_spec(model: str):
    """simgpu's spec for a catalog name, short name or alias; None when the catalog does not know it."""
    from simgpu.catalog import get_gpu
    from simgpu.errors import SimgpuError

    try:
        return get_gpu(model)
    except SimgpuError:
        return None


def gpu_memory_mib(model: str) -> int:
    """Memory of one GPU of `model` in MiB (0 for a model no source knows: nothing fractional fits it)."""
    if model in TRACE_GPU_MEMORY_MIB:
        return TRACE_GPU_MEMORY_MIB[model]
    spec = _catalog_spec(model) if model else None
    return spec.mem_bytes // _MIB if spec else 0


def gpu_sms(model: str) -> int:
    spec = _catalog_spec(model) if model else None
    return spec.sms if spec else 0


def canonical_model(model: str) -> str:
    """The catalog's name for a model (aliases resolved); trace and unknown names are kept as given."""
    if model in TRACE_GPU_MEMORY_MIB:
        return model
    spec = _catalog_spec(model) if model else None
    return spec.name if spec else model


def known_model(model: str) -> bool:
    return model in TRACE_GPU_MEMORY_MIB or _catalog_spec(model) is not None


def name_key(name: str) -> str:
    """How GPU names compare: case-insensitively, spaces and underscores as hyphens (simgpu's lookup key)."""
    from simgpu.catalog import lookup_key

    return lookup_key(name)


@cache
def gpu_names(model: str) -> frozenset[str]:
    """Every name a GPU of `model` answers to, as `name_key`s: its catalog names (canonical, short, NVML,
    aliases), or the model string alone for a model the catalog does not know (a trace's, a real node's)."""
    from simgpu.catalog import names_of

    spec = _catalog_spec(model) if model else None
    return names_of(spec) if spec else frozenset({name_key(model)} if model else ())


def hami_type_name(model: str) -> str:
    """The device type HAMi registers, `NVIDIA-` + NVML's name (`NVIDIA-NVIDIA A100-SXM4-80GB`), which its
    `use-gputype` / `nouse-gputype` match against; a model the catalog does not know stands for its NVML name."""
    spec = _catalog_spec(model) if model else None
    return "NVIDIA-" + (spec.nvml_name if spec and spec.nvml_name else model)
