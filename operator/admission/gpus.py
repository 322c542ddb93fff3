"""GPU facts the webhook checks requests against, from simgpu's catalog: MIG profiles and the largest GPU's
memory; and the form of a GPU-model list (which GPUs it names is the placement core's call, by each
spelling's rule: placement.models)."""
from __future__ import annotations

import re
from functools import cache

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import show
from fgpu_contracts.request import MILLI
from simgpu import mig
from simgpu.catalog import all_gpus, get_gpu

from .config import AdmissionConfig

_MIG_NAME = re.compile(r"[0-9]+g\.[0-9]+gb(\+me)?")


#: A GPU-model name as peers write them: catalog names (`A100-SXM4-80GB`), NVML names (`NVIDIA A100-SXM4-80GB`),
#: label-safe ones (`NVIDIA-A100-SXM4-80GB`); at most 64 characters.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,63}")
_MODEL_ALLOWED = ["comma-separated GPU model names (letters, digits, spaces, ._+()-), e.g. A100,H100-PCIe"]


def model_names(text: str, field: str) -> tuple[str, ...]:
    """A comma-separated list of GPU model names, trimmed and deduplicated, as written: which GPUs they name
    is the placement core's call (each spelling's rule, placement.models), since a node with a model fgpu
    does not know may join later. Only a malformed list is refused."""
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = next((n for n in names if not _MODEL_NAME.fullmatch(n)), None)
    if not names or bad is not None:
        raise InputError(f"{show(bad if bad is not None else text)} is not a GPU model name", field=field,
                         allowed=_MODEL_ALLOWED)
    return names


@cache
def mig_profiles() -> tuple[str, ...]:
    """Every GPU-instance profile of every MIG-capable catalogued GPU."""
    return tuple(sorted({p.name for g in mig.mig_gpus() for p in mig.profiles(g)}))


def mig_profile(text: str, field: str) -> str:
    """A MIG profile some catalogued GPU has (`3g.40gb`, `MIG 1g.10gb+me`), normalised."""
    name = mig.normalize_profile_name(text)
    if name not in mig_profiles():
        raise InputError(f"unknown MIG profile {show(text)}", field=field, allowed=mig_profiles())
    return name


def is_mig_profile_name(text: str) -> bool:
    """Shaped like a MIG profile (`<g>g.<mem>gb`), known or not."""
    return _MIG_NAME.fullmatch(text) is not None


@cache
def _catalog_largest() -> int:
    return max(g.mem_bytes for g in all_gpus())


def largest_gpu_bytes(config: AdmissionConfig) -> int:
    return config.max_gpu_memory_bytes or _catalog_largest()


def memory_share_milli(mem_bytes: int | None, mem_pct: int | None, config: AdmissionConfig) -> int:
    """The compute share a memory-only request is sized as: its memory's share of the largest GPU, rounded
    up (a lower bound of its share on any GPU; the fit rule checks the memory itself)."""
    if mem_pct is not None:
        return mem_pct * MILLI // 100
    share = -(-(mem_bytes or 0) * MILLI // largest_gpu_bytes(config))
    return max(1, min(MILLI, share))



def smallest_mig_profile(mem_bytes: int, models: tuple[str, ...], field: str, text: str) -> str:
    """HAMi's dynamic MIG (`nvidia.com/vgpu-mode: mig`): the memory asked picks the smallest GPU-instance
    profile that holds it (least memory, then fewest compute slices; no +me profile), among the cluster's MIG
    models (`models`; empty: every catalogued one). Profiles of one name are alike across models."""
    gpus = [get_gpu(m) for m in models] if models else mig.mig_gpus()
    fitting = [p for g in gpus for p in mig.profiles(g) if not p.media_extensions and p.mem_bytes >= mem_bytes]
    if not fitting:
        largest = max((p for g in gpus for p in mig.profiles(g)), key=lambda p: p.mem_bytes)
        raise InputError(f"{show(text)} MiB is more than any MIG instance holds", field=field,
                         allowed=[f"at most {largest.mem_bytes >> 20} MiB ({largest.name} on {largest.gpu})"])
    return min(fitting, key=lambda p: (p.mem_bytes, p.compute_slices)).name
