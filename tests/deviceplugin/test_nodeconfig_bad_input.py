"""The node config under bad input (issue 14, part A) and fuzzed (part D): every file gives a NodeConfig that
the device plugin and the daemon can use, or one SimgpuError line naming the field (the CLIs exit 2 with it)."""
import math
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deviceplugin.resources import discover, node_devices, node_level_resources
from simgpu.device import build_node
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import load_node_config, parse_node_config
from simgpu.nodeconfig.load import parse_yaml


def error_of(text: str) -> SimgpuError:
    with pytest.raises(SimgpuError) as err:
        parse_node_config(parse_yaml(text, "node.yaml"))
    assert "\n" not in str(err.value)
    return err.value


BASE = "version: v1\ngpus: [{model: H100}]\n"


@pytest.mark.parametrize(("text", "field", "words"), [
    (BASE + "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpuu, replicas: 4}]}}",
     "sharing.timeSlicing.resources[0].name", "'nvidia.com/gpuu' is not a resource of this node"),
    (BASE + "timeDilation: .inf", "timeDilation", "got inf"),
    (BASE + "timeDilation: .nan", "timeDilation", "got nan"),
    (BASE + "timeDilation: 100000", "timeDilation", "less than or equal to 10000"),
    ("version: v1\ngpus: [{model: H100, sharing: timeSlicing, replicas: 100000000}]", "gpus[0].replicas",
     "100000000 replicas (allowed: 1..1000 (each replica is a device the plugin lists to the kubelet))"),
    (BASE + "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 100000000}]}}",
     "sharing.mps.resources[0].replicas", "allowed: 1..1000"),
    ("version: v1\ngpus: [{model: H100, count: true}]", "gpus[0].count", "got True"),
    ("version: v1\ngpus: [{model: H100, count: 2.0}]", "gpus[0].count", "got 2.0"),
    (BASE + "timeDilation: '2'", "timeDilation", "got '2'"),
    (BASE + "qos: {priorities: 'yes'}", "qos.priorities", "got 'yes'"),
    ("version: v1\ngpus: [{model: A100-40GB, mig: {mode: disabled, layout: [3g.20gb]}}]", "gpus[0].mig",
     "a layout with MIG disabled would be ignored"),
    (BASE + "qos: {priorities: true, classes: [gold]}", "qos.classes", "unknown field"),
    (BASE + "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, rename: 'not a name', replicas: 2}]}}",
     "sharing.timeSlicing.resources[0].rename", "is not an extended resource name"),
    ("version: v1\ngpus: [{model: H100, count: 64}, {model: H100}]", "gpus", "65 GPUs on one node"),
    ("version: v1\nmigStrategy: mixed\ngpus: [{model: A100-40GB, mig: {layout: [3g.20gb]}}, {model: A100-40GB}]\n"
     "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, rename: x.com/a, replicas: 2},"
     " {name: nvidia.com/mig-3g.20gb, rename: x.com/a, replicas: 2}]}}",
     "sharing.timeSlicing.resources[1].rename", "'x.com/a' is also the advertised name of resources[0]"),
])
def test_bad_config_names_field_value_and_allowed(text, field, words):
    err = error_of(text)
    assert err.field == field and words in str(err), str(err)


@pytest.mark.parametrize(("text", "where"), [
    (BASE + "gpus: [{model: A100-40GB}]\n", "node.yaml: line 3 column 1: not valid YAML: key 'gpus' appears twice "
                                             "(first on line 2)"),
    ("version: v1\nqos: {priorities: true, priorities: false}\ngpus: [{model: H100}]\n",
     "node.yaml: line 2 column 25: not valid YAML: key 'priorities' appears twice"),
    ("version: v1\ngpus: [{model: H100}\n  x: :", "node.yaml: line 3 column 3: not valid YAML: while parsing a flow "
                                                  "sequence "),
])
def test_yaml_errors_are_one_line_naming_the_file(text, where):
    err = error_of(text)
    assert err.field == "--config" and where in str(err), str(err)


def test_non_utf8_file_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("version: v1\n# caf\xe9\ngpus: [{model: H100}]\n".encode("latin-1"))
    with pytest.raises(SimgpuError) as err:
        load_node_config(path)
    assert str(err.value) == f"--config: {path}: byte 17 is not UTF-8 (b'\\xe9') (allowed: a UTF-8 text file)"


def test_the_plugin_and_daemon_clis_print_it_as_one_line_with_exit_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("version: v1\ngpus: [{model: H100, count: true}]\n")
    for argv in (["-m", "deviceplugin.cli", "--config", str(path), "--standalone"],
                 ["-m", "simgpu.cli", "daemon", "--config", str(path), "--socket", str(tmp_path / "d.sock")]):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.strip().endswith("gpus[0].count: got True: input should be a valid integer")
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --- fuzz -------------------------------------------------------------------------------------------------
KEYS = ["version", "gpus", "model", "count", "sharing", "replicas", "mig", "mode", "layout", "timeSlicing", "mps",
        "resources", "name", "rename", "devices", "migStrategy", "memoryQuota", "timeDilation", "tokenSecretFile",
        "qos", "priorities", "sloSlowdown", "fractional", "splitCount", "gpu", "memory", "cores", "nodeName",
        "renameByDefault", "failRequestsGreaterThanOne", "stateDir"]
