"""Timeline mode: departures unblock the queue, queueing delay, load compression, capacity invariant, CLI."""
import argparse
import json
from unittest import mock

import numpy as np
import pytest
from fgpu_operator.cli import main
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.model import NodeSpec, Request
from fgpu_operator.sim import timeline
from fgpu_operator.sim.timeline import (
    arrival_speedup,
    compress,
    fallback_slowdown,
    max_offered_load,
    min_offered_load,
    offered_load,
    run_timeline,
)
from fgpu_operator.sim.timeline_command import parse_load
from fgpu_operator.sim.trace import PodRecord, Trace, load_nodes, load_pods
from hypothesis import given, settings
from hypothesis import strategies as st

ONE_T4 = [NodeSpec("n", 8000, 65536, 1, "T4")]


def pod(name, created, deleted, milli=1000, qos="LS", num_gpu=1):
    return PodRecord(Request(name, 1000, 1024, num_gpu, milli, qos=qos), created, deleted)


def evenly_spaced(n=101, gap=100, life=10):
    """n one-GPU pods arriving every `gap` s, each living `life` s: offered load on one GPU is life/gap."""
    return Trace("even", tuple(pod(f"p{i}", i * gap, i * gap + life) for i in range(n)))


# --- the queue --------------------------------------------------------------------------------------
def test_departure_frees_the_gpu_and_the_queue_drains_in_order_with_exact_delays():
    # a holds the GPU 0-100; b (whole GPU) waits from 10 and runs 100-150; c waits from 20 and runs 150-180.
    trace = Trace("t", (pod("a", 0, 100), pod("b", 10, 60), pod("c", 20, 50, milli=500)))
    r = run_timeline(ONE_T4, trace, "bestfit")
    assert (r.placed, r.waited, r.waiting_at_end, r.unplaceable) == (3, 2, 0, 0)
    assert r.delays == [90.0, 130.0]
    assert list(r.times) == [0, 10, 20, 100, 150, 180]  # waiting delays departures: lifetimes are kept
    assert list(r.used) == [1000, 1000, 1000, 1000, 500, 0]
    assert list(r.requested) == [1000, 2000, 2500, 1500, 500, 0]


def test_a_waiting_pod_does_not_block_a_smaller_one_behind_it():
    trace = Trace("t", (pod("a", 0, 100, milli=600), pod("b", 10, 20), pod("c", 20, 30, milli=300)))
    r = run_timeline(ONE_T4, trace, "bestfit")
    assert r.waited == 1 and r.delays == [90.0]  # only b waited; c went straight onto the shared GPU


def test_pods_that_fit_no_empty_node_are_unplaceable_and_never_wait():
    trace = Trace("t", (pod("big", 0, 10, num_gpu=2), pod("a", 0, None), pod("b", 5, 15)))
    r = run_timeline(ONE_T4, trace, "bestfit")
    assert r.unplaceable == 1 and r.waited == 1  # b waits behind a, which never leaves
    assert r.waiting_at_end == 2 and r.placed == 1


# --- offered load and compression -------------------------------------------------------------------
def test_offered_load_of_a_hand_computable_trace():
    # Busy period: 1st..99th percentile of arrivals = [100, 9900]; 98 pods inside it, 10 s each.
    trace = evenly_spaced()
    assert offered_load(trace, 1000) == pytest.approx(980 / 9800)
    assert offered_load(trace, 1000, speedup=5) == pytest.approx(0.5)  # gaps 20 s, pods still disjoint
    # Limit: every pod lives past the period's end; pod j in 1..99 covers (99 - j)/98 of it, pod 0 all of it.
    assert max_offered_load(trace, 1000) == pytest.approx(1 + 49.5)


@pytest.mark.parametrize("load", [0.05, 0.3, 0.5, 2.0])
def test_compression_hits_the_requested_load_and_keeps_lifetimes_and_order(load):
    trace = evenly_spaced()
    k = arrival_speedup(trace, 1000, load)
    assert offered_load(trace, 1000, k) == pytest.approx(load, rel=1e-3)
    squeezed = compress(trace, k)
    before = [(p.deletion_time - p.creation_time) for p in trace.pods]
    after = [(p.deletion_time - p.creation_time) for p in squeezed.pods]
    assert after == pytest.approx(before)
    created = [p.creation_time for p in squeezed.pods]
    assert created == sorted(created) and created[0] == trace.pods[0].creation_time
    gaps = np.diff([p.creation_time for p in trace.pods])
    assert np.diff(created) == pytest.approx(gaps / k)


