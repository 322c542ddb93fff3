"""`sharing.<mode>.resources[].devices`: all, a count, or a list of GPU indices, MIG indices and UUIDs (NVIDIA's
schema). Selected devices are shared, the rest stay whole; every mistake is one error naming the field."""
import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.resources import discover
from simgpu.device.node import build_node
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import gpu_uuid, mig_uuid, parse_node_config

NODE = "n1"
FIELD = "sharing.timeSlicing.resources[0].devices"


def ts(devices, count=4, **top):
    entry = {"name": "nvidia.com/gpu", "replicas": 4, "devices": devices}
    return {"version": "v1", "gpus": [{"model": "H100", "count": count}],
            "sharing": {"timeSlicing": {"resources": [entry]}}, **top}


def modes(doc, node=NODE):
    return [(d.sharing, d.replicas) for d in parse_node_config(doc).gpu_devices(node)]


def error_of(doc, node=NODE):
    with pytest.raises(SimgpuError) as err:
        parse_node_config(doc).gpu_devices(node)
    return err.value


SHARED, WHOLE = ("timeSlicing", 4), ("exclusive", 1)


@pytest.mark.parametrize("devices,expected", [
    ("all", [SHARED] * 4),
    ([0, 2], [SHARED, WHOLE, SHARED, WHOLE]),
    (["1", "3"], [WHOLE, SHARED, WHOLE, SHARED]),
    (2, [SHARED, SHARED, WHOLE, WHOLE]),
    ([gpu_uuid(NODE, 3)], [WHOLE, WHOLE, WHOLE, SHARED]),
    ([gpu_uuid(NODE, 1).upper().replace("GPU-", "gpu-"), 0], [SHARED, SHARED, WHOLE, WHOLE]),
])
def test_selected_gpus_are_shared_the_rest_whole(devices, expected):
    assert modes(ts(devices)) == expected


def test_unselected_gpus_stay_whole_under_the_resource_name_as_in_nvidias_plugin():
    cfg = parse_node_config(ts([0, 2]))
    [res] = discover(cfg, NODE)
    whole = [s for s in res.slots if s.mode == "exclusive"]
    assert res.name == "nvidia.com/gpu" and len(res.slots) == 2 * 4 + 2
    assert [s.id for s in whole] == [gpu_uuid(NODE, 1), gpu_uuid(NODE, 3)]


def test_rename_separates_replicas_from_whole_gpus():
    doc = ts([1])
    doc["sharing"]["timeSlicing"]["renameByDefault"] = True
    assert {r.name: len(r.slots) for r in discover(parse_node_config(doc), NODE)} == {
        "nvidia.com/gpu.shared": 4, "nvidia.com/gpu": 3}


def test_the_daemon_emulates_the_same_modes():
    cfg = parse_node_config(ts([0]))
    node = build_node(cfg, NODE)
    assert [g.sharing for g in cfg.gpu_devices(NODE)] == ["timeSlicing", "exclusive", "exclusive", "exclusive"]
    assert [g.uuid for g in node.gpus] == [g.uuid for g in cfg.gpu_devices(NODE)]


def test_uuid_of_another_node_is_an_error_when_the_node_is_known():
    doc = ts([gpu_uuid("other-node", 0)])
    parse_node_config(doc)  # the node name is not known yet: checked later
    err = error_of(doc)
    assert err.field == FIELD and gpu_uuid("other-node", 0) in str(err) and gpu_uuid(NODE, 0) in err.allowed


def test_uuid_checked_at_parse_time_when_the_config_names_the_node():
    with pytest.raises(SimgpuError) as err:
        parse_node_config(ts([gpu_uuid("other-node", 0)], nodeName=NODE))
    assert err.value.field == FIELD


def test_group_without_sharing_and_no_gpu_entry_is_whole():
    doc = {"version": "v1", "gpus": [{"model": "H100", "mig": {"layout": ["7g.80gb"]}}, {"model": "H100"}],
           "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-7g.80gb", "replicas": 2}]}}}
    gpus = parse_node_config(doc).gpu_devices(NODE)
    assert gpus[0].mig[0].replicas == 2 and (gpus[1].sharing, gpus[1].replicas) == WHOLE


