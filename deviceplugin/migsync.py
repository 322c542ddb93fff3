"""Dynamic MIG on the node: the device plugin's side of the GPUNode hand-shake (fgpu_contracts/inventory.py).

The operator's leader writes a GPU's desired layout in the node's GPUNode status.migChanges. This thread reads
it (every `poll_s`), and for a change it has not answered yet: reports Applying (in the inventory it
publishes: that GPU's spec `migChange`), has the node daemon apply it (`Reconfigure`: the daemon destroys the
idle instances the layout drops, refuses if one has a live context, and creates the new ones after the
GPU's reconfiguration time), then takes the GPU's instances from the daemon's answer, re-advertises
(ListAndWatch sends the new device lists; a new profile gets its resource server) and reports Done, or
Failed with the daemon's reason. The daemon is the hardware: at start the layouts are read from it, so a
plugin restarted after a change advertises what the GPU has, and a change asked again is answered from
what the GPU has (a layout it already has is applied at once).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from fgpu_contracts.inventory import MigChange, MigChangeReport
from fgpu_contracts.keys import CRD_GROUP, CRD_VERSION, GPUNODE_PLURAL
from simgpu import mig
from simgpu.nodeconfig import GpuDevice, MigInstance

log = logging.getLogger("fgpu.deviceplugin.mig")
IN_FLIGHT = ("Pending", "Applying")


def gpus_from_daemon(gpus: list[GpuDevice], devices: list[dict]) -> list[GpuDevice]:
    """The dynamic-MIG GPUs' instances as the daemon lists them (other GPUs as configured)."""
    out = []
    for g in gpus:
        if not g.mig_dynamic:
            out.append(g)
            continue
        mine = sorted((d for d in devices if d.get("parent") == g.uuid), key=lambda d: d.get("start", 0))
        out.append(replace(g, mig=tuple(_instance(g, d["uuid"], d["profile"], d.get("start", 0)) for d in mine)))
    return out


def _instance(gpu: GpuDevice, uuid: str, profile: str, start: int) -> MigInstance:
    p = mig.get_profile(gpu.model, profile)
    return MigInstance(uuid, profile, start, p.sms, p.mem_bytes)


class MigSync:
    """Applies the GPUNode's desired layouts through the daemon; `on_layout(gpus)` re-advertises."""

    def __init__(self, api_client, node: str, daemon_socket: str, gpus: list[GpuDevice],
                 on_layout: Callable[[list[GpuDevice]], None], on_report: Callable[[], None],
                 stop: threading.Event, poll_s: float = 0.5) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.node, self.daemon_socket = node, daemon_socket
        self.gpus = list(gpus)
        self.on_layout, self.on_report, self.stop, self.poll_s = on_layout, on_report, stop, poll_s
        self.reports: dict[str, MigChangeReport] = {}  # GPU uuid -> the answer to its last change
        self._applying: set[str] = set()
        self._lock = threading.Lock()

    @property
    def dynamic(self) -> set[str]:
        return {g.uuid for g in self.gpus if g.mig_dynamic}

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="mig-sync", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        self._read_layouts()
        while not self.stop.is_set():
            try:
                obj = self.custom.get_cluster_custom_object(CRD_GROUP, CRD_VERSION, GPUNODE_PLURAL, self.node)
            except Exception as err:  # no GPUNode yet (first publish), API unavailable: next round
                log.debug("GPUNode %s not read: %s", self.node, err)
            else:
                for doc in (obj.get("status") or {}).get("migChanges") or ():
                    self._consider(doc)
            self.stop.wait(self.poll_s)

    def _read_layouts(self) -> None:
        from simgpu.client import DaemonClient

        while not self.stop.is_set():
            try:
                devices = DaemonClient(self.daemon_socket, timeout=5.0).devices()
            except Exception as err:  # the daemon is starting
                log.info("node daemon not reachable yet for the MIG layouts (%s)", err)
                self.stop.wait(1.0)
                continue
            self._set_layout(gpus_from_daemon(self.gpus, devices))
            return

    def _set_layout(self, gpus: list[GpuDevice]) -> None:
        with self._lock:
            changed = gpus != self.gpus
            self.gpus = gpus
        if changed:
            self.on_layout(gpus)

    def _consider(self, doc: dict) -> None:
        try:
            change = MigChange.model_validate(doc)
        except ValueError as err:
            log.warning("GPUNode %s: a migChanges entry is not one: %s", self.node, err)
            return
        if change.phase not in IN_FLIGHT or change.gpu not in self.dynamic:
            return
        with self._lock:
            last = self.reports.get(change.gpu)
            if change.gpu in self._applying or (last is not None and last.id == change.id):
                return
            self._applying.add(change.gpu)
        threading.Thread(target=self._apply, args=(change,), name=f"mig-{change.id}", daemon=True).start()

    def _report(self, gpu: str, change_id: str, phase: str, message: str = "") -> None:
        with self._lock:
            self.reports[gpu] = MigChangeReport(id=change_id, phase=phase, message=message)
        self.on_report()

    def _apply(self, change: MigChange) -> None:
        from simgpu.client import DaemonClient

        layout = [(p.profile, p.start) for p in change.layout]
        try:
            self._report(change.gpu, change.id, "Applying")
            log.info("MIG change %s of GPU %s: applying %s", change.id, change.gpu,
                     ", ".join(f"{p}@{s}" for p, s in layout) or "no instance")
            try:
                devices = DaemonClient(self.daemon_socket).reconfigure(change.gpu, layout, change.id)
            except Exception as err:  # refused (an instance in use), invalid, or the daemon is gone
                log.warning("MIG change %s of GPU %s failed: %s", change.id, change.gpu, err)
                self._read_layouts()  # what the GPU has now
                self._report(change.gpu, change.id, "Failed", str(err))
                return
            self._set_layout(gpus_from_daemon(self.gpus, devices))
            self._report(change.gpu, change.id, "Done")
        finally:
            with self._lock:
                self._applying.discard(change.gpu)
