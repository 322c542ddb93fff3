"""Every node config a values file of deploy/values/ ships is one the node daemon and device plugin accept: the
chart passes `nodePools[].config` through unchecked, so a config only their parser refuses would crash-loop
the node's pod after `helm install` (the demo's dynamic-MIG GPU once did)."""
from pathlib import Path

import pytest
import yaml

from simgpu.errors import SimgpuError
from simgpu.nodeconfig import parse_node_config

VALUES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "values").glob("*.yaml"))
POOLS = [(path, pool) for path in VALUES for pool in (yaml.safe_load(path.read_text()) or {}).get("nodePools") or ()
         if "config" in pool]


def test_the_values_files_ship_node_configs():
    assert {path.name for path, _ in POOLS} >= {"devcluster.yaml", "quickstart.yaml"}


@pytest.mark.parametrize(("path", "pool"), POOLS, ids=[f"{p.name}:{pool['name']}" for p, pool in POOLS])
def test_each_pools_node_config_parses(path, pool):
    try:
        parse_node_config(pool["config"])
    except SimgpuError as err:
        pytest.fail(f"{path.name}: nodePools[{pool['name']}].config: {err}", pytrace=False)


def test_a_config_the_daemon_refuses_fails_here():
    bad = {"version": "v1", "migStrategy": "mixed",
           "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}},
           "gpus": [{"model": "A100-80GB", "mig": {"layout": "all-1g.10gb", "dynamic": True}}]}
    with pytest.raises(SimgpuError, match="dynamic-MIG"):
        parse_node_config(bad)