MIG = {"version": "v1", "gpus": [{"model": "H100", "count": 2, "mig": {"layout": ["3g.40gb", "1g.10gb", "1g.10gb"]}},
                                 {"model": "H100"}],
       "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 3, "devices": None}]}}}


def mig_doc(devices):
    doc = copy.deepcopy(MIG)
    doc["sharing"]["timeSlicing"]["resources"][0]["devices"] = devices
    return doc


def mig_replicas(devices):
    return [[m.replicas for m in g.mig] for g in parse_node_config(mig_doc(devices)).gpu_devices(NODE)[:2]]


def test_mig_devices_by_position_gpu_and_uuid():
    assert mig_replicas(["0:1"]) == [[1, 3, 1], [1, 1, 1]]
    assert mig_replicas([1]) == [[1, 1, 1], [1, 3, 3]]  # a GPU index: all its devices of the profile
    cfg = parse_node_config(mig_doc("all"))
    third = cfg.gpu_devices(NODE)[1].mig[2]
    assert mig_replicas([mig_uuid(NODE, 1, third.profile, third.start)]) == [[1, 1, 1], [1, 1, 3]]
    assert mig_replicas(3) == [[1, 3, 3], [1, 3, 1]]


@pytest.mark.parametrize("doc,needle", [
    (ts([7]), "no GPU 7"),
    (ts([0, 0]), "listed twice"),
    (ts([1, "1"]), "listed twice"),
    (ts([gpu_uuid(NODE, 2), 2]), "listed twice"),
    (ts([]), "empty list"),
    (ts(0), ">= 1"),
    (ts(-1), ">= 1"),
    (ts(5), "first 5"),
    (ts(True), "not a device selection"),
    (ts("some"), "not a device selection"),
    (ts(1.5), "not a device selection"),
    (ts({"a": 1}), "not a device selection"),
    (ts([True]), "item 0"),
    (ts([0, None]), "item 1"),
    (ts(["GPU-not-a-uuid"]), "item 0"),
    (ts([-2]), "item 0"),
    (ts(["0:1"]), "is a MIG device"),
    (ts(["MIG-" + gpu_uuid(NODE, 0)[4:]]), "is a MIG device"),
    (mig_doc([0, "0:0"]), "is a 3g.40gb"),
    (mig_doc([2]), "MIG disabled"),
    (mig_doc(["2:0"]), "MIG disabled"),
    (mig_doc(["0:3"]), "no MIG device 0:3"),
    (mig_doc(["0:1", 0]), "listed twice"),
    (mig_doc(["MIG-" + gpu_uuid(NODE, 0)[4:]]), "no MIG device"),
    (mig_doc(7), "first 7"),
])
def test_bad_devices_name_the_field(doc, needle):
    err = error_of(doc)
    assert err.field == FIELD, str(err)
    assert needle in str(err), str(err)
    assert "\n" not in str(err)


def test_mig_enabled_gpu_is_not_a_whole_gpu():
    doc = copy.deepcopy(MIG)
    doc["sharing"]["timeSlicing"]["resources"] = [{"name": "nvidia.com/gpu", "replicas": 2, "devices": [0]}]
    err = error_of(doc)
    assert err.field == FIELD and "MIG-enabled" in str(err) and "nvidia.com/mig-1g.10gb" in str(err)


def test_gpu_claimed_by_a_resource_and_by_another_sharing_mode():
    doc = ts([0, 3])
    doc["gpus"] = [{"model": "H100", "count": 3}, {"model": "H100", "sharing": "fractional"}]
    doc["fractional"] = {"resources": {"gpu": "fgpu.io/slot"}}
    err = error_of(doc)
    assert err.field == FIELD and "claimed twice" in str(err) and "gpus[1].sharing is fractional" in str(err)


def test_resource_without_devices_here_lists_the_names():
    doc = ts([0])
    doc["sharing"]["timeSlicing"]["resources"][0]["name"] = "nvidia.com/mig-1g.10gb"
    err = error_of(doc)
    assert err.field == "sharing.timeSlicing.resources[0].name" and err.allowed == ["nvidia.com/gpu"]


def test_single_strategy_mig_name_refused():
    doc = {"version": "v1", "migStrategy": "single", "gpus": [{"model": "H100", "mig": {"layout": "all-1g.10gb"}}],
           "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2,
                                                      "devices": [0]}]}}}
    assert error_of(doc).field == "sharing.timeSlicing.resources[0].name"


