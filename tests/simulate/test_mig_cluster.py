"""`fgpu simulate` on today's clusters: catalog GPUs, MIG nodes (static, dynamic), MIG pods, priorities and
preemption in timeline mode, and one-line errors for bad files."""
import numpy as np
import pytest
from fgpu_operator.cli import main
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.model import NodeSpec, Request
from fgpu_operator.sim.mig_nodes import as_mig, profile_for_share
from fgpu_operator.sim.timeline import run_timeline
from fgpu_operator.sim.trace import PodRecord, Trace, load_nodes, load_pods

from simgpu import mig

NODES_HEADER = "sn,cpu_milli,memory_mib,gpu,model,mig,mig_layout\n"


def nodes_file(tmp_path, *rows: str):
    path = tmp_path / "nodes.csv"
    path.write_text(NODES_HEADER + "".join(r + "\n" for r in rows))
    return path


def test_catalog_gpus_and_mig_nodes_load(tmp_path):
    nodes = load_nodes(nodes_file(tmp_path, "a,64000,262144,8,H100,,", "b,32000,131072,2,L4,,",
                                  "c,64000,262144,2,A100-80GB,static,3g.40gb+2g.20gb+2*1g.10gb",
                                  "d,64000,262144,1,H200,dynamic,"))
    assert [n.model for n in nodes] == ["H100-SXM5-80GB", "L4", "A100-SXM4-80GB", "H200-SXM-141GB"]
    static = nodes[2].gpus[0]
    assert [(m.profile, m.start) for m in static.mig] == [(p.profile, p.start) for p in mig.check_layout(
        "A100-80GB", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])] and not static.mig_dynamic
    assert len(nodes[2].gpus) == 2 and nodes[3].gpus[0].mig_dynamic and nodes[3].gpus[0].mig == ()


@pytest.mark.parametrize("row, message", [
    ("a,1000,1000,1,L4,static,1g.10gb", "L4 does not support MIG"),
    ("a,1000,1000,1,H100,static,", "mig static needs a mig_layout"),
    ("a,1000,1000,1,H100,dynamic,2*4g.40gb", "2 x 4g.40gb requested, but at most 1"),
    ("a,1000,1000,1,H100,static,9*1g.10gb", "cannot read layout part '9*1g.10gb'"),
    ("a,1000,1000,1,H100,static,3g.20gb", "unknown MIG profile '3g.20gb' for H100-SXM5-80GB"),
    ("a,1000,1000,1,H100,sometimes,", "unknown mig 'sometimes' in row 2"),
    ("a,1000,1000,1,H100,,1g.10gb", "row 2 has a mig_layout but mig is empty"),
    ("a,1000,1000,1,H800,,", "unknown GPU model H800 in row 2"),
])
def test_bad_nodes_are_one_line_naming_row_and_rule(tmp_path, row, message):
    with pytest.raises(PlacementInputError) as err:
        load_nodes(nodes_file(tmp_path, row))
    assert message in str(err.value) and "\n" not in str(err.value)


def pods_file(tmp_path, *rows: str, extra="mig_profile,priority,preemption_policy"):
    path = tmp_path / "pods.csv"
    path.write_text(f"name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,{extra}\n"
                    + "".join(r + "\n" for r in rows))
    return path


def test_mig_pods_priorities_and_policies_load(tmp_path):
    trace = load_pods(pods_file(tmp_path, "a,1000,1024,1,0,0,10,MIG 3g.40gb,1000,Never", "b,1000,1024,1,500,0,10,,,"),
                      need_times=True)
    a, b = (p.request for p in trace.pods)
    assert (a.mig_profile, a.num_gpu, trace.pods[0].priority, trace.pods[0].preemption_policy) == (
        "3g.40gb", 1, 1000, "Never")
    assert (b.mig_profile, trace.pods[1].priority, b.is_share) == ("", 0, True)


@pytest.mark.parametrize("row, message", [
    ("a,1000,1024,1,0,0,10,4g.99gb,,", "unknown MIG profile '4g.99gb'"),
    ("a,1000,1024,0,0,0,10,3g.40gb,,", "a mig_profile needs num_gpu >= 1"),
    ("a,1000,1024,1,500,0,10,,high,", "column priority must hold integers"),
    ("a,1000,1024,1,500,0,10,,,Sometimes", "unknown preemption_policy 'Sometimes'"),
])
def test_bad_pods_are_one_line(tmp_path, row, message):
    with pytest.raises(PlacementInputError) as err:
        load_pods(pods_file(tmp_path, row), need_times=True)
    assert message in str(err.value)


