"""The CRD manifests (deploy/crds/) against the pydantic models the components read and write: the schemas are
structural (the apiserver refuses others), they accept what the models dump, they reject what the models
reject, and field names, required fields, enums, defaults and nullability agree, so neither side can drift."""
from __future__ import annotations

import copy
import json
import types
import typing
from pathlib import Path

import jsonschema
import pydantic
import pytest
import yaml
from sample_inventory import plugin_inventory

from fgpu_contracts.inventory import (
    GpuAllocation,
    GPUNode,
    GPUNodeStatus,
    dump_inventory,
    gpunode,
)
from fgpu_contracts.keys import (
    CRD_GROUP,
    CRD_VERSION,
    GPUNODE_KIND,
    GPUNODE_PLURAL,
    SCHEDULING_POLICY_KIND,
    SCHEDULING_POLICY_PLURAL,
)
from fgpu_contracts.policy import SchedulingPolicy, SchedulingPolicySpec
from fgpu_contracts.wire import Condition, ObjectMeta

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KINDS = {GPUNODE_KIND: ("gpunode.yaml", GPUNODE_PLURAL, GPUNode),
         SCHEDULING_POLICY_KIND: ("schedulingpolicy.yaml", SCHEDULING_POLICY_PLURAL, SchedulingPolicy)}
K8S_OWN = {"apiVersion", "kind", "metadata"}  # the apiserver's, at an object's root


def crd(kind: str) -> dict:
    return yaml.safe_load((CRDS / KINDS[kind][0]).read_text())


