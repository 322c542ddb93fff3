"""MIG (Multi-Instance GPU): profile tables, layout checking, and MIG instances as smaller GPUs.

The hardware rule (NVML `nvmlGpuInstancePlacement_t`) is simple: a GPU instance (GI) occupies a range of
*memory* slices `[start, start + size)`, each profile may only start at the slices NVIDIA lists, and
creation fails if the range overlaps an existing GI. On top of that: a per-profile maximum count, and at
most one "+me" (media extensions) instance per GPU. That is all validity needs; 4g+3g is valid (since
R510), 4g+4g is not (4g may only start at 0) and 7g excludes everything. Tables: simgpu/data/mig.yaml.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import resources

import pydantic
import yaml

from simgpu.catalog import GPUSpec, all_gpus, get_gpu
from simgpu.errors import SimgpuError

GIB = 1 << 30


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile of one GPU model; placements are (start, size) in memory slices."""

    name: str
    gpu: str
    profile_id: int | None
    compute_slices: int
    memory_slices: int
    sms: int
    mem_bytes: int
    max_count: int
    placements: tuple[tuple[int, int], ...]
    media_extensions: bool = False
    copy_engines: int = 0
    nvdec: int = 0
    jpeg: int = 0
    ofa: int = 0
    min_driver: str | None = None
    mem_reported: bool = True  # False: nvidia-smi's size was not seen; mem_bytes is inferred
    l2_slices: int = 0  # L2 share in memory-slice units (MIG guide "L2 Cache Size"); 0 = memory_slices

    def __post_init__(self) -> None:
        if not self.l2_slices:
            object.__setattr__(self, "l2_slices", self.memory_slices)

    @property
    def starts(self) -> list[int]:
        return [start for start, _ in self.placements]

    def to_dict(self) -> dict:
        return {
            "name": self.name, "profile_id": self.profile_id, "compute_slices": self.compute_slices,
            "memory_slices": self.memory_slices, "sms": self.sms, "mem_bytes": self.mem_bytes,
            "max_count": self.max_count, "placements": [list(p) for p in self.placements],
            "media_extensions": self.media_extensions, "min_driver": self.min_driver,
        }


@dataclass(frozen=True)
class Placement:
    """Where one GI of a layout goes: memory slices [start, start + size)."""

    profile: str
    start: int
    size: int

    def to_dict(self) -> dict:
        return {"profile": self.profile, "start": self.start, "size": self.size}


# ---------------------------------------------------------------------------------------------- data

class _ProfileRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    name: str = pydantic.Field(pattern=r"^\d+g\.\d+gb(\+me)?$")
    id: int | None
    compute: int = pydantic.Field(gt=0)
    memory: int = pydantic.Field(gt=0)
    sms: int = pydantic.Field(gt=0)
    mem_gib: float | None = pydantic.Field(default=None, gt=0)
    max: int = pydantic.Field(gt=0)
    starts: list[int] = pydantic.Field(min_length=1)
    ce: int = 0
    nvdec: int = 0
    jpeg: int = 0
    ofa: int = 0
    media: bool = False
    min_driver: str | None = None
    l2: int | None = pydantic.Field(default=None, gt=0)


class _GpuMigRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    memory_slices: int = pydantic.Field(gt=0)
    compute_slices: int = pydantic.Field(gt=0)
    sources: list[str] = pydantic.Field(min_length=1)
    profiles: list[_ProfileRecord] = pydantic.Field(min_length=1)

    @pydantic.model_validator(mode="after")
    def _fits(self) -> _GpuMigRecord:
        for p in self.profiles:
            if p.compute > self.compute_slices or p.memory > self.memory_slices or (p.l2 or 0) > p.memory:
                raise ValueError(f"profile {p.name} is larger than the GPU")
            bad = [s for s in p.starts if s < 0 or s % p.memory or s + p.memory > self.memory_slices]
            if bad:
                raise ValueError(f"profile {p.name}: starts {bad} are not aligned placements inside "
                                 f"{self.memory_slices} memory slices")
        return self


