"""Every example pod of deploy/examples/pods/ meets the real webhook code and placement core as its
`examples.fgpu.io/expect` annotation says, on the quick start's cluster: the three node pools of
deploy/values/quickstart.yaml, each node's inventory made by the device plugin's own code from the pool's
node config. `admitted` pods are normalised by the mutating webhook and then all placed together (they
must fit side by side, as `make kind-up` applies them all); `unschedulable` ones are admitted but cannot be
placed; `denied` ones are refused with a reason naming the field; a `preempted` one is placed, and the pod that
names it in `examples.fgpu.io/after` takes its room by preemption where nothing else fits."""
from __future__ import annotations

import copy
from pathlib import Path

import kopf
import pytest
import yaml
from fgpu_operator.controller import webhook
from fgpu_operator.controller.translate import core_request, gpu_request, guards_slo, node_spec
from fgpu_operator.placement.live import Allocation, LiveCluster

from devcluster.examples import OUTCOMES, Example
from devcluster.examples import load as load_examples
from fgpu_contracts import keys

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "deploy" / "examples" / "pods"
QUICKSTART = ROOT / "deploy" / "values" / "quickstart.yaml"
EXPECT = "examples.fgpu.io/expect"
#: The PriorityClasses the examples define, by name: their value (Kubernetes' admission copies it to the pod).
PRIORITY_CLASSES = {d["metadata"]["name"]: d["value"] for d in load_examples(PODS)[0]}
#: The request forms the examples must cover (the issue's list), by the webhook's source of each request.
FORMS = {"fgpu", "nvidia", "hami", "kubeshare", "kai", "aliyun"}
#: Examples the webhook leaves alone (time-sliced replicas are counted resources, not shares fgpu places).
PASSED_THROUGH = {"timeslice-replica"}


def examples() -> list[Example]:
    """Every example pod, read as `make demo` reads them (a file may also hold the PriorityClasses it uses)."""
    return load_examples(PODS)[1]


def load(path: Path) -> dict:
    """The one example pod of a file."""
    (pod,) = [e.manifest for e in examples() if e.path == path]
    return pod


