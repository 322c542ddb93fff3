"""`python -m devcluster.install`'s check dry-runs install.VALID through the webhook and needs it admitted and
visibly changed, in every mode the chart can start the webhook in. With DRA on a cluster of GPUs that differ in
memory, a bare fraction is refused (a claim's memory is an amount): on the real node every DRA install check
failed so."""
from __future__ import annotations

import copy

import jsonpatch
import pytest
from admission_util import CONFIG, GIB
from fgpu_operator.admission import parse_pod
from fgpu_operator.admission.dra import admit

from devcluster import install
from fgpu_contracts import dra as names
from fgpu_contracts import keys

FGPU = CONFIG.model_copy(update={"dra_allocator": names.ALLOCATOR_FGPU, "dra_gpu_memory_bytes": 80 * GIB})
KUBE = FGPU.model_copy(update={"dra_allocator": names.ALLOCATOR_KUBE})
MIXED = KUBE.model_copy(update={"dra_gpu_memory_bytes": None})  # the GPUs differ in memory


@pytest.mark.parametrize("config", [CONFIG, FGPU, KUBE, MIXED],
                         ids=["dra-off", "fgpu-scheduler", "kube-scheduler", "kube-scheduler-mixed-memory"])
def test_the_install_checks_probe_is_admitted_and_changed_in_every_mode(config):
    p = copy.deepcopy(install.VALID)
    p["metadata"]["namespace"] = "ml"
    ops, template = admit(p, parse_pod(p, config), "ml", config)
    mutated = jsonpatch.apply_patch(p, ops)
    assert mutated["spec"].get("schedulerName") == keys.SCHEDULER_NAME or mutated["spec"].get("resourceClaims")
    assert (template is None) == (config.dra_allocator is None)
