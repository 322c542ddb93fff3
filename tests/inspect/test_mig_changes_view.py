"""`fgpu inspect` shows a dynamic-MIG GPU as such, and its change in progress: the GPU row points at the
desired layout with the phase, and a table lists each GPU's current (or last) change with its pods."""
from fgpu_operator.inspect.model import load_report, report_document
from fgpu_operator.inspect.render import render
from fgpu_operator.inspect.view import cluster_report

from fgpu_contracts.inventory import GpuInfo, Inventory, MigDevice, gpunode
from simgpu import mig
from simgpu.catalog import get_gpu


def gpunode_doc(phase: str) -> dict:
    spec = get_gpu("A100-SXM4-80GB")
    one = mig.get_profile(spec, "1g.10gb")
    inst = tuple(MigDevice(uuid=f"MIG-{s}", profile="1g.10gb", start=s, mem_bytes=one.mem_bytes, sms=one.sms)
                 for s in range(4))
    gpu = GpuInfo(index=0, uuid="GPU-a", model=spec.name, short_name=spec.short_name, mem_bytes=spec.mem_bytes,
                  sms=spec.sms, sharing="exclusive", replicas=1, mig=inst, mig_dynamic=True)
    inv = Inventory(node="n", mig_strategy="mixed", memory_quota="hard", time_dilation=1.0,
                    resources={"nvidia.com/mig-1g.10gb": 4}, node_resources={}, gpus=(gpu,))
    doc = gpunode(inv).model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["status"] = {"migChanges": [{
        "gpu": "GPU-a", "id": "c1", "phase": phase, "startedTime": "2026-12-02T04:00:00Z", "pods": ["ns/big"],
        "layout": [{"profile": "1g.10gb", "start": s} for s in range(4)] + [{"profile": "3g.40gb", "start": 4}]}]}
    return doc


def test_a_change_in_progress_shows_on_its_gpu_row_and_in_the_changes_table():
    node = {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    report = cluster_report([node], [], [gpunode_doc("Applying")])
    (gpu,) = report.nodes[0].gpus
    assert gpu.mig_dynamic and gpu.mig_change.phase == "Applying" and gpu.mig_change.pods == ("ns/big",)
    text = render(report)
    assert "4x1g.10gb (dynamic) -> 1g.10gb@0+1g.10gb@1+1g.10gb@2+1g.10gb@3+3g.40gb@4 [Applying c1]" in text, text
    change_row = next(line for line in text.splitlines() if line.startswith("n ") and " c1 " in line)
    assert "Applying" in change_row and "ns/big" in change_row and "2026-12-02T04:00:00Z" in change_row
    assert load_report(report_document(report)) == report  # -o json round-trips it


def test_a_finished_change_leaves_the_row_alone_but_stays_listed():
    node = {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    text = render(cluster_report([node], [], [gpunode_doc("Done")]))
    assert "4x1g.10gb (dynamic) " in text and "->" not in text
    assert any(" c1 " in line and "Done" in line for line in text.splitlines())
