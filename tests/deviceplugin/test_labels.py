"""Node labels on mixed-model and mixed-sharing nodes: a GFD label is published only when every GPU it
describes agrees, per-model fgpu.io labels always, consistent with the inventory; stale labels are removed."""
import re
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.kube import KubeNode
from deviceplugin.labels import inventory, node_labels, stale_labels
from deviceplugin.resources import discover
from fgpu_contracts.keys import model_label_prefix
from simgpu.catalog import get_gpu
from simgpu.nodeconfig import parse_node_config

KEY = re.compile(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def labels_of(*groups, **top):
    cfg = parse_node_config({"version": "v1", "gpus": list(groups), **top})
    return node_labels(cfg, cfg.gpu_devices("n1"))


def test_one_model_gets_gfd_product_and_memory():
    labels = labels_of({"model": "H100", "count": 2})
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # GFD's: NVML's name, label-safe
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["fgpu.io/gpu-H100-SXM5-80GB.count"] == "2"
    assert labels["fgpu.io/gpu-H100-SXM5-80GB.memory"] == "81559"


def test_two_models_drop_per_model_labels_and_count_each_model():
    labels = labels_of({"model": "H100", "count": 1}, {"model": "A100-80GB", "count": 3})
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.family"):
        assert key not in labels
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["fgpu.io/gpu-H100-SXM5-80GB.count"] == "1"
    assert labels["fgpu.io/gpu-A100-SXM4-80GB.count"] == "3"
    assert labels["fgpu.io/gpu-A100-SXM4-80GB.memory"] == "81920"
    assert labels["nvidia.com/gpu.replicas"] == "1"  # sharing agrees, so it is still published


def test_models_that_agree_on_memory_and_family_keep_those_labels():
    labels = labels_of({"model": "H100"}, {"model": "H100-PCIE"})
    assert "nvidia.com/gpu.product" not in labels
    assert (labels["nvidia.com/gpu.memory"], labels["nvidia.com/gpu.family"]) == ("81559", "hopper")


def test_first_gpu_does_not_decide_for_the_node():
    a = labels_of({"model": "H100"}, {"model": "A100-80GB"})
    b = labels_of({"model": "A100-80GB"}, {"model": "H100"})
    assert a == b


def test_mixed_sharing_drops_sharing_labels():
    labels = labels_of({"model": "H100", "sharing": "timeSlicing", "replicas": 4}, {"model": "H100"})
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy",
                "fgpu.io/sharing-mode"):
        assert key not in labels, key
    assert labels["nvidia.com/mps.capable"] == "false"
    assert labels["fgpu.io/gpu-H100-SXM5-80GB.count"] == "2"


def test_mig_gpus_do_not_decide_sharing():
    labels = labels_of({"model": "H100", "mig": {"layout": ["7g.80gb"]}},
                       {"model": "H100", "sharing": "mps", "replicas": 2})
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/gpu.replicas"] == "2"


def test_mig_profile_shared_by_two_models_sums_counts_and_drops_disagreeing_attributes():
    labels = labels_of({"model": "H100", "mig": {"layout": ["1g.10gb", "1g.10gb"]}},
                       {"model": "A100-80GB", "mig": {"layout": ["1g.10gb"]}})
    assert labels["nvidia.com/mig-1g.10gb.count"] == "3"
    assert "nvidia.com/mig-1g.10gb.multiprocessors" not in labels  # 16 on H100, 14 on A100
    assert "nvidia.com/mig-1g.10gb.memory" not in labels


def test_single_strategy_on_two_models():
    labels = labels_of({"model": "H100", "mig": {"layout": "all-1g.10gb"}},
                       {"model": "H100-PCIE", "mig": {"layout": "all-1g.10gb"}}, migStrategy="single")
    assert labels["nvidia.com/gpu.count"] == "14"
    assert "nvidia.com/gpu.product" not in labels
    assert labels["nvidia.com/gpu.memory"] == "9984"  # same slice size on both
    assert "nvidia.com/gpu.multiprocessors" not in labels  # 16 vs 14


MODELS = ["H100", "H100-PCIE", "A100-80GB", "L4"]
group = st.fixed_dictionaries({"model": st.sampled_from(MODELS), "count": st.integers(1, 3)}, optional={
    "sharing": st.sampled_from(["exclusive", "fractional"])})