def quickstart_nodes() -> list[dict]:
    """One Node per pool of the quick start, as its device plugin publishes it (labels, inventory
    annotation, capacity) plus a kind worker's CPU and memory."""
    from deviceplugin.labels import inventory, inventory_annotation, node_labels
    from deviceplugin.resources import discover, node_level_resources
    from simgpu.nodeconfig import NodeConfig

    nodes = []
    for k, pool in enumerate(yaml.safe_load(QUICKSTART.read_text())["nodePools"]):
        name = f"fgpu-worker{k + 1 if k else ''}"
        cfg = NodeConfig.model_validate(pool["config"])
        gpus = cfg.gpu_devices(name)
        resources = discover(cfg, name)
        advertised = {r.name: str(len(r.slots)) for r in resources}
        advertised |= {k: str(v) for k, v in node_level_resources(cfg, name).items()}
        nodes.append({"metadata": {
            "name": name,
            "labels": {**node_labels(cfg, gpus), "fgpu.io/node-pool": pool["name"]},
            "annotations": inventory_annotation(inventory(cfg, name, gpus, resources, {}))},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", **advertised}}})
    return nodes


def relaid(live: LiveCluster, uid: str, core) -> Allocation | None:
    """A MIG pod no instance holds, as the operator places it (controller/mig_relayout.py): a re-layout of a
    dynamic-MIG GPU's idle instances, shown in the model, the new instance held by the pod."""
    from fgpu_operator.controller.mig_relayout import MigRelayouts
    from fgpu_operator.placement.mig_changes import instance_names

    mig = MigRelayouts()
    entry = type("Entry", (), {"pod": {"metadata": {"namespace": "default", "name": uid}}})()
    planned = mig.plan(live, uid, entry, core)
    if not isinstance(planned, tuple):
        return None
    changes, _ = planned
    mig.record(changes, uid, entry)
    node = changes[0].node
    live.upsert_node(mig.overlay(live.specs[node]))
    return live.restore(uid, core, node, (), tuple(n for c in changes for n in instance_names(c, uid)))


def merge(target: dict, patch: dict) -> dict:
    """RFC 7386 merge patch, as Kopf's patch of a mutating webhook is meant (None removes a key)."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def cluster() -> LiveCluster:
    live = LiveCluster(policy="fgpu")
    for node in quickstart_nodes():
        assert live.upsert_node(node_spec(node)), node["metadata"]["name"]
    return live


def admit(pod: dict, live: LiveCluster) -> dict:
    """The pod as the mutating webhook leaves it (kopf.AdmissionError if it is denied)."""
    memo = kopf.Memo()
    memo.scheduler = type("Scheduler", (), {"live": live})()
    patch = kopf.Patch()
    webhook.normalise_pod(body=kopf.Body(copy.deepcopy(pod)), patch=patch, memo=memo)
    return merge(pod, dict(patch))


def test_each_example_says_what_should_happen_and_all_forms_and_outcomes_are_there():
    seen_outcomes, seen_forms = set(), set()
    for e in examples():
        assert e.name == e.path.stem, e.path.name
        assert e.path.read_text().startswith("# "), f"{e.path.name}: first line should say what it shows"
        seen_outcomes.add(e.expect)
    assert seen_outcomes == set(OUTCOMES)
    live = LiveCluster(policy="fgpu")
    for e in examples():
        if e.expect != "denied" and e.name not in PASSED_THROUGH:
            seen_forms.add(gpu_request(admit(e.manifest, live)).source)
    assert seen_forms >= FORMS, f"no example of {sorted(FORMS - seen_forms)}"
    priorities = {gpu_request(admit(load(PODS / f"priority-{p}.yaml"), live)).priority for p in ("high", "low")}
    assert priorities == {"high", "low"}


@pytest.mark.parametrize("example", [e for e in examples() if e.expect == "denied"], ids=lambda e: e.name)
def test_denied_examples_are_refused_with_a_reason(example, cluster):
    with pytest.raises(kopf.AdmissionError) as refused:
        admit(example.manifest, cluster)
    assert refused.value.code == 400
    assert str(refused.value).startswith("metadata.annotations[")  # names the field


def test_admitted_examples_all_fit_the_quickstart_cluster_together_and_the_unfit_one_does_not(cluster):
    placed: dict[str, str] = {}
    priority = {e.name: PRIORITY_CLASSES.get(e.manifest["spec"].get("priorityClassName"), 0) for e in examples()}
    preempted = {e.name for e in examples() if e.expect == "preempted"}
    for e in examples():
        if e.expect == "denied":
            continue
        admitted = admit(e.manifest, cluster)
        request = gpu_request(admitted)
        if e.name in PASSED_THROUGH:  # counted replicas: the default scheduler's, by the same fit rule
            assert request is None and admitted == e.manifest, f"{e.path.name}: changed by the webhook"
        else:
            assert admitted["spec"]["schedulerName"] == keys.SCHEDULER_NAME, e.path.name
            assert request is not None, f"{e.path.name}: the webhook wrote no {keys.REQUEST}"
        core = core_request(admitted, request, guard_slo=guards_slo(request, "fgpu"))
        outcome = cluster.schedule(e.name, core)
        if not isinstance(outcome, Allocation) and core.is_mig:
            outcome = relaid(cluster, e.name, core) or outcome
        if not isinstance(outcome, Allocation) and set(e.after) & preempted:  # the operator's preemption
            outcome = cluster.preempt(e.name, core, priority[e.name],
                                      {uid: priority.get(uid, 0) for uid in cluster.allocations})
            if isinstance(outcome, tuple):
                outcome, victims = outcome
                assert set(victims) <= preempted, f"{e.path.name} evicted {victims}"
                for victim in victims:
                    placed.pop(victim, None)
        if e.expect in ("admitted", "preempted"):
            assert isinstance(outcome, Allocation), f"{e.path.name}: {outcome}"
            placed[e.name] = outcome.node
        else:
            assert not isinstance(outcome, Allocation), f"{e.path.name} was placed on {outcome.node}"
            assert "0/3 nodes are available" in str(outcome), outcome
    assert placed["mig-1g"] == "fgpu-worker2" and placed["timeslice-replica"] == "fgpu-worker3"
    assert placed["fgpu-model"] == "fgpu-worker" and placed["preemption"] == "fgpu-worker2"
    assert cluster.violations() == []
