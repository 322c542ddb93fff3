"""MIG: profile tables, layout validity (NVIDIA's documented cases + an enumeration oracle), and MIG instances
as smaller GPUs."""
from __future__ import annotations

import itertools
from collections import Counter
from functools import cache

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu import mig
from simgpu.catalog import get_gpu
from simgpu.errors import SimgpuError
from simgpu.mig import check_layout, get_profile, instance_spec, profiles

MIG_GPUS = ["A100-40GB", "A100-80GB", "A30", "H100", "H100-PCIE", "H200"]


# ------------------------------------------------------------------------------------------ tables

def test_a100_seed_fact_seven_compute_slices_of_14_sms_and_eight_5gb_memory_slices():
    assert mig.slices("A100-40GB") == (7, 8)
    for prof in profiles("A100-40GB"):
        assert prof.sms == 14 * prof.compute_slices
    one = get_profile("A100-40GB", "1g.5gb")
    assert one.memory_slices == 1
    assert one.mem_bytes / 1e9 == pytest.approx(5, rel=0.05)  # nvidia-smi shows 4.75 GiB = 5.1 GB
    assert get_profile("A100-40GB", "7g.40gb").memory_slices == 8


@pytest.mark.parametrize(("gpu", "names"), [
    ("A100-40GB", ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
    ("A100-80GB", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("A30", ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]),
    ("H100", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("H100-PCIE", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("H200", ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
])
def test_profile_names_per_gpu(gpu, names):
    assert [p.name for p in profiles(gpu)] == names


def test_h100_sm_counts_from_nvidia_smi():
    assert {p.name: p.sms for p in profiles("H100")} == {
        "1g.10gb": 16, "1g.10gb+me": 16, "1g.20gb": 26, "2g.20gb": 32, "3g.40gb": 60, "4g.40gb": 64, "7g.80gb": 132}


def test_full_profile_uses_every_sm_the_catalog_allows():
    for gpu in MIG_GPUS:
        full = max(profiles(gpu), key=lambda p: p.memory_slices)
        assert full.sms <= get_gpu(gpu).sms
        assert full.mem_bytes <= get_gpu(gpu).mem_bytes
        assert full.placements == ((0, mig.slices(gpu)[1]),)


@pytest.mark.parametrize("spelling", ["3g.20gb", "MIG 3g.20gb", "mig 3G.20GB", "  3g.20gb ", "MIG-3g.20gb"])
def test_profile_spellings(spelling):
    assert get_profile("A100-40GB", spelling).name == "3g.20gb"


def test_unknown_profile_lists_the_gpus_profiles():
    with pytest.raises(SimgpuError) as info:
        get_profile("A100-80GB", "3g.20gb")  # the 40GB name on the 80GB card
    assert info.value.field == "profile"
    assert "3g.40gb" in info.value.allowed and "7g.80gb" in info.value.allowed


@pytest.mark.parametrize("gpu", ["T4", "V100", "L40S", "P100"])
def test_mig_on_gpu_without_mig(gpu):
    for call in (lambda: profiles(gpu), lambda: check_layout(gpu, ["1g.5gb"])):
        with pytest.raises(SimgpuError) as info:
            call()
        assert info.value.field == "gpu"
        assert set(info.value.allowed) == set(MIG_GPUS)


def test_bad_table_data_is_reported():
    from importlib import resources
    doc = yaml.safe_load(resources.files("simgpu").joinpath("data", "mig.yaml").read_text())
    doc["gpus"]["A30"]["profiles"][2]["starts"] = [1]  # a 2-slice profile cannot start at slice 1
    with pytest.raises(SimgpuError, match="A30.*2g.12gb.*not aligned"):
        mig.parse_mig_tables(doc)
    doc["gpus"]["A30"]["profiles"][2]["starts"] = [0]
    doc["gpus"]["A30"]["profiles"][0]["sms"] = "many"
    with pytest.raises(SimgpuError, match="A30.*sms"):
        mig.parse_mig_tables(doc)


# ------------------------------------------------------------------------------------------ layouts

# From NVIDIA's MIG user guide (G1-G3) and gpu_specs.md section 3a.
VALID = [
    ("A100-40GB", ["4g.20gb", "3g.20gb"]),                 # G2: valid since R510
    ("A100-40GB", ["3g.20gb", "4g.20gb"]),
    ("A100-40GB", ["4g.20gb", "2g.10gb", "1g.5gb"]),
    ("A100-40GB", ["4g.20gb", "1g.5gb", "1g.5gb", "1g.5gb"]),
    ("A100-40GB", ["3g.20gb", "3g.20gb"]),                 # G3 -lgi example (0:4 and 4:4)
    ("A100-40GB", ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]),  # G3 geometry 3-2-1-1
    ("A100-40GB", ["2g.10gb"] + ["1g.5gb"] * 5),           # G3 geometry 2-1-1-1-1-1
    ("A100-40GB", ["3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb"]),  # G1 example: nvidia-smi mig -cgi 9,19,14,19
    ("A100-40GB", ["3g.20gb"] + ["1g.5gb"] * 4),
    ("A100-40GB", ["2g.10gb"] * 3 + ["1g.5gb"]),
    ("A100-40GB", ["1g.5gb"] * 7),
    ("A100-40GB", ["1g.10gb"] * 4),
    ("A100-40GB", ["2g.10gb"] * 3 + ["1g.10gb"]),          # 1g.10gb takes slices 6-7, where no 2g fits
    ("A100-40GB", ["7g.40gb"]),
    ("A100-40GB", ["1g.5gb+me"] + ["1g.5gb"] * 6),
    ("A100-80GB", ["4g.40gb", "3g.40gb"]),
    ("H100", ["4g.40gb", "3g.40gb"]),
    ("H100", ["1g.20gb"] * 4),
    ("H100", ["1g.20gb", "2g.20gb", "2g.20gb", "2g.20gb"]),
    ("H100-PCIE", ["3g.40gb", "2g.20gb", "1g.10gb+me", "1g.10gb"]),
    ("H200", ["4g.71gb", "2g.35gb", "1g.18gb"]),
    ("A30", ["1g.6gb"] * 4),
    ("A30", ["2g.12gb", "1g.6gb", "1g.6gb"]),
    ("A30", ["2g.12gb", "2g.12gb"]),
    ("A30", ["4g.24gb"]),
    ("A30", ["1g.6gb+me", "1g.6gb", "2g.12gb"]),
]

INVALID = [
    ("A100-40GB", ["4g.20gb", "4g.20gb"]),                 # 4g may only start at 0
    ("A100-40GB", ["7g.40gb", "1g.5gb"]),                  # 7g excludes everything
    ("A100-40GB", ["2g.10gb"] * 4),                         # a 2g cannot start at 6
    ("A100-40GB", ["1g.5gb"] * 8),                          # a 1g cannot start at 7
    ("A100-40GB", ["3g.20gb"] * 3),
    ("A100-40GB", ["3g.20gb", "3g.20gb", "1g.5gb"]),       # 6 compute slices used, but memory is full
    ("A100-40GB", ["4g.20gb", "3g.20gb", "1g.5gb"]),
    ("A100-40GB", ["1g.5gb+me", "1g.5gb+me"]),
    ("A100-40GB", ["1g.10gb"] * 5),
    ("H100", ["7g.80gb", "1g.10gb"]),
    ("H100", ["4g.40gb", "4g.40gb"]),
    ("H100", ["1g.20gb"] * 4 + ["1g.10gb"]),
    ("A30", ["4g.24gb", "1g.6gb"]),
    ("A30", ["2g.12gb"] * 3),
    ("A30", ["1g.6gb+me", "2g.12gb+me"]),                  # only one +me instance per GPU
    ("A30", ["2g.12gb", "1g.6gb", "1g.6gb", "1g.6gb"]),
]


def _assert_sound(gpu, names, placements):
    compute, memory = mig.slices(gpu)
    assert [p.profile for p in placements] == [get_profile(gpu, n).name for n in names]
    ranges = []
    for p in placements:
        prof = get_profile(gpu, p.profile)
        assert (p.start, p.size) in prof.placements
        assert p.start >= 0 and p.start + p.size <= memory
        ranges.append(set(range(p.start, p.start + p.size)))
    for a, b in itertools.combinations(ranges, 2):
        assert not a & b
    assert sum(get_profile(gpu, n).compute_slices for n in names) <= compute
    for name, n in Counter(names).items():
        assert n <= get_profile(gpu, name).max_count


@pytest.mark.parametrize(("gpu", "names"), VALID, ids=lambda v: "+".join(v) if isinstance(v, list) else v)
def test_valid_layouts(gpu, names):
    _assert_sound(gpu, names, check_layout(gpu, names))


@pytest.mark.parametrize(("gpu", "names"), INVALID, ids=lambda v: "+".join(v) if isinstance(v, list) else v)
def test_invalid_layouts(gpu, names):
    with pytest.raises(SimgpuError) as info:
        check_layout(gpu, names)
    assert info.value.field == "profiles"
    assert str(info.value)


def test_reasons_explain():
    with pytest.raises(SimgpuError, match="at most 1"):
        check_layout("A100-40GB", ["4g.20gb", "4g.20gb"])
    with pytest.raises(SimgpuError, match="needs 9 memory slices"):
        check_layout("A100-40GB", ["7g.40gb", "1g.5gb"])
    with pytest.raises(SimgpuError, match="needs 8 compute slices"):
        check_layout("A100-40GB", ["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb", "1g.5gb"])
    with pytest.raises(SimgpuError, match=r"\+me"):
        check_layout("A30", ["1g.6gb+me", "2g.12gb+me"])


def test_placement_around_existing_instances_explains_conflicts():
    # (With the current tables every impossible layout on an empty GPU already fails a count check; around
    # occupied slices the search itself has to say why.)
    with pytest.raises(SimgpuError, match=r"4g\.20gb only at memory slices \{0\}"):
        mig.find_placements("A100-40GB", ["4g.20gb"], occupied=[(0, 1)])
    found = mig.find_placements("A100-40GB", ["2g.10gb", "1g.5gb"], occupied=[(0, 4)])
    assert [(p.start, p.size) for p in found] == [(4, 2), (6, 1)]


def test_empty_layout_is_bad_input():
    with pytest.raises(SimgpuError):
        check_layout("A100-40GB", [])


def _placement_sets(gpu: str, media: bool = True) -> list[tuple]:
    """Oracle: every non-empty set of (profile, start) with disjoint memory-slice ranges and at most one
    +me instance. Independent of check_layout's search."""
    items = [(p, s) for p in profiles(gpu) if media or not p.media_extensions for s, _ in p.placements]
    found: list[tuple] = []

    def walk(i: int, chosen: list, cells: frozenset) -> None:
        if i == len(items):
            if chosen:
                found.append(tuple(chosen))
            return
        walk(i + 1, chosen, cells)
        prof, start = items[i]
        mine = frozenset(range(start, start + prof.memory_slices))
        if mine & cells or (prof.media_extensions and any(q.media_extensions for q, _ in chosen)):
            return
        walk(i + 1, [*chosen, (prof, start)], cells | mine)

    walk(0, [], frozenset())
    return found


@cache
def _valid_multisets(gpu: str) -> frozenset:
    """The multisets of profile names that some placement set realises (and within max counts)."""
    out = set()
    for combo in _placement_sets(gpu):
        names = Counter(p.name for p, _ in combo)
        if all(n <= get_profile(gpu, k).max_count for k, n in names.items()):
            out.add(tuple(sorted(names.elements())))
    return frozenset(out)


def test_layout_space_matches_the_reference_enumeration():
    """gpu_specs.md 3a (derived there independently): 722 placement sets without +me and 2318 with them
    on the 7/8-slice GPUs; 25 on the A30 without +me."""
    assert len(_placement_sets("A100-40GB", media=False)) == 722
    assert len(_placement_sets("A100-40GB")) == 2318
    assert len(_placement_sets("H100", media=False)) == 722
    assert len(_placement_sets("A30", media=False)) == 25


@settings(max_examples=300, deadline=None)
@given(gpu=st.sampled_from(MIG_GPUS), data=st.data())
def test_fuzz_layouts_agree_with_oracle(gpu, data):
    names = data.draw(st.lists(st.sampled_from([p.name for p in profiles(gpu)]), min_size=1, max_size=9))
    expected = tuple(sorted(names)) in _valid_multisets(gpu)
    try:
        placements = check_layout(gpu, names)
    except SimgpuError as err:
        assert err.field == "profiles"
        assert not expected, f"rejected a valid layout: {names}: {err}"
    else:
        assert expected, f"accepted an invalid layout: {names}"
        _assert_sound(gpu, names, placements)
        _assert_sound(gpu, names[::-1], check_layout(gpu, names[::-1]))  # order-independent


@given(st.text(max_size=20))
def test_fuzz_bad_profile_names(name):
    try:
        prof = get_profile("H100", name)
    except SimgpuError as err:
        assert err.field == "profile"
        assert err.allowed == [p.name for p in profiles("H100")]
    else:
        assert prof.name == mig.normalize_profile_name(name)


# ------------------------------------------------------------------------------------------ instance specs

def test_instance_spec_is_a_smaller_gpu():
    a100 = get_gpu("A100-40GB")
    one = instance_spec("A100-40GB", "MIG 1g.5gb")
    assert one.sms == 14 and not one.mig
    assert one.mem_bytes == round(4.75 * 2**30)
    assert one.mem_bw_bytes_per_s == pytest.approx(a100.mem_bw_bytes_per_s / 8)
    assert one.l2_bytes == a100.l2_bytes // 8
    assert one.peak_flops("fp16") == pytest.approx(14 * 2048 * 1410e6)
    assert one.supported_dtypes() == a100.supported_dtypes()
    assert "MIG 1g.5gb" in one.name


@pytest.mark.parametrize("gpu", MIG_GPUS)
def test_instance_specs_of_any_layout_never_exceed_the_gpu(gpu):
    spec = get_gpu(gpu)
    for names in _valid_multisets(gpu):
        parts = [instance_spec(spec, n) for n in names]
        assert sum(p.sms for p in parts) <= spec.sms
        assert sum(p.mem_bytes for p in parts) <= spec.mem_bytes
        assert sum(p.mem_bw_bytes_per_s for p in parts) <= spec.mem_bw_bytes_per_s * (1 + 1e-9)
        assert sum(p.l2_bytes for p in parts) <= spec.l2_bytes


def test_double_memory_1g_profiles_get_one_eighth_of_l2():
    """MIG guide tables: 1g.20gb (H100) and 1g.35gb (H200) have 1/4 of memory but 1/8 of L2."""
    h100 = get_gpu("H100")
    one20 = instance_spec(h100, "1g.20gb")
    assert one20.l2_bytes == h100.l2_bytes // 8
    assert one20.mem_bw_bytes_per_s == pytest.approx(h100.mem_bw_bytes_per_s / 4)
    assert one20.sms == 26
    assert instance_spec("H200", "1g.35gb").l2_bytes == get_gpu("H200").l2_bytes // 8


def test_placed_layout_problem_checks_fixed_positions_with_the_same_rules():
    from simgpu.mig import placed_layout_problem

    assert placed_layout_problem("H100", [("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 3)]) is None
    assert placed_layout_problem("H100", [("3g.40gb", 2)]) == "3g.40gb cannot start at memory slice 2 (allowed: 0, 4)"
    assert placed_layout_problem("H100", [("3g.40gb", 4), ("1g.10gb", 5)]) == "1g.10gb@5 overlaps 3g.40gb@4"
    assert "at most 1 can exist" in placed_layout_problem("H100", [("4g.40gb", 0), ("4g.40gb", 0)])
    assert "needs 8 compute slices, the GPU has 7" in placed_layout_problem("H100", [("4g.40gb", 0), ("2g.20gb", 4), ("2g.20gb", 6)])
