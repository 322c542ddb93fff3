"""Thin Kubernetes shell: pending pods on this node (for fractional Allocate), the `fgpu.io/allocated` record,
node labels + inventory annotation, the node's GPUNode, and fractional mode's node-level extended resources.

Allocate must answer in milliseconds with a hundred pods pending, so pods come from a watch-fed cache
(raw JSON, no model deserialisation); a cache miss triggers one fresh LIST before Allocate gives up.
"""
from __future__ import annotations

import json
import logging
import os
import threading

from deviceplugin.handoff import PodView
from deviceplugin.records import AllocationRecorder
from fgpu_contracts.inventory import Inventory, gpunode
from fgpu_contracts.keys import ALLOCATED, CRD_GROUP, CRD_VERSION, GPUNODE_PLURAL

log = logging.getLogger("fgpu.deviceplugin.kube")
JSON_PATCH = "application/json-patch+json"


def _discard(resp) -> None:
    """Drain a raw response and hand its connection back to the pool: a leaked one costs a TLS handshake
    (~5 ms of CPU) on the next request, competing with Allocate for the GIL."""
    resp.read()
    resp.release_conn()


def load_api_client(kubeconfig: str | None):
    """An ApiClient from --kubeconfig, $KUBECONFIG, or the in-cluster service account; None = standalone."""
    from kubernetes import client, config

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return config.new_client_from_config(config_file=path)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    return None


def pod_view(obj: dict, arrived: int | None = None) -> PodView:
    """`arrived`: the pod's place in the node's arrival order; None: this object's own resourceVersion (right
    for a pod seen for the first time, which nothing but its binding has written since it reached the node)."""
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status", {})
    return PodView(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        node_name=spec.get("nodeName", "") or "", phase=status.get("phase", "") or "",
        annotations=dict(meta.get("annotations") or {}), created=meta.get("creationTimestamp", "") or "",
        arrived=revision(meta) if arrived is None else arrived, terminating=bool(meta.get("deletionTimestamp")),
        version=revision(meta),
    )


def revision(meta: dict) -> int:
    """resourceVersion as a number (etcd's revision, which orders every write); 0 when it is not one."""
    try:
        return int(meta.get("resourceVersion") or 0)
    except ValueError:
        return 0


class KubePods:
    """PodSource over the API: pods bound to `node`, kept by a background watch."""

    def __init__(self, api_client, node: str, watch: bool = True, journal_path: str | None = None) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.node = node
        self._pods: dict[str, PodView] = {}
        self._lock = threading.Lock()
        self._rv = ""
        self._stop = threading.Event()
        self._recorded: dict[str, set[str]] = {}  # pod uid -> containers this plugin allocated
        self._views: dict[str, PodView] = {}  # pod uid -> the view Allocate matched (if the cache drops it)
        self._synced = False
        # one writer thread: patches of one pod land in order (each carries the full list so far)
        self.recorder = AllocationRecorder(self._write_record, journal_path)
        if watch:
            threading.Thread(target=self._watch_loop, name="pod-watch", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.recorder.close()

    def _selector(self) -> str:
        return f"spec.nodeName={self.node}"

    def refresh(self) -> None:
        resp = self.core.list_pod_for_all_namespaces(field_selector=self._selector(), _preload_content=False)
        try:
            doc = json.loads(resp.data)
        finally:
            resp.release_conn()
        with self._lock:
            known = {uid: p.arrived for uid, p in self._pods.items()}
            views = (pod_view(item, known.get((item.get("metadata") or {}).get("uid", "")))
                     for item in doc.get("items", []))
            self._pods = {p.uid: p for p in views if p.admissible}
            self._rv = doc.get("metadata", {}).get("resourceVersion", "")
            self._synced = True
        log.debug("pod list: %d pending on %s at resourceVersion %s", len(self._pods), self.node, self._rv)

    def pending_pods(self, node: str, fresh: bool = False) -> list[PodView]:
        if fresh or not self._synced:
            self.refresh()
        with self._lock:
            return list(self._pods.values())

    def confirm(self, pod: PodView) -> PodView | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core.read_namespaced_pod(pod.name, pod.namespace, _preload_content=False)
        except ApiException as err:
            if err.status != 404:
                raise
            obj = None
        else:
            try:
                obj = json.loads(resp.data)
            finally:
                resp.release_conn()
        with self._lock:
            cached = self._pods.get(pod.uid)
            if cached is None:  # the watch has removed it meanwhile
                return None
            current = None if obj is None else pod_view(obj, pod.arrived)
            if current is None or current.uid != pod.uid or current.node_name != self.node or not current.admissible:
                self._pods.pop(pod.uid, None)
                return None
            if current.version >= cached.version:  # (a watch event newer than this read may have landed)
                self._pods[pod.uid] = current
            return self._pods[pod.uid]

    def _apply(self, kind: str, obj: dict) -> None:
        with self._lock:
            known = self._pods.get((obj.get("metadata") or {}).get("uid", ""))
            pod = pod_view(obj, known.arrived if known else None)
            if kind == "DELETED" or not pod.admissible:
                self._pods.pop(pod.uid, None)
            else:
                self._pods[pod.uid] = pod
            self._rv = obj.get("metadata", {}).get("resourceVersion", self._rv)
        log.debug("pod watch: %s %s/%s at resourceVersion %s", kind, pod.namespace, pod.name, pod.version)

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._synced or not self._rv:
                    self.refresh()
                resp = self.core.list_pod_for_all_namespaces(
                    field_selector=self._selector(), watch=True, resource_version=self._rv,
                    allow_watch_bookmarks=True, timeout_seconds=60, _preload_content=False)
                buf = b""
                for chunk in resp.stream(65536):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":  # e.g. 410 Gone: relist
                            self._synced = False
                            break
                        if event.get("type") == "BOOKMARK":
                            self._rv = event["object"]["metadata"].get("resourceVersion", self._rv)
                            continue
                        self._apply(event.get("type", ""), event.get("object", {}))
                    if self._stop.is_set() or not self._synced:
                        break
                resp.release_conn()
            except Exception as err:  # network blips, apiserver restarts: relist and go on
                log.debug("pod watch restarting: %s", err)
                self._synced = False
                self._stop.wait(1.0)

    def mark_allocated(self, pod: PodView, container: str) -> None:
        """Record the allocated container on the pod, off Allocate's critical path (see records.py)."""
        with self._lock:
            self._recorded.setdefault(pod.uid, set()).add(container)
            self._views[pod.uid] = pod
            if len(self._recorded) > 4096:  # bounded: keep pods still pending
                self._recorded = {u: c for u, c in self._recorded.items() if u in self._pods or u == pod.uid}
                self._views = {u: v for u, v in self._views.items() if u in self._recorded}
        self.recorder.record((pod.uid, pod.namespace, pod.name), container)

    def _write_record(self, key: tuple[str, str, str], containers: frozenset[str]) -> bool:
        uid, namespace, name = key
        if not self._synced:  # merge with the pod's current record, not an empty one (journal replay at start)
            try:
                self.refresh()
            except Exception as err:
                log.warning("cannot read pods of node %s to record allocations: %s", self.node, err)
                return False
        with self._lock:
            mine = self._recorded.setdefault(uid, set())
            mine.update(containers)
            view = self._pods.get(uid) or self._views.get(uid)
            done = sorted(mine | (view.allocated_containers() if view else frozenset()))
        body = {"metadata": {"annotations": {ALLOCATED: json.dumps(done)}}}
        try:
            _discard(self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False))
        except Exception as err:
            if getattr(err, "status", None) == 404:  # the pod is gone: nothing left to protect
                return True
            log.warning("cannot record allocation on %s/%s: %s", namespace, name, err)
            return False
        return True


