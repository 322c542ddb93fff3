"""The cluster's SchedulingPolicy: the object named `default` sets what a pod gets when its own request does
not say (node and GPU policy), which schedulers' GPU pods fgpu takes over and the unit of `aliyun.com/gpu-mem`.
Without one, the operator's flags are the defaults; a field it leaves out is the flag's, and deleting it
goes back to them (command.PRECEDENCE). Any other SchedulingPolicy
is refused in its status (one cluster, one set of defaults). A pod's own annotations always win.

The leader reports on each object in its status: `Accepted` True, or False with one line saying why (a name
other than `default`, or a spec the operator cannot read), and the generation it saw.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.policy import SchedulingPolicySpec
from fgpu_contracts.wire import parse_json

from ..kube.session import ApiSession
from ..objects import timestamp
from .gpunodes import MERGE_PATCH

log = logging.getLogger("fgpu.policy")
NAME = "default"
PATH = f"/apis/{keys.CRD_GROUP}/{keys.CRD_VERSION}/{keys.SCHEDULING_POLICY_PLURAL}"


def read_spec(obj: dict) -> SchedulingPolicySpec:
    """The object's spec, or an InputError naming the field that is wrong."""
    return parse_json(SchedulingPolicySpec, json.dumps(obj.get("spec") or {}), "spec")


class PolicyWatch:
    """Feed it SchedulingPolicy watch events; it calls `apply(spec)` whenever the defaults change."""

    def __init__(self, flags: SchedulingPolicySpec, apply: Callable[[SchedulingPolicySpec], None]):
        self.flags, self.apply = flags, apply
        self.current = flags
        self._verdicts: dict[str, tuple[int | None, str, str, str]] = {}  # name -> (generation, status, reason, msg)
        self._written: dict[str, tuple] = {}

    def on_event(self, kind: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        name, generation = meta.get("name", ""), meta.get("generation")
        if kind == "DELETED":
            self._verdicts.pop(name, None)
            self._written.pop(name, None)
            if name == NAME:
                self._use(self.flags, "SchedulingPolicy default deleted: back to the operator's flags")
            return
        if name != NAME:
            self._verdicts[name] = (generation, "False", "NotDefault",
                                    f"only the SchedulingPolicy named {NAME!r} applies; this one is ignored")
            return
        try:
            given = read_spec(obj)
        except InputError as err:
            self._verdicts[name] = (generation, "False", "Invalid", f"{err}; the previous defaults stay")
            return
        # the object wins field by field: what it leaves out is the operator's flag, not the built-in default
        spec = self.flags.model_copy(update={k: getattr(given, k) for k in given.model_fields_set
                                             if getattr(given, k) is not None})
        self._verdicts[name] = (generation, "True", "Applied",
                                f"node policy {spec.node_policy}, GPU policy {spec.gpu_policy}")
        self._use(spec, f"SchedulingPolicy {NAME} generation {generation}")

    def _use(self, spec: SchedulingPolicySpec, why: str) -> None:
        if spec != self.current:
            log.info("scheduling defaults from %s: %s", why, spec.model_dump(mode="json", by_alias=True))
            self.current = spec
            self.apply(spec)

    async def write_status(self, api: ApiSession) -> None:
        """Write each object's verdict once (the leader calls it after events and on taking over)."""
        due = {n: v for n, v in self._verdicts.items() if self._written.get(n) != v}
        for name, verdict in due.items():
            generation, status, reason, message = verdict
            condition = {"type": "Accepted", "status": status, "reason": reason, "message": message,
                         "lastTransitionTime": timestamp(), "observedGeneration": generation}
            body = {"status": {"observedGeneration": generation, "conditions": [condition]}}
            out = await api.request("PATCH", f"{PATH}/{name}/status", body=body, content_type=MERGE_PATCH)
            if out.ok:
                self._written[name] = verdict
            else:
                log.warning("SchedulingPolicy %s status not written: %s", name, out)

    def forget_written(self) -> None:
        """A new leader writes every verdict again."""
        self._written.clear()

    async def run(self, api: ApiSession, is_leader: Callable[[], bool], interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if is_leader():
                await self.write_status(api)