WORDS = ["v1", "H100", "A100-40GB", "A30", "T4", "H200", "all", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
         "nvidia.com/mig-3g.20gb", "1g.10gb", "3g.20gb", "all-1g.10gb", "all-3g.40gb", "enabled", "disabled",
         "exclusive", "timeSlicing", "mps", "fractional", "mixed", "single", "none", "hard", "oversubscribe",
         "0:0", "1:2", "GPU-00000000-0000-0000-0000-000000000000", "x.com/gpu", ""]
scalars = (st.sampled_from(WORDS) | st.text(max_size=8) | st.booleans() | st.none()
           | st.sampled_from([-1, 0, 1, 2, 3, 4, 7, 8, 64, 65, 1000, 1001, 10**8, 2**70])
           | st.sampled_from([0.0, 0.5, 1.0, 1.5, 1e-4, 1e30, math.inf, -math.inf, math.nan]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=8)
def mostly(good, bad=None):
    """`good` nine times in ten, else any value (so most documents get past the first field checked)."""
    return st.integers(0, 9).flatmap(lambda i: good if i else (bad if bad is not None else values))


ints = st.sampled_from([1, 1, 2, 2, 3, 4, 7, 0, -1, 64, 65, 1000, 1001, 10**8])
resource = st.fixed_dictionaries(
    {"name": mostly(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
                                     "nvidia.com/mig-3g.20gb", "nvidia.com/gpuu"])), "replicas": mostly(ints)},
    optional={"devices": mostly(st.sampled_from(["all", 1, 2, [0], [1], [0, 1], ["0:0"], ["1:2"], [5]])),
              "rename": mostly(st.sampled_from(["x.com/gpu", "nvidia.com/gpu.shared", "bad name"]))})
replicated = st.fixed_dictionaries({"resources": mostly(st.lists(resource, min_size=1, max_size=3))},
                                   optional={"renameByDefault": mostly(st.booleans()),
                                             "failRequestsGreaterThanOne": mostly(st.booleans())})
mig = st.fixed_dictionaries({}, optional={
    "mode": mostly(st.sampled_from(["enabled", "disabled"])),
    "layout": mostly(st.sampled_from(["all-1g.10gb", "all-3g.40gb", ["3g.20gb"], ["1g.10gb", "1g.10gb"],
                                      ["3g.20gb", "4g.20gb"], ["7g.80gb"], []]))})
group = st.fixed_dictionaries(
    {"model": mostly(st.sampled_from(["H100", "A100-40GB", "A30", "T4", "H200"]))},
    optional={"count": mostly(ints), "sharing": mostly(st.sampled_from(["exclusive", "timeSlicing", "mps", "fractional"])),
              "replicas": mostly(ints), "mig": mostly(mig)})
documents = mostly(st.fixed_dictionaries(
    {"version": mostly(st.just("v1")), "gpus": mostly(st.lists(group, min_size=1, max_size=3))},
    optional={"sharing": mostly(st.fixed_dictionaries({}, optional={"timeSlicing": replicated, "mps": replicated})),
              "migStrategy": mostly(st.sampled_from(["none", "single", "mixed"])),
              "memoryQuota": mostly(st.sampled_from(["hard", "oversubscribe"])),
              "timeDilation": mostly(st.sampled_from([1, 0.5, 10, 1e-3, 1e4, 1e5, math.inf, math.nan])),
              "qos": mostly(st.fixed_dictionaries({}, optional={"priorities": mostly(st.booleans()),
                                                                "sloSlowdown": mostly(st.sampled_from([1.2, 1.0, 2, 100, 101]))})),
              "fractional": mostly(st.fixed_dictionaries({}, optional={
                  "splitCount": mostly(ints),
                  "resources": mostly(st.fixed_dictionaries({}, optional={
                      "gpu": mostly(st.sampled_from(["nvidia.com/gpu", "x.com/vgpu"])),
                      "memory": mostly(st.sampled_from(["nvidia.com/gpumem", "x.com/mem"]))}))})),
              "nodeName": mostly(st.sampled_from(["node-a", "n"]))}))


def _texts(doc, cut, junk):
    text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True)
    return text[:cut] + junk + text[cut:]


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.integers(0, 400), st.sampled_from([""] * 20 + [":", "\n  - x", "{", "]", "\t", "&a *a",
                                                                   "!!python/object:os.system x", "\x00"]))
def test_fuzzed_node_configs_load_or_name_one_field(doc, cut, junk):
    text = _texts(doc, cut, junk)
    try:
        cfg = parse_node_config(parse_yaml(text, "node.yaml"))
    except SimgpuError as err:
        assert "\n" not in str(err) and str(err)
        event(f"refused at {err.field}")
        return
    event("accepted")
    # accepted: the device plugin and the daemon can build everything from it
    assert discover(cfg, "node") is not None and node_devices(cfg, "node")
    node_level_resources(cfg, "node")
    assert build_node(cfg, "node").devices


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_bytes_never_crash_the_loader(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cfg") / "node.yaml"
    path.write_bytes(data)
    try:
        load_node_config(path)
    except SimgpuError as err:
        assert "\n" not in str(err)