class KubeNode:
    """Labels, the inventory annotation and node-level extended resources on this node's object, and the
    node's GPUNode."""

    def __init__(self, api_client, node: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.node = node
        self._told_no_crd = False

    def publish(self, labels: dict[str, str], annotations: dict[str, str]) -> None:
        """Set the labels and annotations, and remove labels of ours that no longer hold (a merge patch only
        adds: a gpu.product from before the node became mixed-model would otherwise stay)."""
        from deviceplugin.labels import stale_labels

        current = self.core.read_node(self.node).metadata.labels or {}
        patch: dict[str, str | None] = {**labels, **dict.fromkeys(stale_labels(current, labels))}
        self.core.patch_node(self.node, {"metadata": {"labels": patch, "annotations": annotations}})

    def publish_capacity(self, resources: dict[str, int]) -> None:
        if not resources:
            return
        values = {k: str(v) for k, v in resources.items()}
        self.core.patch_node_status(self.node, {"status": {"capacity": values, "allocatable": values}})

    def publish_gpunode(self, inv: Inventory) -> None:
        """Create or update this node's GPUNode: its spec is the inventory (replaced whole, so a resource that is
        gone does not linger, as it would under a merge patch); its status is the operator's and left alone.
        Owned by the Node, so it goes when the node does. Without the CRD installed, says so once and goes on:
        the node annotation carries the inventory too, for this release."""
        from kubernetes.client.exceptions import ApiException

        where = (CRD_GROUP, CRD_VERSION, GPUNODE_PLURAL)
        body = gpunode(inv).model_dump(mode="json", by_alias=True, exclude={"status"})
        try:
            _discard(self.custom.patch_cluster_custom_object(
                *where, self.node, [{"op": "replace", "path": "/spec", "value": body["spec"]}],
                _content_type=JSON_PATCH, _preload_content=False))
            return
        except ApiException as err:
            if err.status != 404:
                raise
        uid = self.core.read_node(self.node).metadata.uid
        body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}]
        try:
            _discard(self.custom.create_cluster_custom_object(*where, body, _preload_content=False))
        except ApiException as err:
            if err.status != 404:
                raise
            if not self._told_no_crd:
                self._told_no_crd = True
                log.warning("no GPUNode CRD (%s.%s) on the cluster: publishing the inventory as the node "
                            "annotation only (install deploy/crds/gpunode.yaml)", GPUNODE_PLURAL, CRD_GROUP)
