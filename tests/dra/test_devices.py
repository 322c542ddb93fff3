"""The DRA device model: which forms each GPU offers, and that its counters admit exactly the MIG sets
simgpu.mig's placement rules allow, and never a whole GPU, a share and a MIG instance over the same silicon."""
from __future__ import annotations

import itertools

import pytest
from dra_support import NODE, node_config
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.dra.devices import gpu_devices, node_devices
from fgpu_contracts import dra as names
from simgpu import mig
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import parse_node_config


def _admits(counter_set: dict[str, int], devices) -> bool:
    used: dict[str, int] = {}
    for d in devices:
        for k, v in d.consumes.items():
            used[k] = used.get(k, 0) + v
    return all(used[k] <= counter_set[k] for k in used)


def _mig_rules_allow(gpu_spec, devices) -> bool:
    """simgpu.mig's rules for fixed placements: no two overlap, and the profiles together pass its count,
    compute and media checks."""
    for a, b in itertools.combinations(devices, 2):
        pa, pb = mig.get_profile(gpu_spec, a.profile), mig.get_profile(gpu_spec, b.profile)
        if a.start < b.start + pb.memory_slices and b.start < a.start + pa.memory_slices:
            return False
    try:
        mig.find_placements(gpu_spec, [d.profile for d in devices])
    except SimgpuError:
        return False
    return True


def test_forms_per_gpu():
    devs = node_devices(node_config(), NODE)
    kinds = {}
    for d in devs.devices:
        kinds.setdefault(d.gpu.index, set()).add(d.kind)
    assert kinds[0] == kinds[1] == {names.KIND_GPU, names.KIND_SHARE, names.KIND_MIG}
    assert kinds[2] == {names.KIND_GPU}  # exclusive T4: no share, no MIG
    assert kinds[3] == {names.KIND_MIG}  # partitioned H100: its two instances only
    h100 = [d for d in devs.devices if d.gpu.index == 3]
    assert sorted(d.profile for d in h100) == ["3g.40gb", "4g.40gb"]
    assert all(not d.emulated for d in h100)
    assert len({d.name for d in devs.devices}) == len(devs.devices)
    assert all(len(d.name) <= 63 and d.name.replace("-", "").isalnum() for d in devs.devices)


def test_whole_share_and_mig_of_one_gpu_exclude_each_other():
    devs = node_devices(node_config(), NODE)
    gpu0 = [d for d in devs.devices if d.gpu.index == 0]
    cset = devs.counter_sets["gpu-0"]
    whole = next(d for d in gpu0 if d.kind == names.KIND_GPU)
    share = next(d for d in gpu0 if d.kind == names.KIND_SHARE)
    small = next(d for d in gpu0 if d.kind == names.KIND_MIG)
    for a, b in [(whole, share), (whole, small), (share, small)]:
        assert not _admits(cset, [a, b]), (a.name, b.name)
    assert _admits(cset, [whole]) and _admits(cset, [share]) and _admits(cset, [small])
    other = next(d for d in devs.devices if d.gpu.index == 1 and d.kind == names.KIND_GPU)
    assert other.counter_set != whole.counter_set  # another GPU: another counter set


@pytest.mark.parametrize("model", [g.short_name for g in mig.mig_gpus()])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_counters_admit_exactly_what_mig_rules_allow(model, data):
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": model, "sharing": "fractional"}]})
    gpu = cfg.gpu_devices(NODE)[0]
    placements = [d for d in gpu_devices(NODE, gpu) if d.kind == names.KIND_MIG]
    chosen = data.draw(st.lists(st.sampled_from(placements), min_size=1, max_size=8, unique_by=lambda d: d.name))
    from deviceplugin.dra.devices import gpu_counters

    assert _admits(gpu_counters(gpu), chosen) == _mig_rules_allow(gpu.spec, chosen), [d.name for d in chosen]


def test_every_placement_mig_allows_is_offered():
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": "A100-80GB", "sharing": "fractional"}]})
    gpu = cfg.gpu_devices(NODE)[0]
    offered = {(d.profile, d.start) for d in gpu_devices(NODE, gpu) if d.kind == names.KIND_MIG}
    expected = {(p.name, s) for p in mig.profiles(gpu.spec) for s in p.starts}
    assert offered == expected
