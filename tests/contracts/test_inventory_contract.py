"""The GPU inventory contract: the annotation the device plugin writes is byte-for-byte what it wrote before the
format moved into fgpu_contracts (json.dumps, compact, keys sorted), it parses back to the same model, and bad
input is one InputError naming the annotation."""
import json

import pytest
from sample_inventory import plugin_inventory

from deviceplugin.labels import inventory_annotation
from fgpu_contracts.errors import InputError
from fgpu_contracts.inventory import GPUNode, dump_inventory, gpunode, parse_inventory
from fgpu_contracts.keys import INVENTORY

# What deviceplugin.labels wrote for sample_inventory.plugin_inventory() before the format moved, plus each
# GPU's `pciBusId` (added later: the node config's, else the emulated default).
GOLDEN = (
    '{"gpus":[{"healthy":false,"index":0,"memBytes":42949672960,"mig":[{"healthy":false,"memBytes":21066814587,'
    '"profile":"3g.20gb","sms":42,"start":4,"uuid":"MIG-58fb3d29-1ded-5e7b-9db6-56c21a8471a9"},{"healthy":false,'
    '"memBytes":21066814587,"profile":"4g.20gb","sms":56,"start":0,"uuid":"MIG-e801f518-654b-5acb-aa77-a404d2ab9b39"'
    '}],"model":"A100-SXM4-40GB","pciBusId":"00000000:01:00.0","replicas":1,"sharing":"exclusive","shortName":"A100-40GB","sms":108,'
    '"uuid":"GPU-ed842274-a47a-5955-aa40-01fc2abf1837","xid":79},{"healthy":true,"index":1,"memBytes":24152899584,'
    '"mig":[],"model":"L4","pciBusId":"00000000:02:00.0","replicas":10,"sharing":"fractional","shortName":"L4","sms":58,'
    '"uuid":"GPU-70cb312e-d673-515f-bdba-b1a663c7a248","xid":null}],"memoryQuota":"hard","migStrategy":"mixed",'
    '"node":"n1","nodeResources":{"nvidia.com/gpucores":100,"nvidia.com/gpumem":23034},"resources":{'
    '"nvidia.com/gpu":10,"nvidia.com/mig-3g.20gb":1,"nvidia.com/mig-4g.20gb":1},"timeDilation":2.0,"version":"v1"}'
)


def test_the_annotation_is_byte_identical_to_before_the_move():
    assert inventory_annotation(plugin_inventory()) == {INVENTORY: GOLDEN}


def test_dump_is_json_dumps_compact_and_sorted_and_parses_back():
    inv = parse_inventory(GOLDEN)
    assert dump_inventory(inv) == json.dumps(json.loads(GOLDEN), separators=(",", ":"), sort_keys=True)
    assert parse_inventory(dump_inventory(inv)) == inv == plugin_inventory()


@pytest.mark.parametrize(("change", "where"), [
    (lambda d: d.pop("node"), "node"),
    (lambda d: d["gpus"][0].update(sharing="vgpu"), "gpus.0.sharing"),
    (lambda d: d["gpus"][1].update(colour="red"), "gpus.1.colour"),
    (lambda d: d.update(version="v2"), "version"),
])
def test_bad_inventory_is_one_input_error_naming_the_annotation(change, where):
    doc = json.loads(GOLDEN)
    change(doc)
    with pytest.raises(InputError) as err:
        parse_inventory(json.dumps(doc))
    assert err.value.field == INVENTORY and where in str(err.value) and "\n" not in str(err.value)


def test_not_json_is_an_input_error_too():
    with pytest.raises(InputError, match=INVENTORY):
        parse_inventory("{not json")


def test_gpunode_is_named_after_its_node_and_carries_the_inventory_as_spec():
    node = gpunode(plugin_inventory())
    doc = node.model_dump(mode="json", by_alias=True, exclude={"status"})
    summary = doc["spec"].pop("summary")
    assert doc == {"apiVersion": "fgpu.io/v1alpha1", "kind": "GPUNode", "metadata": {"name": "n1"},
                   "spec": json.loads(dump_inventory(plugin_inventory()))}
    assert summary == {"gpus": 2, "healthy": 1, "models": "A100-40GB,L4"}
    assert GPUNode.model_validate(doc) == node
    with pytest.raises(ValueError, match="named after its node"):
        GPUNode.model_validate({**doc, "metadata": {"name": "n2"}})


def test_derived_counts_are_recomputed_on_read_never_trusted():
    doc = gpunode(plugin_inventory()).model_dump(mode="json", by_alias=True)
    doc["spec"]["summary"] = {"gpus": 9, "healthy": 9, "models": "stale"}
    doc["status"] = {"allocations": [{"namespace": "ml", "pod": "p", "podUid": "u", "container": "c",
                                      "uuid": "GPU-1"}], "conditions": [], "allocatedPods": 7}
    node = GPUNode.model_validate(doc)
    assert (node.spec.summary.gpus, node.spec.summary.healthy, node.status.allocated_pods) == (2, 1, 1)