@settings(max_examples=60, deadline=None)
@given(st.lists(group, min_size=1, max_size=4))
def test_labels_agree_with_the_inventory(groups):
    groups = [dict(g, sharing="fractional") for g in groups] if any(
        g.get("sharing") == "fractional" for g in groups) else groups  # no fractional/whole name clash
    cfg = parse_node_config({"version": "v1", "gpus": groups})
    gpus = cfg.gpu_devices("n1")
    labels = node_labels(cfg, gpus)
    inv = inventory(cfg, "n1", gpus, discover(cfg, "n1"), {})
    models = Counter(g.model for g in inv.gpus)
    per_model = {k: int(v) for k, v in labels.items() if k.startswith("fgpu.io/gpu-") and k.endswith(".count")}
    assert per_model == {f"{model_label_prefix(m)}.count": n for m, n in models.items()}
    assert int(labels["nvidia.com/gpu.count"]) == len(inv.gpus)
    if len(models) == 1:
        nvml = get_gpu(next(iter(models))).nvml_name.replace(" ", "-")
        assert labels["nvidia.com/gpu.product"].startswith(nvml)
    else:
        assert "nvidia.com/gpu.product" not in labels
    for key, value in labels.items():
        assert KEY.fullmatch(key) and len(key.split("/")[-1]) <= 63, key
        assert VALUE.fullmatch(value), (key, value)


def test_stale_labels_are_only_ours():
    current = {"nvidia.com/gpu.product": "H100-SXM5-80GB", "nvidia.com/gpu.memory": "81559",
               "nvidia.com/mig-1g.10gb.count": "7", "fgpu.io/gpu-L4.count": "1", "fgpu.io/emulated": "true",
               "kubernetes.io/hostname": "n1", "nvidia.com/cuda.driver.major": "550", "fgpu.io/pool": "a"}
    desired = {"fgpu.io/emulated": "true", "nvidia.com/gpu.count": "2"}
    assert stale_labels(current, desired) == ["fgpu.io/gpu-L4.count", "nvidia.com/gpu.memory",
                                              "nvidia.com/gpu.product", "nvidia.com/mig-1g.10gb.count"]


class _FakeCore:
    def __init__(self, labels):
        self.labels, self.patches = labels, []

    def read_node(self, name):
        from types import SimpleNamespace

        return SimpleNamespace(metadata=SimpleNamespace(labels=self.labels))

    def patch_node(self, name, body):
        self.patches.append(body)


def test_publish_removes_labels_that_no_longer_hold():
    node = KubeNode.__new__(KubeNode)
    node.node, node.core = "n1", _FakeCore({"nvidia.com/gpu.product": "H100-SXM5-80GB", "team": "a"})
    desired = labels_of({"model": "H100"}, {"model": "L4"})
    node.publish(desired, {"fgpu.io/gpu-inventory": "{}"})
    [body] = node.core.patches
    assert body["metadata"]["labels"]["nvidia.com/gpu.product"] is None
    assert "team" not in body["metadata"]["labels"]
    assert body["metadata"]["labels"]["fgpu.io/gpu-L4.count"] == "1"


def test_a_kai_pods_gfd_node_selector_matches_the_emulated_node():
    """KAI asks for a model with a nodeSelector on GFD's gpu.product (NVML's name): copied from a real cluster,
    it must select the emulated node with that GPU and no other (kube-scheduler's rule, in the placement core)."""
    from fgpu_operator.placement.filters import node_matches
    from fgpu_operator.placement.model import NodeSpec

    def node(model):
        cfg = parse_node_config({"version": "v1", "gpus": [{"model": model, "count": 2}]})
        return NodeSpec(model, 1000, 1024, 2, labels=tuple(node_labels(cfg, cfg.gpu_devices("n1")).items()))

    kai = (("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),)
    assert [m for m in ("A100-80GB", "A100-40GB", "H100", "T4") if node_matches(node(m), kai, ())] == ["A100-80GB"]
    assert dict(node("T4").labels)["nvidia.com/gpu.product"] == "Tesla-T4"
