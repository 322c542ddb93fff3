"""Every example pod of deploy/examples/pods/ meets the real webhook code and placement core as its
`examples.fgpu.io/expect` annotation says, on the quick start's cluster: the three node pools of
deploy/values/quickstart.yaml, each node's inventory made by the device plugin's own code from the pool's
node config. `admitted` pods are normalised by the mutating webhook and then all placed together (they
must fit side by side, as `make kind-up` applies them all); `unschedulable` ones are admitted but cannot be
placed; `denied` ones are refused with a reason naming the field."""
from __future__ import annotations

import copy
from pathlib import Path

import kopf
import pytest
import yaml
from fgpu_operator.controller import webhook
from fgpu_operator.controller.translate import core_request, gpu_request, guards_slo, node_spec
from fgpu_operator.placement.live import Allocation, LiveCluster

from fgpu_contracts import keys

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "deploy" / "examples" / "pods"
QUICKSTART = ROOT / "deploy" / "values" / "quickstart.yaml"
EXPECT = "examples.fgpu.io/expect"
OUTCOMES = ("admitted", "unschedulable", "denied")
#: The request forms the examples must cover (the issue's list), by the webhook's source of each request.
FORMS = {"fgpu", "nvidia", "hami", "kubeshare", "kai", "aliyun"}
#: Examples the webhook leaves alone (time-sliced replicas are counted resources, not shares fgpu places).
PASSED_THROUGH = {"timeslice-replica"}


def examples() -> list[Path]:
    return sorted(PODS.glob("*.yaml"))


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


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
    for path in examples():
        pod = load(path)
        assert pod["kind"] == "Pod" and pod["metadata"]["name"] == path.stem, path.name
        expect = pod["metadata"].get("annotations", {}).get(EXPECT)
        assert expect in OUTCOMES, f"{path.name}: {EXPECT} is {expect!r}, not one of {OUTCOMES}"
        assert path.read_text().startswith("# "), f"{path.name}: first line should say what it shows"
        seen_outcomes.add(expect)
    assert seen_outcomes == set(OUTCOMES)
    live = LiveCluster(policy="fgpu")
    for path in examples():
        pod = load(path)
        if pod["metadata"]["annotations"][EXPECT] != "denied" and path.stem not in PASSED_THROUGH:
            seen_forms.add(gpu_request(admit(pod, live)).source)
    assert seen_forms >= FORMS, f"no example of {sorted(FORMS - seen_forms)}"
    priorities = {gpu_request(admit(load(PODS / f"priority-{p}.yaml"), live)).priority for p in ("high", "low")}
    assert priorities == {"high", "low"}


@pytest.mark.parametrize("path", [p for p in examples() if load(p)["metadata"]["annotations"][EXPECT] == "denied"],
                         ids=lambda p: p.stem)
def test_denied_examples_are_refused_with_a_reason(path, cluster):
    with pytest.raises(kopf.AdmissionError) as refused:
        admit(load(path), cluster)
    assert refused.value.code == 400
    assert str(refused.value).startswith("metadata.annotations[")  # names the field


def test_admitted_examples_all_fit_the_quickstart_cluster_together_and_the_unfit_one_does_not(cluster):
    placed: dict[str, str] = {}
    for path in examples():
        pod = load(path)
        expect = pod["metadata"]["annotations"][EXPECT]
        if expect == "denied":
            continue
        admitted = admit(pod, cluster)
        request = gpu_request(admitted)
        if path.stem in PASSED_THROUGH:  # counted replicas: the default scheduler's, by the same fit rule
            assert request is None and admitted == pod, f"{path.name}: changed by the webhook"
        else:
            assert admitted["spec"]["schedulerName"] == keys.SCHEDULER_NAME, path.name
            assert request is not None, f"{path.name}: the webhook wrote no {keys.REQUEST}"
        core = core_request(admitted, request, guard_slo=guards_slo(request, "fgpu"))
        outcome = cluster.schedule(path.stem, core)
        if not isinstance(outcome, Allocation) and core.is_mig:
            outcome = relaid(cluster, path.stem, core) or outcome
        if expect == "admitted":
            assert isinstance(outcome, Allocation), f"{path.name}: {outcome}"
            placed[path.stem] = outcome.node
        else:
            assert not isinstance(outcome, Allocation), f"{path.name} was placed on {outcome.node}"
            assert "0/3 nodes are available" in str(outcome), outcome
    assert placed["mig-1g"] == "fgpu-worker2" and placed["timeslice-replica"] == "fgpu-worker3"
    assert placed["fgpu-model"] == "fgpu-worker"
    assert cluster.violations() == []
