"""Timeline mode: pods depart, the wait queue, give-ups, and the sharing slowdown."""
import json

import pytest
from fgpu_operator.cli import main
from fgpu_operator.placement.model import NodeSpec, Request
from fgpu_operator.sim.timeline import fallback_slowdown, run_timeline
from fgpu_operator.sim.trace import PodRecord, Trace


def pod(name, created, deleted, milli=1000, qos="LS"):
    return PodRecord(Request(name, 1000, 1024, 1, milli, qos=qos), created, deleted)


def test_waiting_pod_starts_when_the_gpu_frees_and_a_late_one_gives_up():
    nodes = [NodeSpec("n", 8000, 65536, 1, "T4")]
    trace = Trace("t", (pod("a", 0, 100), pod("b", 10, 200), pod("c", 20, 50)))
    r = run_timeline(nodes, trace, "fgd")
    assert (r.placed, r.waited, r.gave_up) == (2, 2, 1)
    assert r.delays == [90.0]
    assert r.used.max() == 1000 and r.used[-1] == 0


def test_sharing_pods_are_slowed_by_their_co_runners():
    nodes = [NodeSpec("n", 8000, 65536, 1, "T4")]
    trace = Trace("t", (pod("a", 0, 100, 500, "LS"), pod("b", 0, 100, 400, "BE")))
    r = run_timeline(nodes, trace, "bestfit")
    ls, be = r.slowdown_by_qos["LS"][0], r.slowdown_by_qos["BE"][0]
    assert 1.05 < ls < be  # BE's co-runner (0.5 GPU) is busier than LS's (0.4 GPU)


def test_fallback_model_is_k_times_slower_plus_switch_cost():
    assert fallback_slowdown(1) == 1.0
    assert fallback_slowdown(3) == pytest.approx(3 * 2.25 / 2.1)


def test_cli_timeline_json(capsys, small_trace):
    nodes, pods = small_trace
    assert main(["simulate", "--mode", "timeline", "--nodes", str(nodes), "--pods", str(pods),
                 "--policy", "fgpu", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["mode"] == "timeline" and result["pods_placed"] == 40
    assert set(result["slowdown_by_qos"]) >= {"LS", "BE", "Burstable", "Guaranteed"}


def test_timeline_needs_times(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,100,1,500\n")
    assert main(["simulate", "--mode", "timeline", "--nodes", str(nodes), "--pods", str(pods)]) == 2
    assert "missing column(s) creation_time, deletion_time" in capsys.readouterr().err