def test_explicitly_shared_group_left_out_needs_its_own_replicas():
    doc = ts([0])
    doc["gpus"] = [{"model": "H100", "count": 2, "sharing": "timeSlicing"}]
    err = error_of(doc)
    assert err.field == "gpus[0].replicas" and "GPU 1" in str(err) and FIELD in str(err)
    doc["gpus"][0]["replicas"] = 2
    assert modes(doc) == [("timeSlicing", 2), ("timeSlicing", 2)]


def test_whole_gpu_left_out_clashes_with_fractional_name():
    doc = ts([0])
    doc["gpus"] = [{"model": "H100", "count": 2}, {"model": "H100", "sharing": "fractional"}]
    doc["sharing"]["timeSlicing"]["renameByDefault"] = True
    assert error_of(doc).field == "fractional.resources.gpu"  # GPU 1 is whole, under nvidia.com/gpu


junk = st.recursive(st.none() | st.booleans() | st.integers(-3, 9) | st.floats(allow_nan=False)
                    | st.sampled_from(["all", "0", "3", "1:0", "x", "", "GPU-", gpu_uuid(NODE, 1),
                                       gpu_uuid("elsewhere", 0), "MIG-" + gpu_uuid(NODE, 0)[4:]]),
                    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=3), kids, max_size=2),
                    max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(junk)
def test_fuzzed_devices_field_is_valid_or_one_error_naming_it(devices):
    try:
        gpus = parse_node_config(ts(devices)).gpu_devices(NODE)
    except SimgpuError as err:
        assert err.field == FIELD, str(err)
        return
    assert all((g.sharing, g.replicas) in (SHARED, WHOLE) for g in gpus)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_valid_list_shares_exactly_the_listed_gpus(data):
    chosen = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True))
    refs = [data.draw(st.sampled_from([i, str(i), gpu_uuid(NODE, i)])) for i in chosen]
    cfg = parse_node_config(ts(refs))
    assert [d.index for d in cfg.gpu_devices(NODE) if d.sharing == "timeSlicing"] == sorted(chosen)
    [res] = discover(cfg, NODE)
    assert len(res.slots) == 4 * len(chosen) + (4 - len(chosen))


def test_plugin_process_advertises_the_selection(kubelet, run_plugin):
    run_plugin("""version: v1
gpus: [{model: A100-80GB, count: 3}]
sharing:
  mps:
    renameByDefault: true
    resources: [{name: nvidia.com/gpu, replicas: 2, devices: [2]}]
""", node=NODE)
    shared = kubelet.wait_devices("nvidia.com/gpu.shared", lambda d: len(d) == 2)
    whole = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    assert {d.ID.split("::")[0] for d in shared} == {gpu_uuid(NODE, 2)}
    assert sorted(d.ID for d in whole) == sorted([gpu_uuid(NODE, 0), gpu_uuid(NODE, 1)])


def test_plugin_exits_2_on_a_uuid_of_another_node(tmp_path, secret_file, capsys):
    from deviceplugin.cli import main

    cfg = tmp_path / "node.yaml"
    cfg.write_text(f"version: v1\ngpus: [{{model: H100, count: 2}}]\ntokenSecretFile: {secret_file}\nsharing:\n"
                   f"  timeSlicing:\n    resources: [{{name: nvidia.com/gpu, replicas: 2, devices: ['{gpu_uuid('x', 0)}']}}]\n")
    code = main(["--config", str(cfg), "--node-name", NODE, "--device-plugin-path", str(tmp_path), "--standalone"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith(f"fgpu-device-plugin: error: {FIELD}: no GPU {gpu_uuid('x', 0)} on node {NODE}")
