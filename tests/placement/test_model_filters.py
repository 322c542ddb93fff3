"""GPU-model filters in the placement core: each spelling keeps its project's rule (HAMi's case-insensitive
substring of `NVIDIA-` + the NVML name, use-gputype winning; KubeShare's equality; fgpu's whole-word prefix
of a catalog name), and a model no node has leaves the pod Pending with a reason naming it."""
import pytest
from fgpu_operator.placement.framework import Unschedulable
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.model import Constraints, GpuInfo, NodeSpec, Request
from fgpu_operator.placement.models import ModelFilter

MODELS = ("A100-SXM4-40GB", "A100-SXM4-80GB", "A10", "T4", "H100-PCIe-80GB", "V100-SXM2-16GB")


def cluster():
    lc = LiveCluster(policy="binpack")
    for model in MODELS:
        gpus = (GpuInfo(f"GPU-{model}", model),)
        lc.upsert_node(NodeSpec(model.lower(), 32000, 128 * 1024, 1, model, gpus=gpus, max_pods=110))
    return lc


def feasible(*filters: ModelFilter) -> set[str]:
    """The models a share with these filters can be placed on (each node tried alone, on an empty cluster)."""
    out = set()
    for model in MODELS:
        lc = cluster()
        for other in MODELS:
            if other != model:
                lc.remove_node(other.lower())
        got = lc.schedule("p", Request("p", 100, num_gpu=1, gpu_milli=300,
                                       constraints=Constraints(model_filters=filters)))
        if not isinstance(got, Unschedulable):
            out.add(model)
    return out


@pytest.mark.parametrize("filt, expected", [
    # HAMi: substring of NVIDIA-<NVML name>, case-insensitive
    (ModelFilter("hami", allow=("A100",)), {"A100-SXM4-40GB", "A100-SXM4-80GB"}),
    (ModelFilter("hami", allow=("A10",)), {"A10", "A100-SXM4-40GB", "A100-SXM4-80GB"}),  # HAMi's own test
    (ModelFilter("hami", allow=("a100-sxm4-80",)), {"A100-SXM4-80GB"}),
    (ModelFilter("hami", allow=("Tesla",)), {"T4", "V100-SXM2-16GB"}),  # NVML says "Tesla T4"
    (ModelFilter("hami", allow=("NVIDIA",)), set(MODELS)),  # every HAMi type name starts NVIDIA-
    (ModelFilter("hami", allow=("T4", "V100")), {"T4", "V100-SXM2-16GB"}),
    (ModelFilter("hami", allow=("T4",), deny=("T4",)), {"T4"}),  # use-gputype set: nouse-gputype not read
    (ModelFilter("hami", deny=("A10",)), {"T4", "H100-PCIe-80GB", "V100-SXM2-16GB"}),
    (ModelFilter("hami", deny=("B200",)), set(MODELS)),  # a model fgpu does not know excludes nothing
    # fgpu: a name of the GPU, or its leading hyphen-separated words
    (ModelFilter("fgpu", allow=("A100",)), {"A100-SXM4-40GB", "A100-SXM4-80GB"}),
    (ModelFilter("fgpu", allow=("A10",)), {"A10"}),
    (ModelFilter("fgpu", allow=("a100-80gb",)), {"A100-SXM4-80GB"}),
    (ModelFilter("fgpu", allow=("NVIDIA H100 PCIe",)), {"H100-PCIe-80GB"}),  # the NVML name
    (ModelFilter("fgpu", allow=("A100",), deny=("A100-40GB",)), {"A100-SXM4-80GB"}),  # both lists apply
    (ModelFilter("fgpu", deny=("T4", "V100")), {"A100-SXM4-40GB", "A100-SXM4-80GB", "A10", "H100-PCIe-80GB"}),
    (ModelFilter("fgpu", deny=("RTX-9090",)), set(MODELS)),
    # KubeShare: the model string equals one of the GPU's names
    (ModelFilter("kubeshare", allow=("NVIDIA-A100-SXM4-80GB",)), {"A100-SXM4-80GB"}),
    (ModelFilter("kubeshare", allow=("Tesla-T4",)), {"T4"}),
    (ModelFilter("kubeshare", allow=("A100",)), set()),  # no GPU is called just A100
])
def test_each_rule_selects_the_models_its_project_would(filt, expected):
    assert feasible(filt) == expected


def test_filters_of_several_spellings_all_hold():
    both = (ModelFilter("hami", allow=("A10",)), ModelFilter("fgpu", deny=("A100-40GB",)))
    assert feasible(*both) == {"A10", "A100-SXM4-80GB"}


def test_an_allow_list_no_node_has_leaves_the_pod_pending_naming_the_model():
    lc = cluster()
    request = Request("p", 100, num_gpu=1, gpu_milli=300,
                      constraints=Constraints(model_filters=(ModelFilter("fgpu", allow=("B200",)),)))
    got = lc.schedule("p", request)
    assert isinstance(got, Unschedulable)
    assert str(got) == "0/6 nodes are available: 6 GPU model not in [B200]."
    deny = ModelFilter("hami", allow=("A100",))
    got = lc.schedule("q", Request("q", 100, num_gpu=1, gpu_milli=300, constraints=Constraints(model_filters=(
        deny, ModelFilter("fgpu", deny=("A100",))))))
    assert str(got) == "0/6 nodes are available: 6 GPU model not in [A100]; in excluded [A100]."


def test_a_node_joining_with_the_model_takes_the_waiting_pod():
    lc = cluster()
    request = Request("p", 100, num_gpu=1, gpu_milli=300,
                      constraints=Constraints(model_filters=(ModelFilter("hami", allow=("H200",)),)))
    assert isinstance(lc.schedule("p", request), Unschedulable)
    lc.upsert_node(NodeSpec("h200", 32000, 128 * 1024, 1, "H200-SXM-141GB",
                            gpus=(GpuInfo("GPU-h200", "H200-SXM-141GB"),), max_pods=110))
    assert lc.schedule("p", request).node == "h200"
