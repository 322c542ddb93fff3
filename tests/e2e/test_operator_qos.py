"""The QoS filter through the running operator on the real apiserver (docs/qos.md): a protected pod and three
best-effort pods that would each break its SLO on its GPU end up where the filter decides (asked for by the
fgpu policy, and by a pod's own `fgpu.io/slo-filter` beside the operator's binpack), and the pod that
finds no GPU left but the protected one's is explained, naming whose SLO blocked which GPU, in the pod's
condition and in `fgpu inspect pod`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fgpu_operator.placement.slo import Tenant, default_model
from inventories import fractional_inventory
from placement_util import Pods, inventory_node, operator_with_webhook, pod, set_inventory
from polling import wait_for

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e

NODE = "qos-n"  # one node, two fractional H100s


@pytest.fixture(scope="module")
def op(k8s, kwok, tmp_path_factory):
    def base(core):
        return [inventory_node(kwok.make_kwok_node, NODE, fractional_inventory(NODE, 2),
                               lambda name, inv: set_inventory(core, name, inv))]
    yield from operator_with_webhook(k8s, tmp_path_factory.mktemp("qos"), base)


def share(name: str, fraction: str, **annotations: str) -> dict:
    return pod(name, [NODE], annotations={keys.FGPU_FRACTION: fraction, **annotations})


def test_best_effort_pods_are_kept_off_the_protected_pods_gpu(op, kubeconfig_env):
    pods = Pods(op.core, op.namespace)
    try:
        scenario(pods, op)
    finally:
        pods.cleanup()


def scenario(pods: Pods, op) -> None:
    predicted = default_model().slowdowns("H100-SXM5-80GB", "fractional", [Tenant(0.3, True), Tenant(0.3, False)])[0]
    assert predicted > 1.2  # the premise: one 0.3 best-effort neighbour breaks a protected 0.3 share's bound
    pods.create(share("serve", "0.3", **{keys.FGPU_PRIORITY: "high"}))
    serve = pods.placed("serve")
    assert serve.priority == {"main": 0}
    for i in range(3):
        pods.create(share(f"train-{i}", "0.3", **{keys.FGPU_POLICY: "fgpu"}))  # fgpu keeps SLOs by default
    trains = [pods.placed(f"train-{i}") for i in range(3)]
    assert {t.one().uuid for t in trains} == {f"GPU-{NODE}-0", f"GPU-{NODE}-1"} - {serve.one().uuid}
    assert all(t.priority == {"main": 1} for t in trains)

    # the module's operator runs binpack; this pod asks for the QoS filter itself. The other GPU has 0.1 left,
    # the protected pod's has 0.7: blocked
    pods.create(share("train-3", "0.3", **{keys.FGPU_SLO_FILTER: "true"}))
    why = f"{op.namespace}/serve's SLO on {NODE} GPU {serve.one().uuid[-1]} (predicted {predicted:.2f}x > 1.2x)"

    def explained():
        c = pods.condition("train-3")
        return c is not None and c.reason == "Unschedulable" and "would break a co-runner's SLO" in c.message \
            and why in c.message and c.message
    message = wait_for(explained, what="train-3 explained", show=lambda: pods.condition("train-3"))
    out = subprocess.run([str(Path(sys.executable).with_name("fgpu")), "inspect", "pod", "train-3", "-n",
                          op.namespace], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"why: PodScheduled=False, Unschedulable: {message}" in out.stdout.splitlines()
