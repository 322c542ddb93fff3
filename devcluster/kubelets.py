"""The kubelet's device-plugin side for KWOK nodes, one process for several nodes:

    python -m devcluster.kubelets --kubeconfig FILE --node NAME=DIR [--node NAME=DIR ...]

KWOK fakes a node's status and its pods' lifecycle but knows nothing of device plugins. For each node this
serves a stub kubelet (devcluster.stub_kubelet) on DIR/kubelet.sock, where the node's fgpu-device-plugin
registers, and does what the kubelet would with it:

* once the plugin lists its devices, the node's capacity and allocatable count each resource's healthy devices;
* a pod bound to the node gets, per container and per extended resource the plugin serves, the devices the
  plugin prefers among the free ones (GetPreferredAllocation) and then Allocate, as the kubelet's device
  manager does it: init containers first, each in order, then the app containers; devices an init container
  held are reused by the containers after it (a restartable "sidecar" init container keeps its own), and each
  container's devices, reused or new, go to the plugin's Allocate for that container; the response (env and mounts,
  the env's paths under a mount rewritten to the host path, as the container would reach them) goes to
  DIR/pods/<namespace>.<pod>.<container>.json, and the pod is annotated `devcluster.fgpu.io/allocated`, which
  the pod-ready stage of KWOK's stages (kwok_stages()) waits for before it marks the pod Running;
* pods are admitted one node at a time in the order they reached the node (the kubelet's order, which the
  plugin's matching of an Allocate to a pod relies on): a pod whose Allocate must be retried (the plugin down,
  restarting or unable to read the API) holds back the node's later pods; one the plugin refuses is failed as
  the kubelet fails it (phase Failed, reason UnexpectedAdmissionError);
* a deleted pod's devices are free again and its files go;
* restarted (the fault tests SIGKILL it), it allocates nothing twice: a pod already annotated ALLOCATED keeps
  the devices its files name (the kubelet's checkpoint), and Allocate goes to the plugin's latest socket.

Runs until SIGTERM or SIGINT; logs to stderr.
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from pathlib import Path

import grpc
import yaml

from devcluster.stub_kubelet import StubKubelet
from deviceplugin.api import api_pb2, api_pb2_grpc
from deviceplugin.kube import revision

log = logging.getLogger("devcluster.kubelets")
ALLOCATED = "devcluster.fgpu.io/allocated"  # the demo's own key: written here, read by KWOK's pod-ready stage
RETRY_S = 0.5
GIVE_UP_S = 120.0
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
           grpc.StatusCode.UNKNOWN)  # the plugin down, restarting or its API unreachable: ask again later


class Rejected(Exception):
    """The plugin refused the pod's Allocate: the kubelet fails its admission."""


def kwok_stages(upstream: Path, out: Path) -> Path:
    """KWOK's upstream stages (from testbin) with pod-ready waiting for this module's ALLOCATED annotation, so a
    pod stays Pending until its devices are allocated, as on a real node (the device plugin hands its share
    only to a pending pod)."""
    docs = [d for d in yaml.safe_load_all(upstream.read_text()) if d]
    (ready,) = [d for d in docs if d["metadata"]["name"] == "pod-ready"]
    ready["spec"]["selector"]["matchExpressions"].append(
        {"key": f'.metadata.annotations["{ALLOCATED}"]', "operator": "Exists"})
    out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out


