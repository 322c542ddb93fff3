"""`fgpu simulate` reads a trace pod with a share on several GPUs (`num_gpu` 2, `gpu_milli` 500: half of each of
two GPUs) and places it through the same core as a live pod: replay and timeline count each device, and a pod
that finds no node with two such GPUs says why."""
import json

from fgpu_operator.cli import main
from fgpu_operator.sim.replay import replay
from fgpu_operator.sim.timeline import run_timeline
from fgpu_operator.sim.trace import load_nodes, load_pods
from trace_rows import PODS_HEADER

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,32000,131072,1,T4\n"
#: three pods of half of two GPUs: two fill n0's pair (n1 has one GPU), the third finds no room
PODS = PODS_HEADER + "".join(f"tp{i},1000,1024,2,500,,LS,Running,{i * 10},{i * 10 + 100},{i * 10}\n"
                             for i in range(3))


def files(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_tp.csv").write_text(PODS)
    return tmp_path / "nodes.csv", tmp_path / "openb_pod_list_tp.csv"


def test_a_share_on_two_gpus_is_replayed_on_two_gpus_of_one_node(tmp_path):
    nodes, pods = files(tmp_path)
    trace = load_pods(pods)
    assert [(p.request.num_gpu, p.request.gpu_milli, p.request.is_share) for p in trace.pods] == [(2, 500, True)] * 3
    result = replay(load_nodes(nodes), trace, "fgd", 1, tune=0, keep_failures=1)
    assert (result.pods, result.failed, int(result.used[-1])) == (3, 1, 2000)  # n0's two GPUs, full
    assert result.failures == ["0/2 nodes are available: 1 node(s) had fewer than 2 GPUs the pod may use, "
                               "1 node(s) had fewer than 2 GPUs with 500 milli-GPU free."]


def test_the_timeline_runs_the_third_when_the_first_leaves(tmp_path):
    nodes, pods = files(tmp_path)
    result = run_timeline(load_nodes(nodes), load_pods(pods, need_times=True), "binpack", 1)
    assert result.placed == 3 and result.waited == 1 and result.waiting_at_end == 0
    assert result.delays == [80.0]  # arrived at 20, placed when tp0 left at 100


def test_simulate_reports_it_and_the_ceiling_refuses_it_in_one_line(capsys, tmp_path):
    nodes, pods = files(tmp_path)
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seed", "1", "--policy", "fgd",
                 "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)["results"]
    assert result["trace"] == "tp"
    code = main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seed", "1", "--ceiling"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip() == ("fgpu simulate: error: --ceiling: trace tp: 3 pod(s) ask for a share on several GPUs, and the ceiling's "
                           "packings model each share on one GPU (allowed: traces whose shares are on one GPU "
                           "each, as openb's)")
