"""Real GPU identities in the node config: each GPU group may give its GPUs' UUIDs and PCI bus ids (as
`nvidia-smi -L` / lspci print them), validated (form, one per GPU, unique on the node); they reach the
resolved devices, the plugin's inventory, the emulated node and the DCGM-style metrics' labels. Derived
UUIDs (and index-based bus ids) stay the default."""
import pytest

from deviceplugin.labels import Health, inventory
from deviceplugin.resources import discover
from fgpu_contracts.metrics.daemon import GPU_LABELS
from simgpu.device.node import build_node
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import gpu_uuid, parse_node_config

U0 = "GPU-8d2f6b1e-3c4a-4b7e-9f10-1a2b3c4d5e6f"
U1 = "GPU-77a1c0de-0000-4e11-8a22-abcdefabcdef"
U2 = "GPU-0badc0de-1111-4222-8333-444455556666"


def config(*groups: dict) -> dict:
    return {"version": "v1", "gpus": list(groups)}


def test_configured_identities_flow_to_devices_inventory_and_the_emulated_node():
    cfg = parse_node_config(config(
        {"model": "H100", "count": 2, "sharing": "fractional", "uuids": [U0, U1],
         "pciBusIds": ["0000:3b:00.0", "00000000:86:00.0"]},
        {"model": "L4", "sharing": "fractional"}))
    gpus = cfg.gpu_devices("n1")
    assert [(g.uuid, g.pci_bus_id) for g in gpus] == [
        (U0, "0000:3b:00.0"), (U1, "00000000:86:00.0"), (gpu_uuid("n1", 2), "00000000:03:00.0")]
    inv = inventory(cfg, "n1", gpus, discover(cfg, "n1"), {U1: Health(False, 79)})
    assert [(g.uuid, g.pci_bus_id, g.healthy) for g in inv.gpus] == [
        (U0, "0000:3b:00.0", True), (U1, "00000000:86:00.0", False), (gpu_uuid("n1", 2), "00000000:03:00.0", True)]
    node = build_node(cfg, "n1")
    assert [(g.uuid, g.pci_bus_id) for g in node.gpus] == [(g.uuid, g.pci_bus_id) for g in gpus]
    assert "pci_bus_id" in GPU_LABELS  # dcgm-exporter's label, on every DCGM and fgpu GPU series


def test_a_devices_list_may_name_a_configured_uuid_before_the_node_name_is_known():
    cfg = parse_node_config({**config({"model": "L4", "count": 2, "uuids": [U0, U1]}),
                             "sharing": {"timeSlicing": {"resources": [
                                 {"name": "nvidia.com/gpu", "replicas": 4, "devices": [U1]}]}}})
    assert [(g.uuid, g.sharing, g.replicas) for g in cfg.gpu_devices("any")] == [
        (U0, "exclusive", 1), (U1, "timeSlicing", 4)]


@pytest.mark.parametrize("groups, field, words", [
    (({"model": "L4", "uuids": ["GPU-1234"]},), "gpus[0].uuids", "'GPU-1234' is not a GPU UUID"),
    (({"model": "L4", "uuids": [U0.upper().replace("GPU-", "GPU-")]},), "gpus[0].uuids", "is not a GPU UUID"),
    (({"model": "L4", "count": 2, "uuids": [U0]},), "uuids", "1 uuids for 2 GPUs"),
    (({"model": "L4", "pciBusIds": ["3b:00.0"]},), "gpus[0].pciBusIds", "'3b:00.0' is not a PCI bus id"),
    (({"model": "L4", "pciBusIds": ["0000:3b:20.0"]},), "gpus[0].pciBusIds", "is not a PCI bus id"),  # device <= 1f
    (({"model": "L4", "count": 2, "uuids": [U0, U0]},), "gpus[0].uuids", "has the UUID"),
    (({"model": "L4", "uuids": [U0]}, {"model": "T4", "uuids": [U0]}), "gpus[1].uuids", "has the UUID"),
    (({"model": "L4", "pciBusIds": ["0000:3b:00.0"]}, {"model": "T4", "pciBusIds": ["00000000:3B:00.0"]}),
     "gpus[1].pciBusIds", "has the PCI bus id"),  # one device, spelt two ways
])
def test_bad_identities_are_one_error_naming_the_field(groups, field, words):
    with pytest.raises(SimgpuError) as err:
        parse_node_config(config(*groups))
    text = str(err.value)
    assert field in text and words in text and "\n" not in text.strip()
