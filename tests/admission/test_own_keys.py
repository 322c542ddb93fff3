"""Typos are not silent: an `fgpu.io/` key fgpu does not know, on any pod, is refused with the key and the
closest known one; the known set is fgpu_contracts.keys (one home). Other subdomains are not fgpu's."""
import pytest
from admission_util import CONFIG, envelope, pod
from fgpu_operator.admission import AdmissionConfig, ResourceNames, parse_pod, review

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError


def body(annotations=None, labels=None, limits=None, scheduler="default-scheduler") -> dict:
    return {"metadata": {"annotations": annotations or {}, "labels": labels or {}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main",
                                                                  "resources": {"limits": limits or {}}}]}}


@pytest.mark.parametrize("pod_, message", [
    (body({"fgpu.io/gpu-memroy": "8Gi"}),
     "metadata.annotations[fgpu.io/gpu-memroy]: unknown annotation fgpu.io/gpu-memroy; did you mean fgpu.io/gpu-memory?"),
    (body({"fgpu.io/gpu_fraction": "0.5"}),
     "metadata.annotations[fgpu.io/gpu_fraction]: unknown annotation fgpu.io/gpu_fraction; did you mean fgpu.io/gpu-fraction?"),
    (body({"fgpu.io/gpu-model-excluded": "T4", keys.FGPU_FRACTION: "0.5"}),
     "metadata.annotations[fgpu.io/gpu-model-excluded]: unknown annotation fgpu.io/gpu-model-excluded; did you mean fgpu.io/gpu-model-exclude?"),
    (body(labels={"fgpu.io/gpu-fraction": "0.5"}),
     "metadata.labels[fgpu.io/gpu-fraction]: fgpu.io/gpu-fraction is an annotation, not a label (allowed: metadata.annotations[fgpu.io/gpu-fraction])"),
    (body(limits={"fgpu.io/gpu-memroy": "1"}),
     "spec.containers[main].resources[fgpu.io/gpu-memroy]: unknown resource fgpu.io/gpu-memroy; did you mean the annotation fgpu.io/gpu-memory?"),
    # on a pod fgpu would otherwise leave alone too: the key is still fgpu's, and still a typo
    (body({"fgpu.io/prority": "low"}, scheduler="volcano"),
     "metadata.annotations[fgpu.io/prority]: unknown annotation fgpu.io/prority; did you mean fgpu.io/priority?"),
])
def test_an_unknown_key_is_refused_with_the_closest_known_one(pod_, message):
    with pytest.raises(InputError) as err:
        parse_pod(pod_, CONFIG)
    assert str(err.value) == message


def test_without_a_close_key_the_message_lists_the_known_ones():
    with pytest.raises(InputError) as err:
        parse_pod(body({"fgpu.io/zzzz": "1"}), CONFIG)
    assert str(err.value).startswith("metadata.annotations[fgpu.io/zzzz]: unknown annotation fgpu.io/zzzz (allowed: ")
    assert all(k in str(err.value) for k in keys.POD_ANNOTATIONS)


def test_known_keys_configured_resources_and_other_subdomains_pass():
    assert parse_pod(body({"examples.fgpu.io/expect": "admitted", "fgpu.io/gpu-fraction": "0.5",
                           "fgpu.io/gpu-model-exclude": "T4"}), CONFIG) is not None
    renamed = AdmissionConfig(resources=ResourceNames(memory="fgpu.io/gpumem"))
    assert parse_pod(body(limits={"nvidia.com/gpu": "1", "fgpu.io/gpumem": "1000"}), renamed) is not None


def test_the_review_denies_it_400_with_the_line():
    answer = review(envelope(pod("metadata: {annotations: {fgpu.io/gpu-memroy: 8Gi}}\n"
                                 "spec: {containers: [{name: main}]}")), CONFIG)["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400
    assert "did you mean fgpu.io/gpu-memory?" in answer["status"]["message"]