def schema(kind: str) -> dict:
    [version] = crd(kind)["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def as_json_schema(node):
    """Kubernetes' OpenAPI v3 dialect as JSON Schema draft 4 (whose exclusiveMinimum is the same boolean):
    `nullable: true` becomes a "null" type."""
    if isinstance(node, list):
        return [as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
    return out


def validator(kind: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(as_json_schema(schema(kind)))


def structural_problems(node: dict, path: str = "") -> list[str]:
    """Kubernetes' structural-schema rules that a hand-written schema can break."""
    problems = []
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path or '/'}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    for key in ("anyOf", "oneOf", "allOf", "not", "$ref"):
        if key in node:
            problems.append(f"{path}: {key} (not structural as written here)")
    for name, sub in node.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            problems += structural_problems(node[key], f"{path}[{key}]")
    if node.get("x-kubernetes-list-type") == "map":
        missing = set(node["x-kubernetes-list-map-keys"]) - set(node["items"].get("required", []))
        problems += [f"{path}: list-map key {k} not required" for k in sorted(missing)]
    return problems


def unwrap(annotation) -> tuple[object, bool]:
    """(the annotation without `| None`, whether None is allowed)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return (args[0] if len(args) == 1 else annotation), len(args) < len(typing.get_args(annotation))
    return annotation, False


def disagreements(model: type[pydantic.BaseModel], node: dict, path: str, root: bool = True) -> list[str]:
    """Where the schema of `model`'s objects says something the model does not (or the other way round)."""
    fields = {f.alias or name: f for name, f in model.model_fields.items()}
    derived = {f.alias or name: f.return_type for name, f in model.model_computed_fields.items()}
    props = node.get("properties", {})
    own = K8S_OWN if root else set()
    out = []
    if set(props) != set(fields) | set(derived):
        out.append(f"{path}: properties {sorted(props)} != model fields {sorted(fields)} + {sorted(derived)}")
    for alias, kind in derived.items():  # written for readers, recomputed on read: optional in the schema
        if alias in props and issubclass(kind, pydantic.BaseModel):
            out += disagreements(kind, props[alias], f"{path}.{alias}", root=False)
    want_required = {a for a, f in fields.items() if f.is_required()} - own
    if set(node.get("required", [])) != want_required:
        out.append(f"{path}: required {sorted(node.get('required', []))} != {sorted(want_required)}")
    for alias, field in fields.items():
        if alias in own or alias not in props:
            continue
        sub, where = props[alias], f"{path}.{alias}"
        annotation, optional = unwrap(field.annotation)
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        is_model = isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)
        if optional and not is_model and not sub.get("nullable"):
            out.append(f"{where}: may be null in the model, not nullable in the schema")
        if origin is typing.Literal and sub.get("enum") != list(args):
            out.append(f"{where}: enum {sub.get('enum')} != {list(args)}")
        if not field.is_required() and field.default is not None:
            default = field.default
            want = {} if isinstance(default, pydantic.BaseModel) else pydantic.TypeAdapter(
                field.annotation).dump_python(default, mode="json")  # a nested object: the apiserver fills it
            if sub.get("default") != want:
                out.append(f"{where}: default {sub.get('default')!r} != the model's {want!r}")
        if is_model:
            out += disagreements(annotation, sub, where, root=False)
        elif origin in (tuple, list) and isinstance(args[0], type) and issubclass(args[0], pydantic.BaseModel):
            out += disagreements(args[0], sub["items"], f"{where}[]", root=False)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_crd_names_match_the_keys(kind):
    doc = crd(kind)
    plural = KINDS[kind][1]
    assert doc["metadata"]["name"] == f"{plural}.{CRD_GROUP}"
    assert (doc["spec"]["group"], doc["spec"]["scope"]) == (CRD_GROUP, "Cluster")
    assert (doc["spec"]["names"]["kind"], doc["spec"]["names"]["plural"]) == (kind, plural)
    [version] = doc["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == (CRD_VERSION, True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(kind):
    assert structural_problems(schema(kind)) == []


@pytest.mark.parametrize("kind", KINDS)
def test_schema_and_model_agree(kind):
    assert disagreements(KINDS[kind][2], schema(kind), kind) == []


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns_point_at_schema_fields(kind):
    [version] = crd(kind)["spec"]["versions"]
    root = copy.deepcopy(schema(kind))
    root["properties"]["metadata"]["properties"] = {"creationTimestamp": {"type": "string"}}
    for column in version["additionalPrinterColumns"]:
        node = root
        for part in column["jsonPath"].removeprefix(".").split("."):
            assert part.removesuffix("[*]") in node.get("properties", {}), column
            node = node["properties"][part.removesuffix("[*]")]
            node = node["items"] if part.endswith("[*]") else node
        assert "type" in node, column


def _condition() -> Condition:
    return Condition(type="Ready", status="True", reason="Published", message="",
                     last_transition_time="2026-01-02T03:04:05Z", observed_generation=3)


def full_gpunode() -> dict:
    node = gpunode(plugin_inventory())
    status = GPUNodeStatus(
        allocations=(GpuAllocation(namespace="ml", pod="train-0", pod_uid="u-1", container="main",
                                   uuid=node.spec.gpus[1].uuid, milli_gpu=300, mem_bytes=1 << 33, sm_pct=30),
                     GpuAllocation(namespace="ml", pod="infer-0", pod_uid="u-2", container="main",
                                   uuid=node.spec.gpus[0].mig[0].uuid, mig_profile="3g.20gb")),
        conditions=(_condition(),))
    return node.model_copy(update={"status": status}).model_dump(mode="json", by_alias=True)


def full_policy() -> dict:
    return SchedulingPolicy(metadata=ObjectMeta(name="default"), spec=SchedulingPolicySpec(
        node_policy="fgd", gpu_policy="spread", takeover_schedulers=("hami-scheduler",),
        aliyun_memory_unit="MiB", default_slo_slowdown=1.5),
        status={"observedGeneration": 2, "conditions": [_condition()]}).model_dump(mode="json", by_alias=True)


SAMPLES = {GPUNODE_KIND: full_gpunode, SCHEDULING_POLICY_KIND: full_policy}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("exclude_none", [False, True])
def test_schema_accepts_what_the_model_dumps(kind, exclude_none):
    model = KINDS[kind][2]
    obj = model.model_validate(SAMPLES[kind]())
    doc = obj.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)
    validator(kind).validate(doc)
    assert model.model_validate(doc) == obj


def test_the_annotation_document_is_a_valid_spec():
    """A reader may copy the annotation into a GPUNode as is (the derived summary is optional on write)."""
    inv = plugin_inventory()
    validator(GPUNODE_KIND).validate({"apiVersion": f"{CRD_GROUP}/{CRD_VERSION}", "kind": GPUNODE_KIND,
                                      "metadata": {"name": inv.node}, "spec": json.loads(dump_inventory(inv))})


BAD = [
    (GPUNODE_KIND, ("spec", "gpus", 0, "sharing"), "vgpu"),
    (GPUNODE_KIND, ("spec", "gpus", 0, "mig", 0, "start"), -1),
    (GPUNODE_KIND, ("spec", "migStrategy"), "auto"),
    (GPUNODE_KIND, ("spec", "timeDilation"), 0),
    (GPUNODE_KIND, ("spec", "resources", "nvidia.com/gpu"), "ten"),
    (GPUNODE_KIND, ("status", "allocations", 0, "milliGpu"), 1001),
    (GPUNODE_KIND, ("status", "conditions", 0, "status"), "Maybe"),
    (GPUNODE_KIND, ("status", "conditions", 0, "reason"), ""),
    (SCHEDULING_POLICY_KIND, ("spec", "nodePolicy"), "random"),
    (SCHEDULING_POLICY_KIND, ("spec", "gpuPolicy"), "fgd"),
    (SCHEDULING_POLICY_KIND, ("spec", "aliyunMemoryUnit"), "GB"),
    (SCHEDULING_POLICY_KIND, ("spec", "defaultSloSlowdown"), 1),
    (SCHEDULING_POLICY_KIND, ("spec", "takeoverSchedulers"), "hami-scheduler"),
]


@pytest.mark.parametrize(("kind", "path", "value"), BAD, ids=lambda v: ".".join(map(str, v)) if isinstance(
    v, tuple) else None)
def test_schema_and_model_both_reject(kind, path, value):
    doc = SAMPLES[kind]()
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert not validator(kind).is_valid(doc)
    with pytest.raises(pydantic.ValidationError):
        KINDS[kind][2].model_validate(doc)
