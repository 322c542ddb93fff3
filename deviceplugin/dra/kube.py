"""Thin Kubernetes shell of the DRA driver: read a ResourceClaim for NodePrepareResources, and publish the
node's ResourceSlices (create, update, delete by name, so the pool is replaced as a whole).

resource.k8s.io/v1 objects go through the generic object API (plain dicts, as the apiserver serves them), so
the driver does not depend on the Kubernetes client's generated models for a group it may not know yet.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping

from fgpu_contracts.dra import DRIVER

log = logging.getLogger("fgpu.dra.kube")
GROUP, VERSION = "resource.k8s.io", "v1"


def _objects(api_client):
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


class ClaimNotFound(LookupError):
    """The claim does not exist (any more)."""


class KubeClaims:
    """ClaimSource over the API: one GET per claim the kubelet asks to prepare (a quorum read, so an
    allocation written a moment ago is seen). A claim that does not exist raises ClaimNotFound."""

    def __init__(self, api_client) -> None:
        self.api = _objects(api_client)

    def __call__(self, namespace: str, name: str) -> Mapping:
        from kubernetes.client.rest import ApiException

        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)
        except ApiException as e:
            if e.status == 404:
                raise ClaimNotFound(f"resourceclaim {namespace}/{name} not found") from None
            raise


def _same(a: Mapping, b: Mapping) -> bool:
    """Two slice specs equal but for the pool's generation (which every publication raises) and the taints'
    timeAdded (which the apiserver stamps on a taint that has none)."""
    def strip(spec: Mapping) -> dict:
        spec = dict(spec)
        spec["pool"] = {k: v for k, v in spec.get("pool", {}).items() if k != "generation"}
        if "devices" in spec:
            spec["devices"] = [dict(d, taints=[{k: v for k, v in t.items() if k != "timeAdded"}
                                               for t in d["taints"]]) if d.get("taints") else d
                               for d in spec["devices"]]
        return spec
    return strip(a) == strip(b)


class SlicePublisher:
    """Keeps the node's slices equal to the last `publish`ed list; nothing is written when nothing changed."""

    def __init__(self, api_client, node: str) -> None:
        self.api = _objects(api_client)
        self.node = node

    def existing(self) -> dict[str, dict]:
        listed = self.api.list_cluster_custom_object(
            GROUP, VERSION, "resourceslices", field_selector=f"spec.nodeName={self.node},spec.driver={DRIVER}")
        return {s["metadata"]["name"]: s for s in listed.get("items", [])}

    def publish(self, build) -> int:
        """`build(generation)` -> the slices; returns the generation now published."""
        current = self.existing()
        generation = max((s["spec"]["pool"].get("generation", 0) for s in current.values()), default=0)
        wanted = build(max(generation, 1))
        if set(current) == {s["metadata"]["name"] for s in wanted} and all(
                _same(current[s["metadata"]["name"]]["spec"], s["spec"]) for s in wanted):
            return generation
        generation += 1
        wanted = build(generation)
        for obj in wanted:
            name = obj["metadata"]["name"]
            if name in current:
                body = dict(obj, metadata=dict(obj["metadata"], resourceVersion=current[name]["metadata"]
                                                ["resourceVersion"]))
                self.api.replace_cluster_custom_object(GROUP, VERSION, "resourceslices", name, body)
            else:
                self.api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", obj)
        for name in set(current) - {s["metadata"]["name"] for s in wanted}:
            self.api.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
        log.info("published %d ResourceSlices for node %s (pool generation %d)", len(wanted), self.node, generation)
        return generation

    def withdraw(self) -> None:
        for name in self.existing():
            self.api.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