class _MigDoc(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    gpus: dict[str, _GpuMigRecord]


@dataclass(frozen=True)
class _GpuTable:
    memory_slices: int
    compute_slices: int
    sources: tuple[str, ...]
    profiles: tuple[MigProfile, ...]


def _mem_bytes(rec: _GpuMigRecord, p: _ProfileRecord) -> tuple[int, bool]:
    """nvidia-smi's size when seen; else that of a profile with as many memory slices; else a share."""
    if p.mem_gib is not None:
        return round(p.mem_gib * GIB), True
    same = [q.mem_gib for q in rec.profiles if q.memory == p.memory and q.mem_gib is not None]
    if same:
        return round(same[0] * GIB), False
    full = max(rec.profiles, key=lambda q: q.memory)
    if full.mem_gib is None:
        raise ValueError(f"profile {p.name}: no memory size to infer from")
    return round(full.mem_gib * GIB * p.memory / rec.memory_slices), False


def parse_mig_tables(doc: object, origin: str = "mig.yaml") -> dict[str, _GpuTable]:
    """Validate the MIG tables; bad data raises SimgpuError naming the GPU/profile and the field."""
    try:
        parsed = _MigDoc.model_validate(doc)
    except pydantic.ValidationError as err:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise SimgpuError(f"{origin}: {where}", field="mig") from None
    tables: dict[str, _GpuTable] = {}
    for gpu_name, rec in parsed.gpus.items():
        canonical = get_gpu(gpu_name).name
        profs = []
        for p in rec.profiles:
            try:
                mem, reported = _mem_bytes(rec, p)
            except ValueError as err:
                raise SimgpuError(f"{origin}: {gpu_name}: {err}", field="mem_gib") from None
            profs.append(MigProfile(
                name=p.name, gpu=canonical, profile_id=p.id, compute_slices=p.compute, memory_slices=p.memory,
                sms=p.sms, mem_bytes=mem, max_count=p.max, placements=tuple((s, p.memory) for s in p.starts),
                media_extensions=p.media, copy_engines=p.ce, nvdec=p.nvdec, jpeg=p.jpeg, ofa=p.ofa,
                min_driver=p.min_driver, mem_reported=reported, l2_slices=p.l2 or p.memory,
            ))
        tables[canonical] = _GpuTable(rec.memory_slices, rec.compute_slices, tuple(rec.sources), tuple(profs))
    return tables


@cache
def _tables() -> dict[str, _GpuTable]:
    text = resources.files("simgpu").joinpath("data", "mig.yaml").read_text()
    return parse_mig_tables(yaml.safe_load(text))


# ---------------------------------------------------------------------------------------------- lookup

def _spec(gpu: GPUSpec | str) -> GPUSpec:
    return gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu)


def mig_gpus() -> list[GPUSpec]:
    """The GPUs that support MIG (and have a profile table)."""
    return [g for g in all_gpus() if g.name in _tables()]


def _table(gpu: GPUSpec | str) -> _GpuTable:
    spec = _spec(gpu)
    table = _tables().get(spec.name)
    if table is None:
        raise SimgpuError(f"{spec.name} does not support MIG", field="gpu",
                          allowed=[g.short_name for g in mig_gpus()])
    return table


def slices(gpu: GPUSpec | str) -> tuple[int, int]:
    """(compute slices, memory slices) of a MIG-capable GPU: (7, 8), or (4, 4) on the A30."""
    table = _table(gpu)
    return table.compute_slices, table.memory_slices


def profiles(gpu: GPUSpec | str) -> list[MigProfile]:
    """The GPU-instance profiles of a MIG-capable GPU, smallest first (as `nvidia-smi mig -lgip`)."""
    return list(_table(gpu).profiles)


def normalize_profile_name(name: str) -> str:
    """"MIG 3g.20gb", "3G.20GB" and " 3g.20gb " all mean "3g.20gb"."""
    text = name.strip().lower() if isinstance(name, str) else ""
    if text.startswith("mig"):
        text = text[3:].lstrip(" -_")
    return text


def get_profile(gpu: GPUSpec | str, name: str) -> MigProfile:
    """A profile by name (with or without the "MIG " prefix, any case)."""
    table = _table(gpu)
    wanted = normalize_profile_name(name)
    for prof in table.profiles:
        if prof.name == wanted:
            return prof
    raise SimgpuError(f"unknown MIG profile {name!r} for {_spec(gpu).name}", field="profile",
                      allowed=[p.name for p in table.profiles])


# ---------------------------------------------------------------------------------------------- layouts

def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _count_problems(table: _GpuTable, profs: list[MigProfile]) -> str | None:
    """Reasons that no placement search can fix: max counts, the "+me" rule, total slices."""
    for name, n in Counter(p.name for p in profs).items():
        limit = next(p.max_count for p in table.profiles if p.name == name)
        if n > limit:
            return f"{n} x {name} requested, but at most {limit} can exist on one GPU"
    media = [p.name for p in profs if p.media_extensions]
    if len(media) > 1:
        return f"only one +me (media extensions) instance may exist per GPU, got {', '.join(media)}"
    mem = sum(p.memory_slices for p in profs)
    if mem > table.memory_slices:
        return f"the layout needs {mem} memory slices, the GPU has {table.memory_slices}"
    comp = sum(p.compute_slices for p in profs)
    if comp > table.compute_slices:
        return f"the layout needs {comp} compute slices, the GPU has {table.compute_slices}"
    return None


