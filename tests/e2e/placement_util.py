"""Helpers for the operator placement e2e tests (test_operator_placement*.py): one `fgpu operator` with its
admission webhook for a whole module, KWOK nodes carrying any inventory, pods in every peer's spelling pinned
to a test's own nodes, and what the operator made of them (the hand-off annotation, or kube-scheduler's
"0/N nodes are available: ..." reasons)."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_proc import start_operator, stop, wait_webhook_live
from polling import wait_for

from devcluster.kubeplane import free_port
from fgpu_contracts import keys

GIB = 1 << 30
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


def inventory_node(make_node, name: str, inventory: str, publish) -> str:
    """A KWOK node advertising the devices `inventory` (a `fgpu.io/gpu-inventory` value) lists; then
    `publish(name, inventory)` puts the inventory on it, as the node's device plugin would."""
    make_node(name, json.loads(inventory)["resources"])
    publish(name, inventory)
    return name


def unless_gone(call, *args, **kwargs) -> None:
    """A deletion that is done already (404) is done."""
    try:
        call(*args, **kwargs)
    except ApiException as e:
        if e.status != 404:
            raise


def set_inventory(core, name: str, inventory: str) -> None:
    """Publish a node's inventory, as its device plugin does."""
    core.patch_node(name, {"metadata": {"annotations": {keys.INVENTORY: inventory}}})


def pod(name: str, on, *, annotations: dict | None = None, labels: dict | None = None, limits: dict | None = None,
        scheduler: str | None = None, containers: list | None = None, init: list | None = None,
        tolerations: list | None = None) -> dict:
    """A pod as a user writes it (limits/annotations/labels in some peer's spelling) whose one container
    `main` carries `limits`; `on` pins it to these nodes (required node affinity on the hostname label), so
    a test's pods see only that test's nodes, yet the scheduler still chooses among them."""
    spec: dict = {
        "containers": containers or [{"name": "main", "image": "busybox", "resources": {
            "limits": dict(limits or {}), "requests": {"cpu": "100m"}}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(on)}]}]}}},
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if init:
        spec["initContainers"] = init
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})},
            "spec": spec}


def reasons(message: str) -> dict[str, int]:
    """kube-scheduler's "0/N nodes are available: 2 r1, 1 r2." as {r1: 2, r2: 1}, less the nodes that a
    test's pinning rules out (other tests' nodes, the module's base nodes)."""
    _, _, tail = message.partition(": ")
    out = {}
    for part in filter(None, tail.rstrip(".").split(", ")):
        count, _, reason = part.partition(" ")
        out[reason] = int(count)
    out.pop(AFFINITY_REASON, None)
    return out


@dataclass
class Device:
    uuid: str
    milli: int
    mem: int | None
    sm: int | None
    mig: str | None

    @classmethod
    def of(cls, raw: dict) -> Device:
        return cls(raw["uuid"], raw.get("milliGpu", 1000), raw.get("memBytes"), raw.get("smPct"), raw.get("migProfile"))


@dataclass
class Placed:
    """A bound pod as the device plugin will read it: node, and per container its priority and devices."""

    node: str
    priority: dict[str, int]
    devices: dict[str, list[Device]]

    def one(self, container: str = "main") -> Device:
        (device,) = self.devices[container]
        return device


@dataclass
class Pods:
    """The pods one test creates (deleted with grace 0 when it ends, before its nodes), and their fate."""

    core: object
    namespace: str
    names: list[str] = field(default_factory=list)
    changes: int = 0

    def sync(self, node: str, annotations: dict | None = None, spec: dict | None = None) -> None:
        """Change a node (its inventory, cordon, taints) and wait until the operator's model has the change:
        the same patch sets a fresh label, which a GPU-less witness pod, tolerating everything, requires."""
        self.changes += 1
        seen = f"{node}-{self.changes}"
        body: dict = {"metadata": {"labels": {"fgpu-test/seen": seen}, "annotations": annotations or {}}}
        if spec:
            body["spec"] = spec
        self.core.patch_node(node, body)
        witness = pod(f"seen-{seen}", [node], scheduler=keys.SCHEDULER_NAME, tolerations=[{"operator": "Exists"}])
        witness["spec"]["nodeSelector"] = {"fgpu-test/seen": seen}
        self.create(witness)
        name = witness["metadata"]["name"]
        wait_for(lambda: self.read(name).spec.node_name == node, what=f"the operator to see node {node} change",
                 show=lambda: self.condition(name))

    def create(self, body: dict):
        self.names.append(body["metadata"]["name"])
        return self.core.create_namespaced_pod(self.namespace, body)

    def read(self, name: str):
        return self.core.read_namespaced_pod(name, self.namespace)

    def placed(self, name: str, timeout: float = 30) -> Placed:
        """Wait until `name` is bound; its node and the hand-off annotation that landed with the Binding."""
        p = wait_for(lambda: (p := self.read(name)).spec.node_name and p, timeout=timeout, what=f"{name} bound",
                     show=lambda: self.condition(name))
        a = json.loads(p.metadata.annotations[keys.ASSIGNMENT])
        assert a["node"] == p.spec.node_name
        return Placed(a["node"], {c["name"]: c.get("priority", 1) for c in a["containers"]},
                      {c["name"]: [Device.of(d) for d in c["devices"]] for c in a["containers"]})

    def condition(self, name: str):
        status = self.read(name).status
        return next((c for c in status.conditions or () if c.type == "PodScheduled"), None)

    def pending(self, name: str, expected: dict[str, int]) -> str:
        """Wait until `name` is explained unschedulable with exactly `expected` reasons on the test's own
        nodes (see `reasons`); the message. Fails if the pod is bound instead."""
        def explained():
            p = self.read(name)
            assert not p.spec.node_name, f"{name} was bound to {p.spec.node_name}; expected it to wait: {expected}"
            c = self.condition(name)
            ok = c is not None and c.status == "False" and c.reason == "Unschedulable"
            return c.message if ok and reasons(c.message) == expected else None
        return wait_for(explained, what=f"{name} pending with {expected}", show=lambda: self.condition(name))

    def still_pending(self, name: str) -> None:
        p = self.read(name)
        assert not p.spec.node_name, f"{name} was bound to {p.spec.node_name}"

    def delete(self, name: str) -> None:
        unless_gone(self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0)

    def cleanup(self) -> None:
        for name in self.names:
            self.delete(name)


def denial(create) -> tuple[int, str]:
    """(HTTP status, message) of a create/patch the apiserver refused; fails if it was accepted."""
    with pytest.raises(ApiException) as refused:
        create()
    return refused.value.status, json.loads(refused.value.body)["message"]


@dataclass
class Operator:
    """The module's running operator, seen from the test: the admin's core API and a namespace for pods."""

    core: object
    namespace: str


def operator_with_webhook(k8s, tmp_path, base_nodes):
    """The body of a module fixture (`yield from` it): `base_nodes(core)` creates the module's nodes
    (inventories in place before the operator lists them), then `fgpu operator` starts with its webhook
    managed and answering; yields an `Operator`; stops it and deletes the nodes afterwards."""
    api = k8s.api()
    core = client.CoreV1Api(api)
    made = base_nodes(core)
    namespace = k8s.create_namespace(f"placement-{uuid.uuid4().hex[:6]}")
    proc = start_operator(k8s, tmp_path, "--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1",
                          "--manage-webhook-config")
    try:
        wait_webhook_live(core, namespace)
        yield Operator(core, namespace)
    finally:
        stop(proc)
        core.delete_namespace(namespace)  # its pods went with each test
        for name in made:
            unless_gone(core.delete_node, name)
        api.close()
