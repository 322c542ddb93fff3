"""GPU facts the webhook checks requests against, all from simgpu's catalog: model names (and each peer's
way of naming them), MIG profiles, and the largest GPU's memory."""
from __future__ import annotations

import re
from functools import cache

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import show
from fgpu_contracts.request import MILLI
from simgpu import mig
from simgpu.catalog import all_gpus, lookup_key, names_of, short_names

from .config import AdmissionConfig

_MIG_NAME = re.compile(r"[0-9]+g\.[0-9]+gb(\+me)?")


@cache
def _names() -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((g.name, names_of(g)) for g in all_gpus())


def _resolve_one(token: str, field: str) -> list[str]:
    """A catalog name, short name or alias names one model; else, as HAMi's `use-gputype` matches
    (`A100` is any A100), every model one of whose names contains it."""
    key = lookup_key(token)
    exact = [name for name, names in _names() if key in names]
    found = exact or [name for name, names in _names() if any(key in n for n in names)]
    if not found:
        raise InputError(f"unknown GPU model {show(token)}", field=field, allowed=short_names())
    return found


def resolve_models(text: str, field: str) -> tuple[str, ...]:
    """A comma-separated list of models as canonical catalog names (deduplicated, sorted)."""
    tokens = [t for t in text.split(",") if t.strip()]
    if not tokens:
        raise InputError("names no GPU model", field=field, allowed=short_names())
    return tuple(sorted({name for t in tokens for name in _resolve_one(t, field)}))


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

