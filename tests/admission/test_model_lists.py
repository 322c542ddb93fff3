"""GPU-model names in the webhook: every spelling's list is kept as written for the placement core to match by
that spelling's rule; names fgpu does not know are admitted (a deny-list of them excludes nothing, an
allow-list of them waits for a node); only a malformed list is refused."""
import pytest
from admission_util import CONFIG, pod
from fgpu_operator.admission import parse_pod

from fgpu_contracts.errors import InputError
from fgpu_contracts.request import ModelFilter, dump_request, load_request

SHARE = "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpucores: 30}}}]}"


def filters(annotations: dict, labels: dict | None = None) -> tuple[ModelFilter, ...]:
    body = pod(SHARE)
    body["metadata"] = {"annotations": annotations, "labels": labels or {}}
    request = parse_pod(body, CONFIG)
    assert load_request(dump_request(request)) == request  # survives the hand-off to the scheduler
    return request.model_filters


@pytest.mark.parametrize("annotations, labels, expected", [
    ({"nvidia.com/use-gputype": "A100, V100"}, {}, (ModelFilter(rule="hami", allow=("A100", "V100")),)),
    ({"nvidia.com/nouse-gputype": "B200,RTX-9090"}, {}, (ModelFilter(rule="hami", deny=("B200", "RTX-9090")),)),
    # HAMi reads nouse-gputype only without use-gputype
    ({"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "A100-40GB"}, {},
     (ModelFilter(rule="hami", allow=("A100",)),)),
    ({"fgpu.io/gpu-model": "B200"}, {}, (ModelFilter(rule="fgpu", allow=("B200",)),)),
    ({"fgpu.io/gpu-model": "A100", "fgpu.io/gpu-model-exclude": "A100-40GB,T4"}, {},
     (ModelFilter(rule="fgpu", allow=("A100",), deny=("A100-40GB", "T4")),)),
    ({"fgpu.io/gpu-model-exclude": "NVIDIA H100 80GB HBM3"}, {}, (ModelFilter(rule="fgpu", deny=("NVIDIA H100 80GB HBM3",)),)),
    ({}, {"sharedgpu/gpu_model": "NVIDIA-GeForce-GTX-1080"},
     (ModelFilter(rule="kubeshare", allow=("NVIDIA-GeForce-GTX-1080",)),)),
    # two spellings: both filters, each by its rule
    ({"nvidia.com/use-gputype": "A10", "fgpu.io/gpu-model-exclude": "A100"}, {},
     (ModelFilter(rule="fgpu", deny=("A100",)), ModelFilter(rule="hami", allow=("A10",)))),
])
def test_model_lists_are_admitted_as_written(annotations, labels, expected):
    assert filters(annotations, labels) == expected


@pytest.mark.parametrize("annotations, labels, field", [
    ({"fgpu.io/gpu-model": " , "}, {}, "metadata.annotations[fgpu.io/gpu-model]"),
    ({"fgpu.io/gpu-model-exclude": "A100;T4"}, {}, "metadata.annotations[fgpu.io/gpu-model-exclude]"),
    ({"nvidia.com/use-gputype": "A" * 65}, {}, "metadata.annotations[nvidia.com/use-gputype]"),
    ({"nvidia.com/nouse-gputype": "T4\n"}, {}, None),  # trailing whitespace is trimmed: admitted
])
def test_only_a_malformed_list_is_refused(annotations, labels, field):
    if field is None:
        assert filters(annotations, labels) == (ModelFilter(rule="hami", deny=("T4",)),)
        return
    with pytest.raises(InputError) as err:
        filters(annotations, labels)
    assert str(err.value).startswith(field + ": ") and "\n" not in str(err.value)


def test_kubeshare_names_one_model():
    with pytest.raises(InputError, match=r"KubeShare's gpu_model names one"):
        filters({"sharedgpu/gpu_model": "A100,T4"})


def test_one_rules_filter_in_two_places_must_agree():
    from fgpu_contracts.request import ContainerRequest, GpuRequest

    written = GpuRequest(source="hami", containers=(ContainerRequest(container="main", milli_gpu=300),),
                         model_filters=(ModelFilter(rule="hami", allow=("A100",)),))
    same = {"fgpu.io/request": dump_request(written), "nvidia.com/use-gputype": "A100"}
    assert filters(same) == written.model_filters  # the webhook reading its own request again
    with pytest.raises(InputError) as err:
        filters({**same, "nvidia.com/use-gputype": "H100"})
    assert str(err.value) == ("metadata.annotations[fgpu.io/request]: 'A100' disagrees with "
                              "metadata.annotations[nvidia.com/use-gputype]='H100' on the GPU models (hami's rule); "
                              "give one of them, or equal values")