def test_compression_on_the_default_trace_and_its_ceiling():
    trace = load_pods(None, need_times=True)
    capacity = sum(n.num_gpu for n in load_nodes(None)) * 1000
    assert offered_load(trace, capacity) < 0.01  # why nothing queues on the trace's own times
    k = arrival_speedup(trace, capacity, 0.3)
    assert offered_load(trace, capacity, k) == pytest.approx(0.3, rel=1e-3)
    top = max_offered_load(trace, capacity)
    assert offered_load(trace, capacity, 1e9) <= top + 1e-9
    with pytest.raises(PlacementInputError, match=r"--load: 0\.9 is not reachable .* approaches 0\.\d+"):
        arrival_speedup(trace, capacity, 0.9)


def test_pods_that_never_end_set_a_floor_under_the_load():
    trace = Trace("t", (pod("forever", 0, None), *evenly_spaced().pods[1:]))
    assert min_offered_load(trace, 1000) == pytest.approx(1.0)  # it covers the whole busy period at any k
    with pytest.raises(PlacementInputError, match=r"--load: 0\.5 is not reachable .* alone offer 1\.000"):
        arrival_speedup(trace, 1000, 0.5)
    assert offered_load(trace, 1000, arrival_speedup(trace, 1000, 1.5)) == pytest.approx(1.5, rel=1e-3)


def test_without_waiting_the_simulated_demand_equals_the_offered_load():
    nodes = [NodeSpec("n", 64000, 262144, 8, "T4")]
    r = run_timeline(nodes, evenly_spaced(), "bestfit", load=0.05)
    assert r.speedup == pytest.approx(4, rel=1e-3) and r.waited == 0
    assert r.requested_stats()["mean"] == pytest.approx(5.0, rel=1e-3)
    assert r.alloc_stats()["mean"] == pytest.approx(5.0, rel=1e-3)
    assert r.alloc_stats()["max"] == pytest.approx(100 / 8)


# --- invariants over random small traces ------------------------------------------------------------
pod_shapes = st.tuples(st.integers(0, 50), st.one_of(st.none(), st.integers(0, 40)),
                       st.sampled_from([(1, 250), (1, 500), (1, 1000), (2, 1000), (3, 1000), (0, 0)]))


@settings(max_examples=60, deadline=None)
@given(st.lists(pod_shapes, min_size=1, max_size=12), st.sampled_from(["bestfit", "fgd", "random"]))
def test_allocation_never_exceeds_capacity(shapes, policy):
    nodes = [NodeSpec("a", 8000, 65536, 2, "T4"), NodeSpec("b", 8000, 65536, 1, "V100M16")]
    pods = tuple(PodRecord(Request(f"p{i}", 1000, 1024, n, m), t, None if life is None else t + life)
                 for i, (t, life, (n, m)) in enumerate(sorted(shapes, key=lambda s: s[0])))
    trace = Trace("fuzz", pods)
    with mock.patch.object(timeline, "make_interference", return_value=None):
        r = run_timeline(nodes, trace, policy, seed=1)
    assert (r.used >= 0).all() and (r.used <= 3000).all()
    assert (r.used <= r.requested).all()
    assert all(d > 0 for d in r.delays) and len(r.delays) <= r.waited
    assert r.placed + r.waiting_at_end == len(pods)
    assert r.unplaceable == sum(1 for p in pods if p.request.num_gpu == 3)
    if all(p.deletion_time is not None for p in pods) and r.waiting_at_end == 0:
        assert r.used[-1] == 0 and r.requested[-1] == 0


# --- slowdown ---------------------------------------------------------------------------------------
def test_sharing_pods_are_slowed_by_their_co_runners():
    trace = Trace("t", (pod("a", 0, 100, 500, "LS"), pod("b", 0, 100, 400, "BE"), pod("c", 0, 100, 1000, "BE")))
    r = run_timeline([NodeSpec("n", 8000, 65536, 2, "T4")], trace, "bestfit")
    ls, be = r.slowdown_by_qos["LS"][0], r.slowdown_by_qos["BE"][0]
    assert 1.05 < ls < be  # BE's co-runner (0.5 GPU) is busier than LS's (0.4 GPU); c owns a GPU: no entry


def test_fallback_model_is_k_times_slower_plus_switch_cost():
    assert fallback_slowdown(1) == 1.0
    assert fallback_slowdown(3) == pytest.approx(3 * 2.25 / 2.1)


