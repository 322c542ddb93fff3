"""A realistic inventory for the contract tests, built by the device plugin's own code: a MIG GPU (unhealthy,
XID 79) and a fractional L4, with time dilation. (A helper module, not a conftest: other test folders import
their conftest by name, and a second one would shadow theirs.)"""
from deviceplugin.labels import Health, inventory
from deviceplugin.resources import discover
from fgpu_contracts.inventory import Inventory
from simgpu.nodeconfig import parse_node_config


def plugin_inventory() -> Inventory:
    cfg = parse_node_config({"version": "v1", "timeDilation": 2, "gpus": [
        {"model": "A100-40GB", "mig": {"layout": ["3g.20gb", "4g.20gb"]}},
        {"model": "L4", "sharing": "fractional"}]})
    gpus = cfg.gpu_devices("n1")
    return inventory(cfg, "n1", gpus, discover(cfg, "n1"), {gpus[0].uuid: Health(False, 79)})
