"""The README's list of request spellings (the yaml block of its "Request a GPU share" section) is what the webhook admits: every
line, added to a plain pod as the apiserver hands it over (scheduler defaulted), is normalised to a canonical
request for fgpu-scheduler, and the block spells every request key issue 11 names."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from fgpu_operator.controller.translate import gpu_request
from test_chart_examples import FORMS, admit, cluster  # noqa: F401  (the quick start's nodes, as a fixture)

from fgpu_contracts import keys

README = Path(__file__).resolve().parents[2] / "README.md"
#: Every request key the issue lists, by its family (resources included); the block must show each.
ISSUE_KEYS = (keys.FGPU_FRACTION, keys.FGPU_MEMORY, keys.FGPU_SM, keys.FGPU_MODEL, keys.FGPU_PRIORITY,
              keys.FGPU_MIG_PROFILE, keys.FGPU_POLICY, keys.FGPU_AFFINITY, keys.FGPU_ANTI_AFFINITY, keys.FGPU_EXCLUSION,
              "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
              "nvidia.com/priority", keys.HAMI_USE_UUID, keys.HAMI_NOUSE_UUID, keys.HAMI_USE_TYPE, keys.HAMI_NOUSE_TYPE,
              keys.HAMI_NODE_POLICY, keys.HAMI_GPU_POLICY, keys.KUBESHARE_REQUEST, keys.KUBESHARE_LIMIT,
              keys.KUBESHARE_MEMORY, keys.KUBESHARE_PRIORITY, keys.KUBESHARE_AFFINITY, keys.KUBESHARE_ANTI_AFFINITY,
              keys.KUBESHARE_EXCLUSION, keys.KAI_FRACTION, keys.KAI_MEMORY, keys.KAI_CONTAINER, keys.ALIYUN_MEMORY,
              "nvidia.com/mig-")


def readme_lines() -> list[str]:
    text = README.read_text()
    block = re.search(r"^## Request a GPU share\n(?:(?!^## ).)*?```yaml\n(.*?)```", text, re.S | re.M)
    assert block, "README: no yaml block in its section '## Request a GPU share'"
    return [line.split("  #")[0].strip() for line in block[1].splitlines() if line.strip()]


def pod_with(line: str) -> dict:
    part = yaml.safe_load(line)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "main", "image": "x"}]}}
    for field, values in (part.get("metadata") or {}).items():
        pod["metadata"][field] = dict(values)
    if "resources" in part:
        pod["spec"]["containers"][0]["resources"] = copy.deepcopy(part["resources"])
    return pod


@pytest.mark.parametrize("line", readme_lines())
def test_every_readme_spelling_is_admitted_for_fgpu(line, cluster):  # noqa: F811
    admitted = admit(pod_with(line), cluster)
    assert admitted["spec"]["schedulerName"] == keys.SCHEDULER_NAME
    request = gpu_request(admitted)
    assert request is not None and keys.REQUEST in admitted["metadata"]["annotations"]


def test_the_block_spells_every_family_and_every_key_the_issue_names(cluster):  # noqa: F811
    lines = readme_lines()
    text = "\n".join(lines)
    assert [k for k in ISSUE_KEYS if k not in text] == []
    assert {gpu_request(admit(pod_with(line), cluster)).source for line in lines} >= FORMS