# --- CLI --------------------------------------------------------------------------------------------
def test_cli_timeline_json(capsys, small_trace):
    nodes, pods = small_trace
    assert main(["simulate", "--mode", "timeline", "--nodes", str(nodes), "--pods", str(pods),
                 "--policy", "fgpu", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["mode"] == "timeline" and result["pods_placed"] == 40
    assert set(result["slowdown_by_qos"]) >= {"LS", "BE", "Burstable", "Guaranteed"}


DOCUMENTED_KEYS = {"policy", "trace", "mode", "seed", "arrival_speedup", "offered_load", "busy_period_s",
                   "alloc_pct", "requested_pct", "alloc_over_time", "pods_placed", "pods_waited",
                   "pods_waiting_at_end", "pods_unplaceable", "queue_delay_s", "slowdown_by_qos", "slowdown_model",
                   "served_pct", "pods_preempted", "mig_reconfigurations", "mig_reconfigurations_per_hour",
                   "pending_s_by_priority"}


def test_cli_load_on_the_default_trace(capsys):
    assert main(["simulate", "--mode", "timeline", "--policy", "bestfit", "--seed", "42", "--load", "0.3",
                 "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["results"]
    assert set(r) == DOCUMENTED_KEYS
    assert r["offered_load"] == pytest.approx(0.3, abs=1e-3) and r["arrival_speedup"] > 1000
    assert set(r["alloc_pct"]) == {"mean", "p50", "p95", "max"} and set(r["queue_delay_s"]) >= {"mean", "p95"}
    assert r["pods_placed"] + r["pods_waiting_at_end"] == 8152
    assert r["alloc_pct"]["mean"] <= r["requested_pct"]["mean"] + 1e-6
    assert len(r["alloc_over_time"]) == 20


@pytest.mark.parametrize("argv, message", [
    (["--mode", "timeline", "--load", "0"], "argument --load: '0' is not an offered load"),
    (["--mode", "timeline", "--load", "-0.5"], "argument --load: '-0.5' is not an offered load"),
    (["--mode", "timeline", "--load", "nan"], "argument --load: 'nan' is not an offered load"),
    (["--mode", "timeline", "--load", "lots"], "argument --load: 'lots' is not an offered load"),
    (["--mode", "timeline", "--load", "0.9"], "--load: 0.9 is not reachable on trace default"),
    (["--load", "0.3"], "--load: applies only to --mode timeline"),
    (["--load", "0.3", "--mode", "replay"], "--load: applies only to --mode timeline"),
])
def test_bad_load_is_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        code = main(["simulate", "--policy", "bestfit", "--seed", "42", *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@given(st.text(max_size=12))
def test_parse_load_accepts_only_positive_finite_numbers(text):
    try:
        value = parse_load(text)
    except argparse.ArgumentTypeError as exc:
        assert "allowed: a number above 0" in str(exc)
    else:
        assert np.isfinite(value) and value > 0


def test_timeline_needs_times(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,100,1,500\n")
    assert main(["simulate", "--mode", "timeline", "--nodes", str(nodes), "--pods", str(pods)]) == 2
    assert "missing column(s) creation_time, deletion_time" in capsys.readouterr().err


def test_cli_table_names_the_load_and_plot_is_written(capsys, small_trace, tmp_path):
    nodes, pods = small_trace
    plot = tmp_path / "timeline.png"
    assert main(["simulate", "--mode", "timeline", "--nodes", str(nodes), "--pods", str(pods), "--policy", "bestfit",
                 "--load", "0.2", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "arrival gaps divided by" in out and "offered load 20.00%" in out
    assert plot.stat().st_size > 0


timed_pods = st.lists(st.tuples(st.integers(0, 10_000), st.one_of(st.none(), st.integers(0, 5_000)),
                                st.sampled_from([250, 500, 1000])), min_size=3, max_size=30)


@settings(max_examples=60, deadline=None)
@given(timed_pods, st.floats(0.01, 0.99))
def test_compression_hits_any_reachable_load(rows, fraction):
    rows = sorted(rows, key=lambda row: row[0])
    trace = Trace("fuzz", tuple(pod(f"p{i}", t, None if life is None else t + life, milli=m)
                                for i, (t, life, m) in enumerate(rows)))
    floor, top = min_offered_load(trace, 2000), max_offered_load(trace, 2000)
    if top <= floor:
        return
    load = floor + fraction * (top - floor)
    try:
        k = arrival_speedup(trace, 2000, load)
    except PlacementInputError as exc:  # only when the load needs an absurd factor
        assert "too close" in str(exc) or "no spread" in str(exc)
        return
    assert offered_load(trace, 2000, k) == pytest.approx(load, rel=1e-3)
    assert offered_load(compress(trace, k), 2000) == pytest.approx(load, rel=1e-3)
