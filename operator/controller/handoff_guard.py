"""Keeping a bound pod's hand-off what the scheduler wrote.

The device plugin hands a container whatever `fgpu.io/assignment` its pod carries when kubelet calls Allocate.
The admission webhook refuses edits to it, but the webhook may not be in the path (failurePolicy Ignore, the
webhook down, an admin bypassing it): then anyone with update rights on the pod could grow its share after
binding. The scheduler is the one who decided the share, so it is the root of truth: it remembers the hand-off
of every bound pod (what it wrote on the Binding, or what it saw when it first saw the pod bound) and, when a
watch event shows something else, writes the remembered value back and says so in a Warning Event.

With a hand-off key (`--handoff-key-file`) the scheduler also signs what it gives (fgpu_contracts.signature)
and the device plugin hands out only what verifies; `distrust` is what a restarted scheduler makes of a bound
pod whose hand-off does not verify.

Pure: `compare` and `distrust` are the decisions, `HandoffGuard` the memory; the scheduler does the writes.
"""
from __future__ import annotations

from dataclasses import dataclass

from fgpu_contracts import keys
from fgpu_contracts.assignment import parse_assignment
from fgpu_contracts.errors import InputError
from fgpu_contracts.signature import problem

#: The scheduler's half of the hand-off (`fgpu.io/allocated` is the device plugin's; `fgpu.io/request` is
#: read only before binding).
GUARDED = (keys.ASSIGNMENT, keys.ASSIGNED_AT, keys.ASSIGNMENT_SIGNATURE)
REASON = "AssignmentRestored"
FAILED = "AssignmentNotRestored"
UNVERIFIED = "AssignmentUnverified"
_SHOWN = 160  # characters of a forged value quoted in the Event


@dataclass(frozen=True)
class Handoff:
    """A bound pod's guarded annotations (None: absent)."""

    assignment: str | None = None
    assigned_at: str | None = None
    signature: str | None = None

    @classmethod
    def of(cls, pod: dict) -> Handoff:
        return cls.of_annotations((pod.get("metadata") or {}).get("annotations") or {})

    @classmethod
    def of_annotations(cls, annotations: dict) -> Handoff:
        values = [annotations.get(k) for k in GUARDED]
        return NONE if all(v is None for v in values) else cls(*values)

    def value(self, key: str) -> str | None:
        return {keys.ASSIGNMENT: self.assignment, keys.ASSIGNED_AT: self.assigned_at,
                keys.ASSIGNMENT_SIGNATURE: self.signature}[key]


NONE = Handoff()  # a pod bound without a GPU allocation (shared: most bound pods)


@dataclass(frozen=True)
class Restore:
    """The merge patch that puts the hand-off back (a None value removes the key), and why, for the Event."""

    annotations: dict[str, str | None]
    message: str
    reason: str = REASON

    def failed(self, why: str) -> tuple[str, str]:
        """(reason, message) of the Event when the write-back itself failed (e.g. 403: no `patch` on pods)."""
        return FAILED, self.message.replace("; restored what the scheduler gave: ", f"; NOT restored ({why}), the "
                                            "scheduler gave: ", 1)


def compare(recorded: Handoff, current: Handoff) -> Restore | None:
    """None when the pod still carries what was recorded; else what to write back."""
    if current == recorded:
        return None
    changed = [k for k in GUARDED if current.value(k) != recorded.value(k)]
    what = "; ".join(_change(k, current.value(k)) for k in changed)
    given = describe(recorded.assignment) if recorded.assignment is not None else \
        "it was bound without a GPU allocation"
    message = (f"{what} after binding, not by fgpu's scheduler (no pod can change its own GPU allocation; the "
               f"admission webhook refuses this, so it was not in the path); restored what the scheduler gave: {given}")
    return Restore({k: recorded.value(k) for k in changed}, message)


def _change(key: str, value: str | None) -> str:
    if value is None:
        return f"{key} was removed"
    shown = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
    return f"{key} was set to {shown}"


def describe(assignment: str) -> str:
    """One line per the scheduler's own assignment: `main: 300 milli-GPU, 30% SMs, 8589934592 bytes of GPU-0`."""
    try:
        a = parse_assignment(assignment)
    except InputError:
        return assignment[:_SHOWN]
    parts = []
    for c in a.containers:
        shares = []
        for d in c.devices:
            if d.mig_profile:
                shares.append(f"MIG {d.mig_profile} {d.uuid}")
                continue
            mem = f", {d.mem_bytes} bytes" if d.mem_bytes is not None else ""
            shares.append(f"{d.milli_gpu} milli-GPU, {d.sm_pct if d.sm_pct is not None else 100}% SMs{mem} "
                          f"of {d.uuid}")
        parts.append(f"{c.name}: {'; '.join(shares)}")
    return f"node {a.node}, " + "; ".join(parts)


class HandoffGuard:
    """uid -> the hand-off a bound pod must keep. `record` it at bind (or first sight), `check` each later
    event, `forget` it with the pod."""

    def __init__(self) -> None:
        self._kept: dict[str, Handoff] = {}

    def record(self, uid: str, handoff: Handoff) -> None:
        self._kept[uid] = handoff

    def forget(self, uid: str) -> None:
        self._kept.pop(uid, None)

    def check(self, uid: str, pod: dict) -> Restore | None:
        """What to restore on this bound pod (None: nothing, or a pod this guard does not know)."""
        recorded = self._kept.get(uid)
        return None if recorded is None else compare(recorded, Handoff.of(pod))

    def __len__(self) -> int:
        return len(self._kept)


@dataclass(frozen=True)
class Distrust:
    """A bound pod's hand-off that fgpu's scheduler did not sign: why, and whether to count what it claims."""

    message: str
    count_claim: bool
    reason: str = UNVERIFIED


def distrust(key: bytes | None, uid: str, node: str, pod: dict) -> Distrust | None:
    """None when the pod's assignment verifies (or there is none, or no key to check with). Else: a pod whose
    containers were not allocated yet will never get the claimed share (the device plugin refuses it), so none
    is counted; one already allocated holds whatever it was given at start, which is not known any more, so
    its claim stays reserved: that gives the pod nothing (its containers keep what they got) and never lets
    the scheduler place a second pod onto a share that may be in use."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if key is None or keys.ASSIGNMENT not in annotations:
        return None
    why = problem(key, uid, node, annotations)
    if why is None:
        return None
    allocated = bool(annotations.get(keys.ALLOCATED, "").strip("[] "))
    then = ("its containers already run with what they were given at start, which is not known: its claim "
            "stays reserved until the pod ends" if allocated else
            "its GPU share is not counted and the device plugin hands it to no container")
    return Distrust(f"{keys.ASSIGNMENT} does not verify ({why}): fgpu's scheduler did not give it; {then}",
                    count_claim=allocated)