class Node:
    """One KWOK node's kubelet side: its stub kubelet and the devices it has handed out."""

    def __init__(self, name: str, directory: Path, core):
        self.name, self.dir, self.core = name, directory, core
        self.pods_dir = directory / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.kubelet = StubKubelet(str(directory))
        self.held: dict[str, dict[str, list[str]]] = {}  # pod uid -> resource -> device IDs
        self.files: dict[str, list[Path]] = {}
        self.partial: dict[str, dict[str, dict]] = {}  # pod uid -> container -> what Allocate answered so far
        self.reported: dict[str, int] = {}  # resource -> device count last written to the node
        self._stubs: dict[str, tuple[str, api_pb2_grpc.DevicePluginStub]] = {}  # resource -> (endpoint, stub)

    def resources(self) -> dict[str, list[str]]:
        """Healthy device IDs per registered resource, as ListAndWatch last said."""
        with self.kubelet._cond:
            return {r: [d.ID for d in devs if d.health == "Healthy"] for r, devs in self.kubelet.devices.items()}

    def report_capacity(self) -> None:
        counts = {r: len(ids) for r, ids in self.resources().items()}
        if counts and counts != self.reported:
            values = {r: str(n) for r, n in counts.items()}
            self.core.patch_node_status(self.name, {"status": {"capacity": values, "allocatable": values}})
            log.info("%s: capacity %s", self.name, values)
            self.reported = counts

    def plugin(self, resource: str) -> api_pb2_grpc.DevicePluginStub:
        """The plugin's latest endpoint: a restarted plugin registers a new socket, and the old one is gone."""
        endpoint = self.kubelet.wait_registered(resource).endpoint
        if self._stubs.get(resource, (None,))[0] != endpoint:
            self._stubs[resource] = (endpoint, self.kubelet.plugin(resource))
        return self._stubs[resource][1]

    def restore(self, pod: dict) -> None:
        """A pod admitted before this process restarted (it carries ALLOCATED): take its devices back from its
        record files, as the kubelet does from its checkpoint, instead of allocating them again."""
        meta, held, paths = pod["metadata"], {}, []
        for container, _ in in_kubelet_order(pod["spec"]):
            path = self.pods_dir / f"{meta['namespace']}.{meta['name']}.{container['name']}.json"
            try:
                devices = json.loads(path.read_text())["devices"]
            except (OSError, ValueError, KeyError):
                continue
            for resource, ids in devices.items():
                held.setdefault(resource, []).extend(ids)
            paths.append(path)
        self.held[meta["uid"]], self.files[meta["uid"]] = held, paths

    def free(self, resource: str) -> list[str]:
        taken = {d for held in self.held.values() for d in held.get(resource, [])}
        return [d for d in self.resources().get(resource, []) if d not in taken]

    def admit(self, pod: dict) -> bool:
        """Allocate every container's devices and record what Allocate said; True when done (or nothing to do),
        False to try again later (the plugin has not registered the resource, or is unreachable). What was
        allocated before a retry is kept, not asked for again: the plugin would hand the next share out.
        Raises Rejected when the plugin refuses (the kubelet fails such a pod's admission)."""
        meta, spec = pod["metadata"], pod["spec"]
        served = self.resources()
        held = self.held.setdefault(meta["uid"], {})
        partial = self.partial.setdefault(meta["uid"], {})
        reusable: dict[str, list[str]] = {}  # resource -> devices finished init containers left to later ones
        records = []
        for container, keeps in in_kubelet_order(spec):
            limits = (container.get("resources") or {}).get("limits") or {}
            wanted = {r: int(n) for r, n in limits.items() if "/" in r and not r.startswith(("cpu", "memory"))}
            done = partial.setdefault(container["name"], {"envs": {}, "mounts": [], "devices": {}})
            for resource, count in sorted(wanted.items()):
                if resource in done["devices"]:
                    _pass_on(reusable, resource, done["devices"][resource], keeps)
                    continue
                if resource not in served:
                    if self.reported:  # the plugin is up and does not serve it: an accounting resource
                        continue
                    return False
                reuse = sorted(reusable.get(resource, []))[:count]  # the kubelet's sets.List order
                free = self.free(resource)
                if len(reuse) + len(free) < count:
                    log.warning("%s/%s: %d %s asked, %d free", meta["namespace"], meta["name"], count, resource,
                                len(free) + len(reuse))
                    return False
                stub = self.plugin(resource)
                if len(reuse) == count:  # the kubelet takes reusable devices first and asks no preference then
                    ids = reuse
                else:
                    preferred = stub.GetPreferredAllocation(api_pb2.PreferredAllocationRequest(container_requests=[
                        api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=reuse + free,
                                                                    must_include_deviceIDs=reuse,
                                                                    allocation_size=count)]), timeout=10)
                    ids = list(preferred.container_responses[0].deviceIDs) or reuse + free[:count - len(reuse)]
                try:
                    response = stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                        api_pb2.ContainerAllocateRequest(devices_ids=ids)]), timeout=10)
                except grpc.RpcError as e:
                    if e.code() in RETRIED:
                        log.info("%s/%s: Allocate %s: %s (will retry)", meta["namespace"], meta["name"], resource,
                                 e.details())
                        return False
                    raise Rejected(f"Allocate failed due to {e.details()}, which is unexpected") from None
                answer = response.container_responses[0]
                done["envs"].update(answer.envs)
                done["mounts"] += [{"container_path": m.container_path, "host_path": m.host_path}
                                   for m in answer.mounts]
                done["devices"][resource] = ids
                held.setdefault(resource, []).extend(d for d in ids if d not in reuse)
                _pass_on(reusable, resource, ids, keeps)
            envs, mounts = dict(done["envs"]), done["mounts"]
            for key, value in envs.items():  # the container reaches a mounted path at its host path here
                for m in mounts:
                    if value == m["container_path"] or value.startswith(m["container_path"].rstrip("/") + "/"):
                        envs[key] = m["host_path"] + value[len(m["container_path"]):]
            records.append({"namespace": meta["namespace"], "pod": meta["name"], "container": container["name"],
                            "node": self.name, "command": [*(container.get("command") or []),
                                                           *(container.get("args") or [])],
                            "devices": done["devices"], "env": envs, "mounts": mounts})
        paths = []
        for record in records:
            path = self.pods_dir / f"{record['namespace']}.{record['pod']}.{record['container']}.json"
            path.write_text(json.dumps(record, indent=1))
            paths.append(path)
        self.files[meta["uid"]] = paths
        self.partial.pop(meta["uid"], None)
        self.core.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"annotations": {
            ALLOCATED: json.dumps({c["container"]: c["devices"] for c in records}, sort_keys=True)}}})
        log.info("%s: %s/%s allocated %s", self.name, meta["namespace"], meta["name"],
                 {c["container"]: c["devices"] for c in records})
        return True

    def reject(self, pod: dict, why: str) -> None:
        """As the kubelet fails a pod whose admission failed: phase Failed, reason UnexpectedAdmissionError."""
        meta = pod["metadata"]
        log.warning("%s: %s/%s rejected: %s", self.name, meta["namespace"], meta["name"], why)
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
                "phase": "Failed", "reason": "UnexpectedAdmissionError", "message": f"Pod was rejected: {why}"}})
        except Exception as e:  # not retried: the pod stays Pending, as when the kubelet's status write is lost
            log.warning("%s/%s: rejection not written: %s", meta["namespace"], meta["name"], e)

    def forget(self, uid: str) -> None:
        self.held.pop(uid, None)
        self.partial.pop(uid, None)
        for path in self.files.pop(uid, []):
            path.unlink(missing_ok=True)


