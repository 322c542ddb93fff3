"""`fgpu inspect`'s pure part on realistic Node/Pod dicts: fractional GPUs shared by several pods, a MIG node,
an unhealthy GPU, a pending pod, malformed annotations; exact table text for a small case; json/yaml round
trips."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from fgpu_operator.inspect.model import PodReport, Usage, load_report, report_document
from fgpu_operator.inspect.render import mig_layout, render
from fgpu_operator.inspect.view import cluster_report, pod_report
from inspect_objects import GIB, assignment, cluster, h100, node, pod

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.inventory import gpunode, parse_inventory


def by_name(report):
    return {n.name: n for n in report.nodes}


# --- the cluster view ----------------------------------------------------------------------------------------
def test_fractional_shares_add_up_per_gpu_and_node():
    report = cluster_report(*cluster())
    a = by_name(report)["gpu-a"]
    gpu0, gpu1 = a.gpus
    assert [(s.namespace, s.pod, s.priority) for s in gpu0.shares] == [("default", "train-a", "high"),
                                                                        ("ml", "infer-b", "low")]
    assert gpu0.allocated == Usage(750, 60 * GIB, 75)
    assert gpu1.allocated == Usage() and not gpu1.healthy and gpu1.xid == 79
    assert a.capacity == Usage(2000, 160 * GIB, 200) and a.allocated == gpu0.allocated
    assert a.pods == ("default/train-a", "ml/infer-b")  # not the Succeeded pod, not the broken one


def test_a_mig_instance_counts_whole_on_itself_and_by_its_sms_on_the_gpu():
    gpu = by_name(cluster_report(*cluster()))["gpu-m"].gpus[0]
    small, big = sorted(gpu.mig, key=lambda m: m.profile)
    assert [m.profile for m in gpu.mig] == ["4g.20gb", "3g.20gb"]  # slice order
    assert small.profile == "3g.20gb" and [s.pod for s in small.shares] == ["mig-job"]
    assert small.allocated == Usage(1000, 21066814587, 100) and big.allocated == Usage()
    assert gpu.allocated == Usage(round(1000 * 42 / 108), 21066814587, round(100 * 42 / 108))
    assert mig_layout(gpu.mig) == "4g.20gb+3g.20gb"


def test_summary_pending_and_problems():
    report = cluster_report(*cluster())
    s = report.summary
    assert (s.nodes, s.gpus, s.unhealthy_gpus, s.pods, s.pending) == (2, 3, 1, 3, 1)  # cpu-1 is no GPU node
    assert s.allocated.milli_gpu == 750 + 389
    [big] = report.pending
    assert (big.name, big.reason) == ("big", "Unschedulable") and big.message.startswith("0/3 nodes are available")
    [problem] = report.problems
    assert problem.object == "pod default/broken" and problem.message.startswith(keys.ASSIGNMENT)


def test_a_share_on_a_device_the_node_does_not_list_or_on_a_node_without_inventory_is_a_problem():
    nodes = [node("gpu-a", h100(0, "GPU-a0"))]
    pods = [pod("ghost", node_name="gpu-a", assigned=assignment("gpu-a", ("main", 1, [{"uuid": "GPU-gone"}]))),
            pod("lost", node_name="gpu-x", assigned=assignment("gpu-x", ("main", 1, [{"uuid": "GPU-x0"}]))),
            pod("moved", node_name="gpu-a", assigned=assignment("gpu-b", ("main", 1, [{"uuid": "GPU-a0"}])))]
    report = cluster_report(nodes, pods)
    text = [f"{p.object}: {p.message}" for p in report.problems]
    assert text == [
        "pod default/ghost: fgpu.io/assignment gives container main GPU-gone, not a device of node gpu-a",
        "pod default/lost: bound to node gpu-x, which publishes no fgpu.io/gpu-inventory",
        "pod default/moved: fgpu.io/assignment names node gpu-b, the pod is bound to gpu-a; counted on gpu-a"]
    assert report.nodes[0].pods == ("default/moved",)


def test_a_malformed_node_inventory_is_one_input_error_naming_the_node():
    with pytest.raises(InputError) as err:
        cluster_report([node("gpu-z", annotation='{"version": "v2"}')], [])
    assert str(err.value).startswith("node gpu-z: fgpu.io/gpu-inventory:") and "\n" not in str(err.value)


def test_a_gpunode_stands_in_for_a_missing_annotation():
    inv = parse_inventory(node("gpu-g", h100(0, "GPU-g0"))["metadata"]["annotations"][keys.INVENTORY])
    bare = {"metadata": {"name": "gpu-g"}, "status": {}}
    published = gpunode(inv).model_dump(mode="json", by_alias=True)  # with its derived summary
    [view] = cluster_report([bare], [], [published]).nodes
    assert (view.source, view.ready, [g.uuid for g in view.gpus]) == ("gpunode", False, ["GPU-g0"])
    published["spec"]["gpus"][0]["sharing"] = "vgpu"
    with pytest.raises(InputError, match=r"^GPUNode gpu-g: spec: .* at gpus\.0\.sharing"):
        cluster_report([bare], [], [published])


# --- rendering -----------------------------------------------------------------------------------------------
SMALL_TABLE = """\
NODE   GPU  MODEL  MIG  SHARING     HEALTH  COMPUTE  MEMORY(GiB)  SM%  PODS
gpu-a  0    H100   -    fractional  ok      0.75/1   60.0/80.0    75%  default/a, default/b
gpu-a  1    H100   -    mps/4       XID 79  0.00/1   0.0/80.0     0%   -

