"""`apply_kopf_patches` patches only a Kopf inside the tested range whose private names have the expected shape;
any other Kopf runs as shipped, with one WARNING line and nothing of Kopf replaced. Each case runs in a child
process (the patches are process-wide); a fake version or a fake change to Kopf's internals is made first."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

CASE = r"""
import json, logging, sys
records = []
class Records(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])
logging.getLogger().addHandler(Records())
import kopf
from kopf._cogs.clients import api
from kopf._cogs.structs import bodies, patches
from kopf._core.intents import causes
from kopf._core.reactor import processing
from fgpu_operator import kopf_patches
exec(sys.argv[1])  # the fake
def parts():
    return [processing.process_resource_event, bodies.Body.__init__, patches.Patch.__init__, api.json,
            causes.WatchingCause._kwargs]
shipped = parts()
applied = kopf_patches.apply_kopf_patches()
print(json.dumps({"applied": applied, "records": records,
                  "replaced": [a is not b for a, b in zip(shipped, parts(), strict=True)]}))
"""


def apply_after(fake: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CASE, fake], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_installed_kopf_is_patched_without_a_word():
    result = apply_after("")
    assert result == {"applied": True, "records": [], "replaced": [True] * 5}


FAKES = {
    "a newer release": ("kopf_patches.kopf_version = lambda: '1.46.0'", "the speed-ups were tested on Kopf"),
    "an older release": ("kopf_patches.kopf_version = lambda: '1.43.0'", "the speed-ups were tested on Kopf"),
    "a pre-release": ("kopf_patches.kopf_version = lambda: '1.45.0rc1'", "the speed-ups were tested on Kopf"),
    "a dataclass field gone (1.43's ResourceMemory)": (
        "import dataclasses; from kopf._core.reactor import inventory; inventory.ResourceMemory = "
        "dataclasses.make_dataclass('ResourceMemory', ['memo', 'error_throttler', 'daemons_memory'])",
        "ResourceMemory has no field 'remaining_patch'"),
    "a function gone": ("from kopf._core.actions import progression; del progression._get_basetime",
                        "_get_basetime"),
    "a module gone": ("sys.modules['kopf._core.actions.throttlers'] = None", "kopf._core.actions.throttlers"),
    "a keyword gone": (
        "async def narrower(lifecycle, indexers, registry, settings, memories, memobase, resource, raw_event, "
        "event_queue, stream_pressure=None, resource_indexed=None, operator_indexed=None): pass\n"
        "processing.process_resource_event = narrower", "takes no keyword 'no_throttling'"),
    "a constructor that sets more": (
        "shipped_init = bodies.Body.__init__\n"
        "def init(self, src):\n    shipped_init(self, src); self._extra = None\n"
        "bodies.Body.__init__ = init", "Body sets"),
    "a property made a method": ("causes.ResourceCause._kwargs = lambda self: {}", "ResourceCause._kwargs"),
}


@pytest.mark.parametrize("fake, named", FAKES.values(), ids=FAKES.keys())
def test_any_other_kopf_runs_as_shipped_with_one_warning(fake, named):
    result = apply_after(fake)
    assert result["applied"] is False and result["replaced"] == [False] * 5
    (record,) = result["records"]
    assert record[0] == "WARNING" and named in record[1] and "running Kopf as shipped" in record[1], record
