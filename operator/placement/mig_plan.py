"""Dynamic MIG: when a MIG request fits no existing instance, which GPU to re-lay, and how.

A GPU marked `mig_dynamic` may have its *idle* instances destroyed and new ones created, as HAMi and Volcano
do on demand. The planner never touches an instance that a pod holds (or one that is unhealthy, or a GPU whose
previous change is still being applied), and a new layout is valid only by simgpu's MIG rules
(`simgpu.mig.placed_layout_problem`: allowed start slices, no overlap, max counts, one +me instance).

Among the changes that would fit the request it prefers the one that keeps the most future requests
placeable. A GPU's *room* is, summed over the model's profiles (weights: the expected demand, uniform by
default), how many instances of each profile could still be created in the memory slices that no held or
new instance covers (idle instances count as free: they can be re-laid too), within the profile's max count
and the compute slices left, each counted by its compute slices: keeping one 7g placeable is worth as much as
the seven 1g it could be cut into, so small instances pack onto GPUs already cut rather than break up an
empty one (FGD's idea of fragmentation, for MIG). The planner picks the change that loses the least room; ties go to the change
that destroys the fewest idle instances, then the node's tie-break rank, then the highest start slice
(where the driver itself puts a GI first). Pure: the operator and `fgpu simulate` both call it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from simgpu import mig
from simgpu.errors import SimgpuError

from .filters import FILTERS
from .filters import MigSlot as MigSlotFilter
from .model import Cluster, MigSlot, Request

#: At most this many per-GPU reasons are spelled out when no re-layout helps (the rest are counted).
SHOWN_REASONS = 4


@dataclass(frozen=True, slots=True)
class GpuChange:
    """One GPU's re-layout: the instances it keeps (held ones among them, untouched), the idle ones it
    destroys and the ones it creates (uuid given by the caller's `name_instance`)."""

    node: int
    gpu: int
    keep: tuple[MigSlot, ...]
    destroy: tuple[MigSlot, ...]
    create: tuple[MigSlot, ...]

    @property
    def layout(self) -> tuple[MigSlot, ...]:
        return tuple(sorted(self.keep + self.create, key=lambda m: m.start))


@dataclass(frozen=True, slots=True)
class Relayout:
    """The plan for one request: the node, each GPU's change, and the instances the request then takes."""

    node: int
    changes: tuple[GpuChange, ...]
    instances: tuple[str, ...]
    room_lost: float


@dataclass(frozen=True, slots=True)
class NoRelayout:
    """Why no re-layout helps: one line per GPU that was considered (kube-scheduler-like, for the Pending
    reason), e.g. "GPU-x: busy instance 1g.10gb@3 blocks 3g.40gb"."""

    reasons: tuple[str, ...]
    considered: int

    def __str__(self) -> str:
        if not self.reasons:
            return "no GPU with dynamic MIG can hold it"
        shown = list(self.reasons[:SHOWN_REASONS])
        if len(self.reasons) > SHOWN_REASONS:
            shown.append(f"{len(self.reasons) - SHOWN_REASONS} more GPU(s) likewise")
        return "; ".join(shown)


def default_name(gpu_uuid: str, profile: str, start: int) -> str:
    """A new instance's name until the device plugin reports the real UUID (one per GPU, profile, slice)."""
    return f"{gpu_uuid}/mig-{profile}@{start}"


# --- room: how many future requests a layout still admits -----------------------------------------------
@cache
def _profiles(model: str) -> tuple[mig.MigProfile, ...]:
    return tuple(mig.profiles(model))


@cache
def _compute_slices(model: str) -> int:
    return mig.slices(model)[0]


def mig_capable(model: str) -> bool:
    try:
        _profiles(model)
    except SimgpuError:
        return False
    return True


@cache
def _room(model: str, fixed: tuple[tuple[str, int], ...], weights: tuple[tuple[str, float], ...]) -> float:
    """Weighted compute slices of the instances that could still be created around the `fixed` (profile,
    start) GIs, profile by profile."""
    profs = {p.name: p for p in _profiles(model)}
    covered = [(start, profs[name].memory_slices) for name, start in fixed]
    compute_left = _compute_slices(model) - sum(profs[name].compute_slices for name, _ in fixed)
    counts: dict[str, int] = {}
    for name, _ in fixed:
        counts[name] = counts.get(name, 0) + 1
    total = 0.0
    for name, w in weights:
        p = profs[name]
        limit = min(p.max_count - counts.get(name, 0), compute_left // p.compute_slices)
        taken: list[tuple[int, int]] = list(covered)
        n = 0
        for place in p.placements:  # equal-size aligned ranges in start order: greedy is the maximum
            if n >= limit:
                break
            if not any(place[0] < t[0] + t[1] and t[0] < place[0] + place[1] for t in taken):
                taken.append(place)
                n += 1
        total += w * n * p.compute_slices
    return total


def _weights(model: str, demand: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    names = [p.name for p in _profiles(model) if not p.media_extensions]
    if demand:
        return tuple((n, float(demand[n])) for n in names if demand.get(n, 0) > 0) or tuple((n, 1.0) for n in names)
    return tuple((n, 1.0) for n in names)


def room(model: str, held: Sequence[tuple[str, int]], demand: Mapping[str, float] | None = None) -> float:
    """The room of a GPU of `model` whose held instances are `held` (profile, start)."""
    return _room(model, tuple(sorted(held)), _weights(model, demand))


# --- one GPU ---------------------------------------------------------------------------------------------
@cache
def _layout_ok(model: str, placed: tuple[tuple[str, int], ...]) -> bool:
    return mig.placed_layout_problem(model, list(placed)) is None


def _overlap(a: tuple[str, int], start: int, size: int, sizes: Mapping[str, int]) -> bool:
    return a[1] < start + size and start < a[1] + sizes[a[0]]


@cache
def _plan_shape(model: str, state: tuple[tuple[str, int, str], ...], profile: str,
                weights: tuple[tuple[str, float], ...]) -> tuple:
    """plan_gpu on a GPU's shape alone ((profile, start, why untouchable: "busy", "unhealthy" or "") per
    instance, in start order), so GPUs in the same state share one answer: ("ok", key, kept indices, start)
    or ("no", reason)."""
    prof = next(p for p in _profiles(model) if p.name == profile)
    sizes = {p.name: p.memory_slices for p in _profiles(model)}
    busy = tuple((n, st) for n, st, fixed in state if fixed)
    idle = [k for k, (_, _, fixed) in enumerate(state) if not fixed]
    before = _room(model, tuple(sorted(busy)), weights)
    best = None
    blocked: list[tuple[int, ...]] = []
    count_problem = ""
    for start, size in prof.placements:
        in_way = tuple(k for k, (n, st, fixed) in enumerate(state) if fixed and _overlap((n, st), start, size, sizes))
        if in_way:
            blocked.append(in_way)
            continue
        base = (*busy, (profile, start))
        if not _layout_ok(model, tuple(sorted(base))):
            count_problem = mig.placed_layout_problem(model, list(base)) or ""
            continue
        kept: list[int] = []
        for k in idle:  # keep every idle instance the new layout allows
            n, st, _ = state[k]
            if not _overlap((n, st), start, size, sizes) and _layout_ok(
                    model, tuple(sorted((*base, *((state[q][0], state[q][1]) for q in kept), (n, st))))):
                kept.append(k)
        after = _room(model, tuple(sorted(base)), weights)
        key = (before - after, len(idle) - len(kept), -start)
        if best is None or key < best[1]:
            best = ("ok", key, tuple(kept), start)
    if best is not None:
        return best
    if count_problem:
        return ("no", f"{profile} does not fit beside the held instances ({count_problem})")
    fewest = min(blocked, key=len)
    names = ", ".join(f"{state[k][0]}@{state[k][1]}" for k in fewest)
    kinds = sorted({state[k][2] for k in fewest})
    which = f"{' or '.join(kinds)} instance{'s' if len(fewest) > 1 else ''}"
    return ("no", f"{which} {names} {'blocks' if len(fewest) == 1 else 'block'} {profile}")


def plan_gpu(model: str, slots: Sequence[MigSlot], held: set[str], profile: str, gpu_uuid: str,
             demand: Mapping[str, float] | None = None, name_instance=default_name
             ) -> tuple[tuple[float, int, int], tuple[MigSlot, ...], tuple[MigSlot, ...], MigSlot] | str:
    """The best way to create one `profile` instance on this GPU: ((room lost, destroyed, -start), kept,
    destroyed, new instance), or the reason it cannot (naming the held instance(s) in the way)."""
    ordered = sorted(slots, key=lambda m: m.start)
    state = tuple((m.profile, m.start, "busy" if m.uuid in held else "" if m.healthy else "unhealthy")
                  for m in ordered)
    answer = _plan_shape(model, state, profile, _weights(model, demand))
    if answer[0] == "no":
        return answer[1]
    _, key, kept_idx, start = answer
    prof = next(p for p in _profiles(model) if p.name == profile)
    keep = tuple(m for k, m in enumerate(ordered) if state[k][2] or k in kept_idx)
    gone = tuple(m for m in ordered if m not in keep)
    new = MigSlot(name_instance(gpu_uuid, profile, start), profile, prof.mem_bytes >> 20, prof.sms, True, start)
    return key, keep, gone, new


# --- the cluster -----------------------------------------------------------------------------------------
def nodes_where_resources_may_help(cluster: Cluster, request: Request, skip: tuple[str, ...],
                                   nodes: np.ndarray | None = None) -> np.ndarray:
    """The node indices (of `nodes`, default all) that pass every filter except the named resource filters:
    the ones a re-layout or an eviction could make fit (kube-scheduler's "nodes where preemption might
    help")."""
    rows = np.arange(cluster.size) if nodes is None else np.asarray(nodes, dtype=np.int64)
    ok = np.ones(rows.size, dtype=bool)
    for plugin in FILTERS:
        if plugin.name in skip or not plugin.applies(cluster, request):
            continue
        for _, failed in plugin.failures(cluster, request, rows):
            ok &= ~failed
    return rows[ok]


def plan_relayout(cluster: Cluster, request: Request, *, node_rank: np.ndarray | None = None,
                  frozen: frozenset[tuple[int, int]] = frozenset(), demand: Mapping[str, float] | None = None,
                  name_instance=default_name, nodes: np.ndarray | None = None, memo: dict | None = None
                  ) -> Relayout | NoRelayout:
    """A re-layout of idle instances on one node's dynamic-MIG GPUs that gives `request` its instances, or
    why none does. `frozen`: (node, gpu) pairs whose last change is still being applied (never two at once).
    `nodes`: only these node indices (e.g. the node a departure freed). `memo`: a dict the caller keeps
    between calls, holding each node's answer until the node changes (its `version`) or a change of its
    finishes; the answers are the same with or without it."""
    if not request.is_mig:
        return NoRelayout((), 0)
    rows = np.flatnonzero(cluster.mig_dynamic_any) if nodes is None else \
        np.asarray([n for n in nodes if cluster.mig_dynamic_any[n]], dtype=np.int64)
    may = nodes_where_resources_may_help(cluster, request, (MigSlotFilter.name,), rows)
    held = set(cluster.mig_taken)
    allowed = cluster.model_mask(request)  # (N, G), once: a pod that names GPU models is re-laid only onto those
    reasons: list[str] = []
    considered = 0
    best: tuple | None = None
    rank = node_rank if node_rank is not None else np.arange(cluster.size)
    shape = (request.mig_profile, request.num_gpu, tuple(sorted((demand or {}).items())))
    frozen_on: dict[int, list[int]] = {}
    for n, g in frozen:
        frozen_on.setdefault(n, []).append(g)
    for node in may:
        node = int(node)
        stamp = (int(cluster.version[node]), tuple(sorted(frozen_on.get(node, ()))))
        kept = memo.get((node, shape)) if memo is not None else None
        if kept is not None and kept[0] == stamp:
            outcome, said = kept[1], kept[2]
        else:
            said = []
            outcome = _plan_node(cluster, request, node, held, frozen, demand, name_instance, said,
                                 None if allowed is None else allowed[node])
            if memo is not None:
                memo[(node, shape)] = (stamp, outcome, said)
        reasons += said
        considered += 1
        if outcome is None:
            continue
        key = (outcome[0], outcome[1], int(rank[node]))
        if best is None or key < best[0]:
            best = (key, outcome[2], outcome[3])
    if best is None:
        return NoRelayout(tuple(reasons), considered)
    (lost, _, _), changes, instances = best
    return Relayout(changes[0].node, changes, instances, lost)


def _plan_node(cluster, request, node, held, frozen, demand, name_instance, reasons, allowed=None):
    """(room lost, destroyed, changes, instances) giving the request `num_gpu` instances on `node`, or None
    (reasons appended). Free instances of the profile are used first, then one GPU change per instance.
    `allowed`: the node's row of the request's GPU-model mask (None: every model)."""
    spec = cluster.nodes[node]
    free = [u for u, (n, p, ok) in cluster.mig_slots.items()
            if n == node and p == request.mig_profile and ok and u not in cluster.mig_taken]
    need = request.num_gpu - len(free)
    layouts = {j: list(g.mig) for j, g in enumerate(spec.gpus) if g.mig_dynamic and (allowed is None or allowed[j])}
    changed: dict[int, tuple[list[MigSlot], list[MigSlot]]] = {}  # gpu -> (destroyed, created)
    taken = set(held) | set(free)  # the free instances it will take must stay too
    lost = destroyed = 0
    instances = list(free)
    for _ in range(max(0, need)):
        pick = None
        for j, slots in layouts.items():
            g = spec.gpus[j]
            if (node, j) in frozen or not mig_capable(g.model) or not _has_profile(g.model, request.mig_profile):
                continue
            if any(m.start < 0 for m in slots):
                continue
            plan = plan_gpu(g.model, slots, taken, request.mig_profile, g.uuid, demand, name_instance)
            if isinstance(plan, str):
                continue
            if pick is None or plan[0] < pick[1][0]:
                pick = (j, plan)
        if pick is None:
            _explain_node(cluster, request, node, layouts, taken, frozen, reasons)
            return None
        j, (key, kept, gone, new) = pick
        layouts[j] = [*kept, new]
        d, c = changed.setdefault(j, ([], []))
        d.extend(gone)  # never one created above: those are held from their creation on
        c.append(new)
        taken.add(new.uuid)
        instances.append(new.uuid)
        lost += key[0]
        destroyed += key[1]
    changes = []
    for j, (gone, created) in sorted(changed.items()):
        original = {m.uuid for m in spec.gpus[j].mig}
        keep = tuple(m for m in layouts[j] if m.uuid in original)
        changes.append(GpuChange(node, j, keep, tuple(m for m in gone if m.uuid in original), tuple(created)))
    if not changes:
        return None  # enough free instances: no re-layout needed (the framework places it)
    return lost, destroyed, tuple(changes), tuple(instances[: request.num_gpu])


def _has_profile(model: str, profile: str) -> bool:
    return any(p.name == profile for p in _profiles(model))


def _explain_node(cluster, request, node, layouts, held, frozen, reasons) -> None:
    spec = cluster.nodes[node]
    for j, slots in layouts.items():
        g = spec.gpus[j]
        if not mig_capable(g.model) or not _has_profile(g.model, request.mig_profile):
            continue
        if (node, j) in frozen:
            reasons.append(f"{g.uuid}: a MIG reconfiguration is in progress")
        elif any(m.start < 0 for m in slots):
            reasons.append(f"{g.uuid}: its instances' positions are not reported, so it cannot be re-laid")
        else:
            plan = plan_gpu(g.model, slots, held, request.mig_profile, g.uuid)
            if isinstance(plan, str):
                reasons.append(f"{g.uuid}: {plan}")
    if request.num_gpu > 1 and not any(r.startswith(tuple(g.uuid for g in spec.gpus)) for r in reasons):
        reasons.append(f"{spec.name}: cannot hold {request.num_gpu} x {request.mig_profile} at once")


def apply_relayout(cluster: Cluster, plan: Relayout) -> None:
    """Put a plan's layouts into the cluster model (the simulator at once; the operator when the node's
    inventory reports the change applied)."""
    for change in plan.changes:
        cluster.set_mig_layout(change.node, change.gpu, change.layout)


def is_relayout_candidate(cluster: Cluster, request: Request) -> bool:
    """Cheap check before planning: a MIG request, and some node has a dynamic-MIG GPU."""
    return request.is_mig and bool(cluster.mig_dynamic_any.any())


__all__ = ["GpuChange", "NoRelayout", "Relayout", "apply_relayout", "default_name", "is_relayout_candidate", "mig_capable", "nodes_where_resources_may_help", "plan_gpu",
           "plan_relayout", "room"]