def in_kubelet_order(spec: dict) -> list[tuple[dict, bool]]:
    """(container, keeps its devices) in the order the kubelet allocates: init containers, then app
    containers. An init container that runs to completion hands its devices on; a restartable one (a
    sidecar, `restartPolicy: Always`) and every app container keep theirs."""
    inits = [(c, c.get("restartPolicy") == "Always") for c in spec.get("initContainers") or ()]
    return inits + [(c, True) for c in spec.get("containers") or ()]


def _pass_on(reusable: dict[str, list[str]], resource: str, ids: list[str], keeps: bool) -> None:
    """The kubelet's devicesToReuse after a container's allocation: a finishing init container's devices join
    it, a container that keeps its devices takes them out of it."""
    pool = reusable.setdefault(resource, [])
    if keeps:
        pool[:] = [d for d in pool if d not in ids]
    else:
        pool.extend(d for d in ids if d not in pool)


class Kubelets:
    def __init__(self, core, nodes: dict[str, Path]):
        self.core = core
        self.nodes = {name: Node(name, d, core) for name, d in nodes.items()}
        self.waiting: dict[str, tuple[dict, float]] = {}  # uid -> (pod, first seen)
        self.done: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def start(self) -> None:
        for node in self.nodes.values():
            node.kubelet.start()
            log.info("%s: kubelet.sock at %s", node.name, node.kubelet.socket)
        threading.Thread(target=self._watch, daemon=True).start()

    def on_pod(self, kind: str, pod: dict) -> None:
        node = self.nodes.get(pod["spec"].get("nodeName") or "")
        uid = pod["metadata"]["uid"]
        with self.lock:
            if node is None:
                return
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                node.forget(uid)
                self.waiting.pop(uid, None)
                self.done.discard(uid)
            elif uid not in self.done and ALLOCATED in (pod["metadata"].get("annotations") or {}):
                node.restore(pod)  # admitted before a restart of this process
                self.done.add(uid)
            elif uid not in self.done and pod["status"].get("phase") == "Pending":
                self.waiting.setdefault(uid, (pod, time.monotonic()))

    def _watch(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            try:
                listed = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)
                # in the order they were written (a list comes sorted by name): the order a watch had shown
                for pod in sorted(listed["items"], key=lambda p: revision(p["metadata"])):
                    self.on_pod("ADDED", pod)
                stream = watch.Watch().stream(self.core.list_pod_for_all_namespaces, _preload_content=False,
                                              resource_version=listed["metadata"]["resourceVersion"],
                                              timeout_seconds=60)
                for event in stream:
                    obj = event["raw_object"] if "raw_object" in event else event["object"]
                    self.on_pod(event["type"], obj)
                    if self.stop.is_set():
                        return
            except Exception as e:  # apiserver restarting, watch expired: list again
                log.info("pod watch: %s; listing again", e)
                time.sleep(1)

    def step(self) -> None:
        """Report capacities; admit the pods that wait for their devices."""
        for node in self.nodes.values():
            try:
                node.report_capacity()
            except Exception as e:
                log.warning("%s: capacity not written: %s", node.name, e)
        with self.lock:
            waiting = list(self.waiting.items())
        blocked: set[str] = set()  # nodes whose first waiting pod must go first: the plugin matches in that order
        for uid, (pod, since) in waiting:
            name = pod["spec"]["nodeName"]
            if name in blocked:
                continue
            node = self.nodes[name]
            try:
                ok = node.admit(pod)
            except Rejected as e:
                node.reject(pod, str(e))
                ok = True
            except Exception as e:
                log.warning("%s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], e)
                ok = False
            with self.lock:
                if ok:
                    self.waiting.pop(uid, None)
                    self.done.add(uid)
                elif time.monotonic() - since > GIVE_UP_S:
                    log.error("%s/%s: devices not allocated in %.0f s; giving up", pod["metadata"]["namespace"],
                              pod["metadata"]["name"], GIVE_UP_S)
                    self.waiting.pop(uid, None)
                else:
                    blocked.add(name)

    def run(self) -> None:
        while not self.stop.wait(RETRY_S):
            self.step()
        for node in self.nodes.values():
            node.kubelet.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devcluster.kubelets", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node", action="append", required=True, metavar="NAME=DIR",
                   help="a KWOK node and the directory of its kubelet.sock (repeatable)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    kubelets = Kubelets(core, {n.split("=", 1)[0]: Path(n.split("=", 1)[1]) for n in args.node})
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: kubelets.stop.set())
    kubelets.start()
    kubelets.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
