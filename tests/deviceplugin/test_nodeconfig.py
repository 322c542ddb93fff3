"""Node config: examples load, UUIDs are stable, bad input names the field."""
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu.errors import SimgpuError
from simgpu.nodeconfig import load_node_config, parse_node_config

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "node-config"


def cfg(**kw):
    doc = {"version": "v1", "gpus": [{"model": "H100", "count": 2}]}
    doc.update(kw)
    return doc


def field_of(doc):
    with pytest.raises(SimgpuError) as err:
        parse_node_config(doc)
    return err.value


@pytest.mark.parametrize("name", ["exclusive", "timeslicing", "timeslicing-some", "mps", "fractional"])
def test_examples_load(name):
    c = load_node_config(EXAMPLES / f"{name}.yaml")
    assert c.gpu_devices("n")


def test_uuids_stable_and_distinct_per_node():
    c = parse_node_config(cfg())
    a, b = c.gpu_devices("node-a"), c.gpu_devices("node-b")
    assert [d.uuid for d in a] == [d.uuid for d in c.gpu_devices("node-a")]
    assert len({d.uuid for d in a + b}) == 4
    assert all(d.uuid.startswith("GPU-") for d in a)


def test_nvidia_timeslicing_schema_accepted_as_is():
    doc = yaml.safe_load("""
version: v1
gpus: [{model: A100-80GB, count: 2}]
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: 10
""")
    c = parse_node_config(doc)
    assert [d.replicas for d in c.gpu_devices("n")] == [10, 10]
    assert c.sharing.time_slicing.advertised_name("nvidia.com/gpu") == "nvidia.com/gpu.shared"


def test_group_replicas_override():
    c = parse_node_config(cfg(gpus=[{"model": "H100", "sharing": "mps", "replicas": 3}]))
    assert c.gpu_devices("n")[0].replicas == 3


def test_unknown_model_names_field():
    err = field_of(cfg(gpus=[{"model": "H1000"}]))
    assert err.field == "gpus[0].model"
    assert "H100" in err.allowed


def test_replicas_below_one_names_field():
    err = field_of(cfg(sharing={"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}}))
    assert err.field == "sharing.timeSlicing.resources[0].replicas"


def test_timeslicing_without_replicas():
    assert field_of(cfg(gpus=[{"model": "H100", "sharing": "timeSlicing"}])).field == "gpus[0].replicas"


def test_bad_sharing_mode_lists_allowed():
    err = field_of(cfg(gpus=[{"model": "H100", "sharing": "magic"}]))
    assert err.field == "gpus[0].sharing"
    assert set(err.allowed) == {"exclusive", "timeSlicing", "mps", "fractional"}


def test_unknown_field_rejected():
    assert field_of(cfg(gpuz=[])).field == "gpuz"


def test_mig_on_non_mig_gpu():
    assert field_of(cfg(gpus=[{"model": "L4", "mig": {"layout": ["1g.6gb"]}}])).field == "gpus[0].mig"


def test_time_dilation_bounds():
    assert field_of(cfg(timeDilation=0)).field == "timeDilation"


def test_qos_defaults_and_bounds():
    assert (parse_node_config(cfg()).qos.priorities, parse_node_config(cfg()).qos.slo_slowdown) == (True, 1.2)
    off = parse_node_config(cfg(qos={"priorities": False, "sloSlowdown": 1.5})).qos
    assert (off.priorities, off.slo_slowdown) == (False, 1.5)
    assert field_of(cfg(qos={"sloSlowdown": 1.0})).field == "qos.sloSlowdown"  # 1 would forbid any co-runner
    assert field_of(cfg(qos={"priority": True})).field == "qos.priority"


def test_both_node_sharing_modes_rejected():
    block = {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
    assert field_of(cfg(sharing={"timeSlicing": block, "mps": block})).field == "sharing"


def test_fractional_name_clash():
    err = field_of(cfg(gpus=[{"model": "H100", "sharing": "fractional"}, {"model": "H100"}]))
    assert err.field == "fractional.resources.gpu"


def test_missing_version():
    assert field_of({"gpus": [{"model": "H100"}]}).field == "version"


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                    max_leaves=8))
def test_fuzzed_gpus_entry_gives_simgpu_error(junk):
    """Whatever sits in gpus[0]: a valid config or one SimgpuError naming a field — never another exception."""
    try:
        parse_node_config({"version": "v1", "gpus": [junk]})
    except SimgpuError as err:
        assert err.field


def test_mig_example_layouts():
    c = load_node_config(EXAMPLES / "mig-mixed.yaml")
    gpus = c.gpu_devices("n")
    assert [m.profile for m in gpus[0].mig] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert len(gpus[1].mig) == 7 and not gpus[2].mig
    assert c.effective_mig_strategy == "mixed"
    uuids = [m.uuid for g in gpus for m in g.mig]
    assert len(set(uuids)) == len(uuids) and all(u.startswith("MIG-") for u in uuids)


def test_forbidden_mig_layout_names_field():
    # 4g.40gb + 4g.40gb needs 8 compute slices of H100's 7
    err = field_of(cfg(gpus=[{"model": "H100", "mig": {"layout": ["4g.40gb", "4g.40gb"]}}]))
    assert err.field == "gpus[0].mig.layout"


def test_unknown_mig_profile_names_field():
    assert field_of(cfg(gpus=[{"model": "H100", "mig": {"layout": "all-9g.99gb"}}])).field == "gpus[0].mig.layout"


def test_single_strategy_needs_one_profile():
    err = field_of(cfg(migStrategy="single", gpus=[{"model": "H100", "mig": {"layout": ["3g.40gb", "1g.10gb"]}}]))
    assert err.field == "migStrategy"


def test_mig_with_strategy_none_rejected():
    err = field_of(cfg(migStrategy="none", gpus=[{"model": "H100", "mig": {"layout": ["7g.80gb"]}}]))
    assert err.field == "migStrategy"


def test_mps_on_mig_rejected():
    err = field_of(cfg(gpus=[{"model": "H100", "sharing": "mps", "replicas": 2, "mig": {"layout": ["7g.80gb"]}}]))
    assert err.field == "gpus[0].sharing"