def test_share_to_profile_mapping_holds_the_share_in_compute_and_memory():
    assert [profile_for_share("H100", m).name for m in (100, 140, 250, 420, 500, 580, 1000)] == [
        "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "7g.80gb"]
    for milli in range(1, 1001, 37):
        p = profile_for_share("A100-40GB", milli)
        compute, memory = mig.slices("A100-40GB")
        assert p.compute_slices / compute >= milli / 1000 and p.memory_slices / memory >= milli / 1000
    whole = as_mig(Request("w", 1000, 0, 4, 1000), "H100")
    assert (whole.mig_profile, whole.num_gpu, whole.is_share) == ("7g.80gb", 4, False)
    per_gpu = as_mig(Request("s", 1000, 0, 2, 300), "H100")  # a 0.3 share of each of 2 GPUs: one 3g each
    assert (per_gpu.mig_profile, per_gpu.num_gpu, per_gpu.is_share) == ("3g.40gb", 2, False)


# --- timeline: dynamic MIG and preemption ------------------------------------------------------------------
def test_a_3g_pod_on_an_all_1g_idle_gpu_runs_after_one_relayout(tmp_path):
    nodes = load_nodes(nodes_file(tmp_path, "a,64000,262144,1,H100,dynamic,7*1g.10gb"))
    trace = Trace("t", (PodRecord(Request("p", 1000, 1024, 1, mig_profile="3g.40gb"), 0, 100),
                        PodRecord(Request("q", 1000, 1024, 1, mig_profile="1g.10gb"), 5, 50)))
    r = run_timeline(nodes, trace, "bestfit", reconfig_s=12.0)
    assert r.reconfigurations == 1 and r.placed == 2 and r.waited == 0
    assert sorted(r.pending_by_priority[0]) == [0.0, 12.0]  # q took a kept idle 1g at once
    assert list(r.times)[-1] == 112.0  # p ran its 100 s from the end of the re-layout
    static = load_nodes(nodes_file(tmp_path, "a,64000,262144,1,H100,static,7*1g.10gb"))
    r = run_timeline(static, trace, "bestfit")
    assert r.unplaceable == 1 and r.reconfigurations == 0


def test_a_busy_1g_in_the_way_sends_the_3g_to_another_gpu(tmp_path):
    nodes = load_nodes(nodes_file(tmp_path, "a,64000,262144,2,H100,dynamic,7*1g.10gb"))
    pods = [PodRecord(Request(f"s{k}", 100, 0, 1, mig_profile="1g.10gb"), 0, 1000) for k in range(2)]
    pods.append(PodRecord(Request("big", 100, 0, 1, mig_profile="4g.40gb"), 10, 20))
    r = run_timeline(nodes, Trace("t", tuple(pods)), "bestfit", reconfig_s=0)
    assert r.placed == 3 and r.reconfigurations == 1


def shares(*pods):
    return Trace("t", tuple(PodRecord(Request(n, 1000, 1024, 1, milli), t0, t1, policy, prio)
                            for n, milli, prio, t0, t1, policy in pods))


def test_preemption_evicts_the_lower_priority_share_which_starts_over():
    nodes = [NodeSpec("n", 8000, 65536, 1, "H100")]
    trace = shares(("low", 500, 0, 0, 100, ""), ("high", 600, 1000, 10, 30, ""))
    r = run_timeline(nodes, trace, "bestfit", preemption=True)
    assert r.preempted == 1 and r.pending_by_priority[1000] == [0.0]
    assert r.pending_by_priority[0] == [0.0, 20.0]  # low restarted when high left at 30, for its full 100 s
    assert list(r.times)[-1] == 130.0
    same = run_timeline(nodes, shares(("low", 500, 1000, 0, 100, ""), ("peer", 600, 1000, 10, 30, "")),
                        "bestfit", preemption=True)
    assert same.preempted == 0 and same.waited == 1
    never = run_timeline(nodes, shares(("low", 500, 0, 0, 100, ""), ("polite", 600, 1000, 10, 30, "Never")),
                         "bestfit", preemption=True)
    assert never.preempted == 0 and never.pending_by_priority[1000] == [90.0]
    off = run_timeline(nodes, trace, "bestfit")
    assert off.preempted == 0
    # --protected-share runs the same timeline: preemption applies there too (and only when asked)
    from fgpu_operator.sim.qos_timeline import run_qos

    zero = np.zeros(1)
    assert run_qos(nodes, trace, "bestfit", 0.0, 1.2, 42, None, zero, preemption=True)["preempted"] == 1
    assert run_qos(nodes, trace, "bestfit", 0.0, 1.2, 42, None, zero)["preempted"] == 0


def test_cli_options_are_timeline_only_and_as_mig_needs_mig_nodes(capsys, tmp_path, small_trace):
    nodes, pods = small_trace
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--preemption"]) == 2
    assert "--preemption: applies only to --mode timeline" in capsys.readouterr().err
    assert main(["simulate", "--mode", "timeline", "--nodes", str(nodes), "--pods", str(pods), "--as-mig", "all"]) == 2
    assert "--as-mig: needs the MIG nodes to be of one GPU model (got none)" in capsys.readouterr().err
    mig_nodes = nodes_file(tmp_path, "a,64000,262144,8,H100,dynamic,", "b,64000,262144,8,H100,,")
    assert main(["simulate", "--mode", "timeline", "--nodes", str(mig_nodes), "--pods", str(pods), "--as-mig", "LS",
                 "--priority-map", "LS=1000,BE=0", "--preemption"]) == 0
    out = capsys.readouterr().out
    assert "pending p=1000 mean s" in out and "re-layouts/h" in out
    with pytest.raises(SystemExit):
        main(["simulate", "--mode", "timeline", "--priority-map", "LS=high"])
    assert "cannot read 'LS=high'" in capsys.readouterr().err