def _search(profs: list[MigProfile], taken: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Backtracking over each profile's allowed placements; profs are placed in the given order."""
    if not profs:
        return []
    first, rest = profs[0], profs[1:]
    for place in first.placements:
        if any(_overlaps(place, t) for t in taken):
            continue
        tail = _search(rest, [*taken, place])
        if tail is not None:
            return [place, *tail]
    return None


def _explain_conflict(profs: list[MigProfile], table: _GpuTable) -> str:
    kinds = sorted(set(profs), key=lambda p: -p.memory_slices)
    allowed = "; ".join(f"{p.name} only at memory slices {{{','.join(map(str, p.starts))}}} (size "
                        f"{p.memory_slices})" for p in kinds)
    return (f"no non-overlapping placement exists within {table.memory_slices} memory slices: {allowed}")


def find_placements(gpu: GPUSpec | str, names: list[str],
                    occupied: list[tuple[int, int]] | None = None) -> list[Placement]:
    """Like check_layout, but around GIs that already occupy `occupied` (start, size) ranges."""
    table = _table(gpu)
    profs = [get_profile(gpu, n) for n in names]
    if not profs:
        raise SimgpuError("a layout needs at least one profile", field="profiles",
                          allowed=[p.name for p in table.profiles])
    problem = _count_problems(table, profs)
    if problem:
        raise SimgpuError(f"invalid MIG layout on {table.profiles[0].gpu}: {problem}", field="profiles")
    # Biggest first prunes the search early; results are mapped back to the caller's order.
    order = sorted(range(len(profs)), key=lambda i: (-profs[i].memory_slices, len(profs[i].placements)))
    found = _search([profs[i] for i in order], list(occupied or []))
    if found is None:
        raise SimgpuError(f"invalid MIG layout on {table.profiles[0].gpu}: {_explain_conflict(profs, table)}",
                          field="profiles")
    result: list[Placement | None] = [None] * len(profs)
    for i, (start, size) in zip(order, found, strict=True):
        result[i] = Placement(profs[i].name, start, size)
    return [p for p in result if p is not None]


def check_layout(gpu: GPUSpec | str, names: list[str]) -> list[Placement]:
    """A valid placement for all `names` on an empty GPU (order-independent), or SimgpuError saying why
    none exists (unknown profile: field "profile"; impossible layout: field "profiles")."""
    return find_placements(gpu, names)


def instance_spec(gpu: GPUSpec | str, profile: str | MigProfile) -> GPUSpec:
    """A MIG instance as an isolated smaller GPU: its own SMs and memory (nvidia-smi's sizes); DRAM
    bandwidth by its share of memory slices, L2 by the MIG guide's L2 share (1/8 for the 1g profiles
    that have 2 memory slices), power by its share of compute slices."""
    spec = _spec(gpu)
    table = _table(spec)
    prof = profile if isinstance(profile, MigProfile) else get_profile(spec, profile)
    share = prof.memory_slices / table.memory_slices
    l2_share = prof.l2_slices / table.memory_slices
    return spec.model_copy(update={
        "name": f"{spec.name} MIG {prof.name}",
        "short_name": f"{spec.short_name}-MIG-{prof.name}",
        "aliases": [],
        "sms": prof.sms,
        "mem_bytes": prof.mem_bytes,
        "mem_bw_bytes_per_s": spec.mem_bw_bytes_per_s * share,
        "l2_bytes": int(spec.l2_bytes * l2_share),
        "power_w": spec.power_w * prof.compute_slices / table.compute_slices,
        "mig": False,
        "datasheet_tflops": {},
        "sources": [*spec.sources, *(f"MIG: {s}" for s in table.sources)],
    })


def placed_layout_problem(gpu: GPUSpec | str, placed: list[tuple[str, int]]) -> str | None:
    """Why GIs at these fixed (profile, start) positions cannot coexist on one GPU, or None when they can:
    the same rules as `check_layout` (allowed starts, no overlap, max counts, one +me), for a layout whose
    positions are already chosen (a re-layout around GIs that must not move)."""
    table = _table(gpu)
    profs = [get_profile(gpu, name) for name, _ in placed]
    problem = _count_problems(table, profs)
    if problem:
        return problem
    ranges = []
    for prof, (_, start) in zip(profs, placed, strict=True):
        if start not in prof.starts:
            return f"{prof.name} cannot start at memory slice {start} (allowed: {', '.join(map(str, prof.starts))})"
        here = (start, prof.memory_slices)
        clash = next((r for r in ranges if _overlaps(here, r[1])), None)
        if clash is not None:
            return f"{prof.name}@{start} overlaps {clash[0]}@{clash[1][0]}"
        ranges.append((prof.name, here))
    return None
