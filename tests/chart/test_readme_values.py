"""The README's "Deploy with Helm" section is what the chart takes: every values block in it passes `helm lint
--strict` and the chart's schema, renders, and gives each node pool it names a DaemonSet with that pool's node
config, which simgpu loads; every `helm install` line in it names the chart that is in the repository."""
from __future__ import annotations

import re

import pytest
import yaml
from helmchart import CHART, ROOT, helm, one, render

pytestmark = pytest.mark.e2e  # needs helm from the testbin (`make testbin`)

README = ROOT / "README.md"


def section() -> str:
    found = re.search(r"^## Deploy with Helm\n(.*?)(?=^## )", README.read_text(), re.S | re.M)
    assert found, "README: no section '## Deploy with Helm'"
    return found[1]


def values_blocks() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", section(), re.S)
    assert blocks, "README's 'Deploy with Helm' shows no values (a ```yaml block)"
    return blocks


def test_the_section_installs_the_repositorys_chart():
    installs = re.findall(r"^helm install \S+ (\S+)", section(), re.M)
    assert installs and all((ROOT / chart).resolve() == CHART for chart in installs)


@pytest.mark.parametrize("block", range(len(values_blocks())))
def test_each_values_block_lints_renders_and_gives_its_pools_their_node_config(block, tmp_path):
    from simgpu.nodeconfig import load_node_config

    text = values_blocks()[block]
    path = tmp_path / "values.yaml"
    path.write_text(text)
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), "-f", str(path)).stdout
    objects = render("-f", str(path))
    for pool in yaml.safe_load(text).get("nodePools") or []:
        cm = one(objects, "ConfigMap", f"fgpu-node-{pool['name']}")
        one(objects, "DaemonSet", f"fgpu-node-{pool['name']}")
        config = tmp_path / f"{pool['name']}.yaml"
        config.write_text(cm["data"]["config.yaml"])
        load_node_config(str(config))  # raises naming the field on anything the schema let through
