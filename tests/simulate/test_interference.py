"""Interference model: slowdown of GPU-sharing pods, priced by simgpu's time-slicing model."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("simgpu.perf")

from fgpu_operator.placement.interference import (  # noqa: E402
    InterferenceModel,
    SharingWorkload,
    active_count_distribution,
)

MODEL = InterferenceModel()  # module-wide: its simgpu answers are cached
duty = st.floats(0.01, 1.0)


@pytest.mark.parametrize("gpu", ["T4", "G2", "V100M32"])
def test_a_pod_alone_is_not_slowed(gpu):
    assert MODEL.factor(gpu, []) == 1.0


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["T4", "G2", "P100"]), st.lists(duty, min_size=1, max_size=4))
def test_co_runners_never_speed_a_pod_up(gpu, others):
    assert MODEL.factor(gpu, others) >= 1.0


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["T4", "G2"]), st.lists(duty, min_size=0, max_size=3), duty, duty)
def test_slowdown_grows_with_a_co_runners_duty_cycle(gpu, rest, a, b):
    low, high = sorted((a, b))
    assert MODEL.factor(gpu, [*rest, low]) <= MODEL.factor(gpu, [*rest, high]) + 1e-12


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["T4", "G2"]), st.lists(duty, min_size=0, max_size=3), duty)
def test_one_more_co_runner_never_helps(gpu, rest, extra):
    assert MODEL.factor(gpu, rest) <= MODEL.factor(gpu, [*rest, extra]) + 1e-12


def test_a_busier_co_runner_costs_clearly_more():
    assert MODEL.factor("T4", [0.1]) < MODEL.factor("T4", [0.5]) < MODEL.factor("T4", [1.0])
    assert MODEL.factor("T4", [1.0]) > 1.5  # two always-busy clients time-slice one GPU


def test_unmodelled_gpu_is_reported_and_priced_as_one():
    assert MODEL.modelled("G2") and not MODEL.modelled("NoSuchGPU")
    assert MODEL.factor("NoSuchGPU", [1.0]) == 1.0


def test_active_count_distribution_by_hand():
    assert active_count_distribution([]) == [1.0]
    assert active_count_distribution([0.5, 0.5]) == pytest.approx([0.25, 0.5, 0.25])
    assert active_count_distribution([1.0, 0.2]) == pytest.approx([0.0, 0.8, 0.2])


@given(st.lists(st.floats(0, 1), max_size=8))
def test_active_count_distribution_is_a_distribution_with_the_right_mean(duties):
    dist = active_count_distribution(duties)
    assert sum(dist) == pytest.approx(1.0) and min(dist) >= -1e-12
    assert sum(k * p for k, p in enumerate(dist)) == pytest.approx(sum(duties), abs=1e-9)


@pytest.mark.parametrize("kwargs, field", [({"duty": 0.0}, "duty"), ({"duty": 1.5}, "duty"),
                                           ({"gemm": (0, 1, 1)}, "gemm"), ({"gemm": (1, 1)}, "gemm")])
def test_bad_workload_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}: .*allowed"):
        SharingWorkload(**kwargs)
