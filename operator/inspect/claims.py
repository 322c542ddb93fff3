"""The invariants of DRA allocations, checked on what the API server holds (pure, raw JSON): whatever wrote a
ResourceClaim's status (kube-scheduler's DRA plugin, another allocator, a hand edit), the apiserver does not
check that two claims never take the same silicon; this does, for every driver's devices.

- Every allocated device is published: its driver, pool and name are in the pool's newest ResourceSlices.
- A device without allowMultipleAllocations is allocated to one claim at most (admin access aside).
- A shared device's allocations carry a shareID, and their consumedCapacity adds up to at most each of its
  capacities.
- The devices in use of one pool consume at most each counter of its counter sets (a shared device's
  counters charged once, as kube-scheduler's allocator charges them).
- One allocator per device (docs/dra.md): a device that fgpu-dra publishes for fgpu-scheduler (tainted
  `gpu.fgpu.io/allocator=fgpu-scheduler`) is reserved only for fgpu-scheduler's pods, and fgpu-dra's other
  devices never for them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from fgpu_contracts import dra as dra_names
from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_quantity

DeviceKey = tuple[str, str, str]  # driver, pool, device


def _amount(value: object) -> Decimal | None:
    try:
        return parse_quantity(value, "quantity")
    except InputError:
        return None


def _newest(slices: Iterable[Mapping]) -> list[Mapping]:
    """The slices of each pool's highest generation (older ones are being replaced)."""
    slices = list(slices)
    top: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        top[key] = max(top.get(key, 0), int((spec.get("pool") or {}).get("generation") or 0))
    return [s for s in slices
            if int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)
            == top[((s.get("spec") or {}).get("driver", ""), ((s.get("spec") or {}).get("pool") or {}).get("name", ""))]]


def _published(slices: Iterable[Mapping]) -> tuple[dict[DeviceKey, Mapping], dict[tuple[str, str, str], dict]]:
    devices: dict[DeviceKey, Mapping] = {}
    counters: dict[tuple[str, str, str], dict[str, Decimal]] = {}  # (driver, pool, counter set) -> counter -> value
    for s in _newest(slices):
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or ():
            devices[(driver, pool, d.get("name", ""))] = d
        for cs in spec.get("sharedCounters") or ():
            counters[(driver, pool, cs.get("name", ""))] = {
                name: _amount(c.get("value")) or Decimal(0) for name, c in (cs.get("counters") or {}).items()}
    return devices, counters


def _claim_name(claim: Mapping) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _fgpu_owned(device: Mapping) -> bool:
    return any(t.get("key") == dra_names.TAINT_ALLOCATOR and t.get("value") == dra_names.ALLOCATOR_FGPU
               for t in device.get("taints") or ())


def _allocator_violations(where: str, device: Mapping, claim: Mapping, schedulers: Mapping[str, tuple[str, str]]
                          ) -> list[str]:
    """A device of fgpu-dra reserved for a pod of the wrong scheduler: two allocators may hand it out twice."""
    owned = _fgpu_owned(device)
    out = []
    for ref in (claim.get("status") or {}).get("reservedFor") or ():
        pod, scheduler = schedulers.get(ref.get("uid", ""), ("", ""))
        if not pod or (scheduler == keys.SCHEDULER_NAME) == owned:
            continue
        if owned:
            out.append(f"{where} is fgpu-scheduler's ({dra_names.TAINT_ALLOCATOR}) but reserved for pod {pod} "
                       f"of {scheduler}")
        else:
            out.append(f"{where} is not fgpu-scheduler's (no {dra_names.TAINT_ALLOCATOR} taint) but reserved for "
                       f"pod {pod} of fgpu-scheduler")
    return out


def claim_violations(slices: Iterable[Mapping], claims: Iterable[Mapping], pods: Iterable[Mapping] = ()) -> list[str]:
    """Every violation, one line each (empty: all hold). `pods`: to check each device's allocator."""
    schedulers = {(p.get("metadata") or {}).get("uid", ""): (
        f"{(p.get('metadata') or {}).get('namespace', '')}/{(p.get('metadata') or {}).get('name', '')}",
        (p.get("spec") or {}).get("schedulerName") or "default-scheduler") for p in pods}
    devices, counters = _published(slices)
    holders: dict[DeviceKey, list[str]] = {}
    consumed: dict[DeviceKey, dict[str, Decimal]] = {}
    out: list[str] = []
    for claim in claims:
        name = _claim_name(claim)
        results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
                   or ())
        for r in results:
            key = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            where = f"claim {name}: device {key[2]} of pool {key[1]} ({key[0]})"
            device = devices.get(key)
            if device is None:
                out.append(f"{where} is not published in any ResourceSlice")
                continue
            if key[0] == dra_names.DRIVER:
                out += _allocator_violations(where, device, claim, schedulers)
            if r.get("adminAccess"):
                continue
            holders.setdefault(key, []).append(name)
            if not device.get("allowMultipleAllocations"):
                continue
            if not r.get("shareID"):
                out.append(f"{where} is shared but its allocation has no shareID")
            totals = consumed.setdefault(key, {})
            for cap, value in (r.get("consumedCapacity") or {}).items():
                totals[cap] = totals.get(cap, Decimal(0)) + (_amount(value) or Decimal(0))
    for key, names in holders.items():
        device = devices[key]
        if not device.get("allowMultipleAllocations") and len(names) > 1:
            out.append(f"device {key[2]} of pool {key[1]} ({key[0]}) is allocated to {len(names)} claims: "
                       f"{', '.join(sorted(names))}")
        for cap, total in consumed.get(key, {}).items():
            value = _amount(((device.get("capacity") or {}).get(cap) or {}).get("value"))
            if value is not None and total > value:
                out.append(f"device {key[2]} of pool {key[1]} ({key[0]}): its shares consume {total} of {cap}, "
                           f"it has {value} ({', '.join(sorted(names))})")
    used: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    for key in holders:
        for c in devices[key].get("consumesCounters") or ():
            cset = (key[0], key[1], c.get("counterSet", ""))
            for counter, amount in (c.get("counters") or {}).items():
                totals = used.setdefault(cset, {})
                totals[counter] = totals.get(counter, Decimal(0)) + (_amount(amount.get("value")) or Decimal(0))
    for cset, totals in sorted(used.items()):
        for counter, total in sorted(totals.items()):
            have = counters.get(cset, {}).get(counter, Decimal(0))
            if total > have:
                users = sorted(f"{k[2]} ({', '.join(sorted(set(holders[k])))})" for k in holders
                               if k[:2] == cset[:2] and any(c.get("counterSet") == cset[2] and counter in
                                                            (c.get("counters") or {})
                                                            for c in devices[k].get("consumesCounters") or ()))
                out.append(f"counter {cset[2]}/{counter} of pool {cset[1]} ({cset[0]}) is consumed {total} times "
                           f"its {have}: {'; '.join(users)}")
                break  # one line per counter set: the rest of its counters say the same
    return out