NODE   STATUS                    GPUS  HEALTHY  COMPUTE       MEMORY(GiB)       PODS
gpu-a  Ready,SchedulingDisabled  2     1/2      0.75/2 (38%)  60.0/160.0 (38%)  2

cluster: 1 node(s), 2 GPU(s) (1 unhealthy), 2 pod(s) holding GPUs, 0 pending; compute 0.75/2 (38%), \
memory 60.0/160.0 GiB (38%)
"""


def test_table_text_of_a_small_cluster():
    nodes = [node("gpu-a", h100(0, "GPU-a0"), h100(1, "GPU-a1", sharing="mps", replicas=4, healthy=False, xid=79),
                  unschedulable=True)]
    pods = [pod(name, node_name="gpu-a", assigned=assignment("gpu-a", ("main", 1, [
        {"uuid": "GPU-a0", "milli_gpu": milli, "mem_bytes": mem * GIB, "sm_pct": milli // 10}])))
        for name, milli, mem in (("a", 500, 40), ("b", 250, 20))]
    assert render(cluster_report(nodes, pods)) == SMALL_TABLE


def test_table_lists_mig_instances_under_their_gpu_then_pending_and_problems():
    lines = render(cluster_report(*cluster())).splitlines()
    assert lines[0].split() == ["NODE", "GPU", "MODEL", "MIG", "SHARING", "HEALTH", "COMPUTE", "MEMORY(GiB)",
                                "SM%", "PODS"]
    assert lines[3].split()[:4] == ["gpu-m", "0", "A100-40GB", "4g.20gb+3g.20gb"]
    assert lines[5].split() == ["gpu-m", "0:1", "A100-40GB", "3g.20gb@4", "mig", "ok", "1.00/1", "19.6/19.6",
                                "100%", "ml/mig-job"]
    assert lines.index("PENDING      REASON         MESSAGE") > lines.index("") and \
        "default/big  Unschedulable  0/3 nodes are available:" in "\n".join(lines)
    assert lines[-2:] == ["problems (left out of the numbers above):",
                          "  pod default/broken: fgpu.io/assignment: Invalid JSON: key must be a string at line 1 "
                          "column 2"]


def test_an_empty_cluster_says_so():
    text = render(cluster_report([{"metadata": {"name": "cpu-1"}}], []))
    assert text.startswith("no node publishes a GPU inventory") and "0 GPU(s)" in text


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_read_back_into_the_same_report(output):
    report = cluster_report(*cluster())
    text = render(report, output)
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert load_report(document) == report
    assert list(document) == ["kind", "version", "summary", "nodes", "pending", "problems"]
    assert document["nodes"][0]["gpus"][0]["shares"][0] == {
        "namespace": "default", "pod": "train-a", "container": "main", "priority": "high",
        "usage": {"milliGpu": 500, "memBytes": 40 * GIB, "smPct": 50}}


def test_load_report_refuses_what_is_not_a_report():
    with pytest.raises(InputError, match="kind"):
        load_report({"nodes": []})
    with pytest.raises(InputError, match="ClusterReport: .*summary"):
        load_report({"kind": "ClusterReport", "nodes": []})


def test_an_unknown_output_format_is_an_input_error():
    with pytest.raises(InputError, match=r"-o: unknown output format 'xml' \(allowed: table, json, yaml\)"):
        render(cluster_report([], []), "xml")


# --- one pod -------------------------------------------------------------------------------------------------
def test_a_scheduled_pod_shows_its_node_gpus_and_share():
    nodes, pods = cluster()
    report = pod_report(pods[0], nodes[0])
    assert (report.state, report.node, report.event) == ("scheduled", "gpu-a", None)
    [d] = report.devices
    assert (d.container, d.gpu_index, d.model, d.uuid, d.priority) == ("main", 0, "H100", "GPU-a0", "high")
    assert d.usage == Usage(500, 40 * GIB, 50)
    assert render(report).splitlines() == [
        "pod default/train-a: scheduled on node gpu-a (phase Running)",
        "CONTAINER  PRIORITY  GPU  MODEL  MIG  UUID    COMPUTE  MEMORY(GiB)  SM%",
        "main       high      0    H100   -    GPU-a0  0.50     40.0         50%"]


def test_a_mig_pod_names_its_profile_and_gpu():
    nodes, pods = cluster()
    [d] = pod_report(pods[3], nodes[1]).devices
    assert (d.gpu_index, d.mig_profile, d.uuid, d.usage.mem_bytes) == (0, "3g.20gb", "MIG-3g-4", 21066814587)


def test_a_pod_on_a_node_that_lost_its_gpu_still_shows_what_it_was_given():
    nodes, pods = cluster()
    [d] = pod_report(pods[0], None).devices
    assert (d.gpu_index, d.model, d.uuid, d.usage) == (None, None, "GPU-a0", Usage(500, 40 * GIB, 50))


EVENTS = [
    {"reason": "FailedScheduling", "message": "older", "count": 3, "lastTimestamp": "2026-01-01T00:00:05Z",
     "involvedObject": {"kind": "Pod", "name": "big", "uid": "uid-big"}},
    {"reason": "FailedScheduling", "message": "0/3 nodes are available: 3 Insufficient GPU memory.", "count": 7,
     "lastTimestamp": "2026-01-01T00:01:00Z", "involvedObject": {"kind": "Pod", "name": "big", "uid": "uid-big"}},
    {"reason": "FailedScheduling", "message": "an earlier pod of that name", "count": 1,
     "lastTimestamp": "2026-01-01T09:00:00Z", "involvedObject": {"kind": "Pod", "name": "big", "uid": "other"}},
    {"reason": "Scheduled", "message": "not a failure", "lastTimestamp": "2026-01-01T10:00:00Z",
     "involvedObject": {"kind": "Pod", "name": "big", "uid": "uid-big"}},
]


def test_a_pending_pod_says_why_with_its_condition_and_latest_failed_scheduling_event():
    nodes, pods = cluster()
    report = pod_report(pods[5], None, EVENTS)
    assert (report.state, report.node, report.reason) == ("pending", None, "Unschedulable")
    assert report.event.message == "0/3 nodes are available: 3 Insufficient GPU memory." and report.event.count == 7
    assert render(report).splitlines() == [
        "pod default/big: not scheduled (phase Pending, scheduler fgpu-scheduler)",
        "why: PodScheduled=False, Unschedulable: 0/3 nodes are available: 1 node(s) didn't have GPUs, "
        "2 Insufficient GPU memory.",
        "last FailedScheduling event (7x, last seen 2026-01-01T00:01:00Z): 0/3 nodes are available: "
        "3 Insufficient GPU memory."]


def test_a_pod_nobody_has_tried_yet_says_so_and_shows_what_it_asked():
    request = ('{"version":"v1","source":"hami","containers":[{"container":"main","milliGpu":300,'
               '"memBytes":8589934592,"smPct":30}],"priority":"low","models":["H100-SXM5-80GB"]}')
    report = pod_report(pod("new", phase="Pending", annotations={keys.REQUEST: request}))
    assert report.request["containers"][0]["milliGpu"] == 300
    assert render(report).splitlines()[1:] == [
        "why: nothing reported yet: fgpu-scheduler has not tried this pod",
        "asked (hami spelling): main: 1x 0.30 GPU, 8.0 GiB, SM 30%; priority low; models H100-SXM5-80GB "
        "(fgpu's rule)"]  # an older request's `models`: catalog names, read as fgpu's filter


def test_bound_without_assignment_and_finished_pods():
    nodes, pods = cluster()
    assert pod_report(pods[4]).state == "bound"
    done = pod_report(pods[2], nodes[0])
    assert done.state == "finished"
    assert render(done).startswith("pod default/done: finished (Succeeded) on node gpu-a; its GPUs are released")


@pytest.mark.parametrize("key", [keys.ASSIGNMENT, keys.REQUEST])
def test_a_malformed_annotation_on_the_pod_asked_about_is_one_input_error_naming_it(key):
    with pytest.raises(InputError) as err:
        pod_report(pod("odd", "ml", annotations={key: '{"version": "v9"}'}))
    assert str(err.value).startswith(f"pod ml/odd: {key}:") and "\n" not in str(err.value)


def test_pod_report_reads_back_from_json():
    nodes, pods = cluster()
    report = pod_report(pods[5], None, EVENTS)
    assert isinstance(back := load_report(report_document(report)), PodReport) and back == report


def test_the_pure_modules_import_no_kubernetes_client():
    code = ("import sys, fgpu_operator.inspect.view, fgpu_operator.inspect.render; "
            "sys.exit(bool({'kubernetes', 'kopf', 'urllib3'} & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

