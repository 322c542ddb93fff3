"""Measured-SLO feedback (docs/qos.md): a GPU whose protected pod stays over its bound for the window takes no
new low-priority shares, says so in kube-scheduler's words, and takes them again once the pod recovers."""
import numpy as np
from fgpu_operator.controller.slo_feedback import SloFeedback, measured
from fgpu_operator.observe.prom import Series
from fgpu_operator.placement import Cluster, Framework, NodeSpec, Request, TargetWorkload, Unschedulable
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.model import GpuInfo
from fgpu_operator.placement.policies import make_policy
from fgpu_operator.placement.slo_feedback import Measured, SloWatch, set_hold

OVER, UNDER = Measured("GPU-0", "ml/serve", 1.5, 1.2), Measured("GPU-0", "ml/serve", 1.1, 1.2)


def test_a_gpu_is_held_only_after_the_window_and_released_at_once():
    w = SloWatch(window_s=60)
    assert w.observe(0, [OVER]) == ([], [])
    assert w.observe(59, [OVER]) == ([], [])
    started, released = w.observe(60, [OVER])
    assert [(h.uuid, h.pod, h.since, h.slowdown) for h in started] == [("GPU-0", "ml/serve", 0, 1.5)]
    assert w.observe(75, [OVER]) == ([], [])  # still held: nothing new
    assert w.observe(90, [UNDER]) == ([], ["GPU-0"])
    assert w.observe(100, [OVER]) == ([], [])  # the window starts again
    w.observe(200, [OVER])
    assert w.observe(210, []) == ([], ["GPU-0"])  # the pod gone


def test_an_interrupted_breach_does_not_add_up():
    w = SloWatch(window_s=60)
    w.observe(0, [OVER])
    w.observe(30, [UNDER])
    assert w.observe(70, [OVER]) == ([], [])
    assert w.observe(130, [OVER])[0]


def cluster() -> Cluster:
    gpus = tuple(GpuInfo(f"GPU-{i}", "H100") for i in range(2))
    return Cluster([NodeSpec("n0", 64000, 262144, 2, "H100", gpus=gpus)])


def test_a_held_gpu_refuses_low_priority_shares_only():
    c = cluster()
    fw = Framework(c, make_policy("fgd", TargetWorkload.from_requests([Request("w", 1, num_gpu=1, gpu_milli=300)])),
                   np.random.default_rng(0))
    assert set_hold(c, "GPU-0", True) and set_hold(c, "GPU-1", True)
    low = Request("ml/train", 1000, num_gpu=1, gpu_milli=300, priority=1)
    outcome = fw.schedule(low)
    assert isinstance(outcome, Unschedulable)
    assert str(outcome) == "0/1 nodes are available: 1 had only GPUs held: a protected pod measured over its SLO."
    assert not isinstance(fw.schedule(Request("ml/serve2", 1000, num_gpu=1, gpu_milli=300, priority=0, slo=1.2)),
                          Unschedulable)
    assert set_hold(c, "GPU-1", False)
    assert fw.schedule(low).gpus == (1,)


def test_holds_outlive_a_rebuild_of_the_live_model():
    live = LiveCluster(policy="fgpu")
    live.upsert_node(NodeSpec("n0", 64000, 262144, 1, "H100", gpus=(GpuInfo("GPU-0", "H100"),)))
    low = Request("ml/train", 1000, num_gpu=1, gpu_milli=300, priority=1)
    assert live.set_slo_hold("GPU-0", True) is False
    live.upsert_node(NodeSpec("n1", 64000, 262144, 0, ""))  # a new node: the arrays are rebuilt
    assert isinstance(live.schedule("u1", low), Unschedulable)
    assert live.set_slo_hold("GPU-0", False) is True
    assert not isinstance(live.schedule("u1", low), Unschedulable)


def series(name_value: float, **labels) -> Series:
    return Series(labels, ((0.0, name_value),))


def test_measured_joins_slowdown_and_bound_by_gpu_and_container():
    labels = {"UUID": "GPU-0", "namespace": "ml", "pod": "serve", "container": "main"}
    got = measured([series(1.4, **labels), series(1.1, **{**labels, "pod": "other"})], [series(1.2, **labels)])
    assert got == [Measured("GPU-0", "ml/serve", 1.4, 1.2)]


class _Metrics:
    def __init__(self):
        self.changes = []

    def slo_hold(self, change):
        self.changes.append(change)


class _Events:
    def __init__(self):
        self.posted = []

    def post(self, *args):
        self.posted.append(args)


class _Scheduler:
    def __init__(self):
        self.live = LiveCluster(policy="fgpu")
        self.live.upsert_node(NodeSpec("n0", 64000, 262144, 1, "H100", gpus=(GpuInfo("GPU-0", "H100"),)))
        self.metrics, self.events, self.retried = _Metrics(), _Events(), 0

    def retry_waiting(self):
        self.retried += 1


def test_feedback_holds_with_an_event_and_a_metric_and_retries_on_release():
    s = _Scheduler()
    fb = SloFeedback("http://prometheus:9090", s, window_s=30, every_s=15)
    fb.apply(0, [OVER])
    fb.apply(30, [OVER])
    assert s.metrics.changes == ["held"]
    (namespace, name, _, reason, message), = s.events.posted
    assert (namespace, name, reason) == ("ml", "serve", "SloHold")
    assert message == ("GPU GPU-0 takes no new low-priority pods: ml/serve measured 1.50x slower than alone, "
                       "over its 1.2x SLO for at least 30 s")
    fb.apply(45, [UNDER])
    assert s.metrics.changes == ["held", "released"] and s.retried == 1
