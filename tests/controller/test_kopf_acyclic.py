"""Kopf's per-event Body and Patch leave no reference cycles once patched, and read and write what Kopf's own
do. Each case runs in a subprocess: the patch is process-wide, and the unpatched case must stay measurable."""
import json
import subprocess
import sys

PROBE = """
import gc, json, kopf
from kopf._cogs.structs import bodies, patches
raw = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}, "annotations": {"x": "y"}},
       "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}}
gc.collect(); gc.disable()
body = bodies.Body(raw)
patch = patches.Patch({}, body=body)
reads = [body.meta.uid, body.metadata.name, body.meta.namespace, dict(body.meta.labels), dict(body.meta.annotations),
         dict(body.spec), dict(body.status), body.get("kind"), patch.meta is not None]
patch.meta.annotations["k"] = "v"
patch.metadata.labels["gone"] = None
patch.status["phase"] = "Running"
patch.spec["x"] = 1
merged = patches.Patch(patch)
writes = [dict(patch), bool(patch), merged.fns == patch.fns]
del body, patch, merged
garbage = gc.collect()  # what an event's Body and Patch left for the collector
# A JSON patch makes a cycle of its own; the operator's events never build one (their Patch stays empty).
body = bodies.Body(raw)
patch = patches.Patch({"status": {"phase": "Running"}}, body=body)
writes.append(patch.as_json_patch(body))
print(json.dumps({"garbage": garbage, "reads": reads, "writes": writes}, sort_keys=True))
"""


def probe(patched: bool) -> dict:
    prelude = ("import kopf; from fgpu_operator.kopf_acyclic import make_kopf_bodies_acyclic; "
               "make_kopf_bodies_acyclic()\n" if patched else "")
    done = subprocess.run([sys.executable, "-c", prelude + PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_patched_bodies_and_patches_leave_no_cycles_and_behave_the_same():
    before, after = probe(patched=False), probe(patched=True)
    assert before["garbage"] > 0  # Kopf's own do make cycles: the check below can fail
    assert after["garbage"] == 0
    assert after["reads"] == before["reads"]
    assert after["writes"] == before["writes"]
    assert after["writes"][0] == {"metadata": {"annotations": {"k": "v"}, "labels": {"gone": None}},
                                  "status": {"phase": "Running"}, "spec": {"x": 1}}


def test_the_operator_command_applies_it_before_kopf_runs():
    """`fgpu operator` up to the moment it hands over to Kopf, with kopf.run replaced by the probe."""
    runner = ("import kopf\n"
              "def probe_instead(**_):\n"
              "    exec(PROBE, {})\n"
              "    return 0\n"
              "kopf.run = probe_instead\n"
              f"PROBE = {PROBE!r}\n"
              "from fgpu_operator.cli import main\n"
              "main(['operator', '--no-leader-elect'])\n")
    done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["garbage"] == 0
