"""`speed_up_kopf` applies to the Kopf installed, and Kopf then hands handlers what it hands them as shipped.
Each case runs in a subprocess: the patches are process-wide."""
import json
import subprocess
import sys

import pytest

#: Kopf's own processing of one watch event (`process_resource_event`, the function its per-object workers call),
#: with an on.event handler that records every keyword argument it is given, and lookups through Kopf's views.
PROBE = r"""
import asyncio, functools, json, kopf, logging
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing
from kopf._core.intents import registries
from kopf._core.reactor import inventory, processing
from kopf._cogs.structs import bodies, dicts, references
from kopf._cogs.clients import api
seen = []
registry = registries.OperatorRegistry()

@kopf.on.event("", "v1", "pods", registry=registry)
async def handler(**kwargs):
    seen.append({name: (dict(value) if isinstance(value, dicts.MappingView) else value)
                 for name, value in kwargs.items() if name in KEPT} | {"names": sorted(kwargs)})

KEPT = {"type", "event", "body", "spec", "meta", "status", "uid", "name", "namespace", "labels", "annotations"}
settings = kopf.OperatorSettings()
settings.posting.enabled = False
resource = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}, "annotations": {"x": "y"}},
       "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}}
process = functools.partial(processing.process_resource_event, lifecycle=lifecycles.all_at_once, registry=registry,
                            settings=settings, indexers=indexing.OperatorIndexers(),
                            memories=inventory.ResourceMemories(), memobase=kopf.Memo(),
                            event_queue=asyncio.Queue(), resource=resource)

# A failing handler (its error logged and ignored), and a resource with an index as well (Kopf's own path).
@kopf.on.event("", "v1", "nodes", registry=registry)
async def failing(**_):
    raise ValueError("boom")

@kopf.index("", "v1", "configmaps", registry=registry)
def by_name(name, **_):
    return {"names": name}

@kopf.on.event("", "v1", "configmaps", registry=registry)
async def indexed(name, by_name, **_):
    seen.append({"indexed": name, "index": list(by_name["names"])})

class Records(logging.Handler):
    def emit(self, record):
        logged.append([record.levelname, record.getMessage(), record.exc_info is not None])
logged = []
logging.getLogger("kopf.objects").addHandler(Records())
logging.getLogger("kopf.objects").setLevel(logging.DEBUG)
indexers = indexing.OperatorIndexers()
indexers.ensure(registry._indexing.get_all_handlers())

detected = []  # the resources whose events went through Kopf's cause detection (its full path)
_detect = processing._detect_causes
processing._detect_causes = lambda **kw: detected.append(kw["resource"].plural) or _detect(**kw)

remembered = []  # objects in Kopf's per-object memory after each pod event

async def main():
    common = dict(lifecycle=lifecycles.all_at_once, registry=registry, settings=settings, indexers=indexers,
                  memories=inventory.ResourceMemories(), memobase=kopf.Memo(), event_queue=asyncio.Queue())
    for kind in ("ADDED", "MODIFIED", "DELETED"):
        await process(raw_event={"type": kind, "object": json.loads(json.dumps(pod))})
        remembered.append(len(process.keywords["memories"]._items))
    # A pod carrying Kopf's own finalizer: Kopf as shipped removes it (on a live event), so Kopf's path takes it.
    marked = json.loads(json.dumps(pod))
    marked["metadata"].update(uid="u3", finalizers=[settings.persistence.finalizer])
    await process(raw_event={"type": "DELETED", "object": marked})
    for plural, kind in (("nodes", "Node"), ("configmaps", "ConfigMap")):
        other = references.Resource(group="", version="v1", plural=plural, kind=kind, namespaced=kind != "Node")
        body = {"metadata": {"name": "o", "namespace": "ns", "uid": "u2"}}
        await processing.process_resource_event(resource=other, raw_event={"type": "ADDED", "object": body},
                                                **common)
asyncio.run(main())
view = dicts.MappingView({"a": {"b": {"c": 1}}, "s": "text"}, "a")
lookups = [view["b"], dict(view), view.get("missing", "default"), bodies.Body(pod).metadata.labels["a"]]
errors = []
for probe in (lambda: view["missing"], lambda: dicts.MappingView({"a": "text"}, "a")["b"],
              lambda: dicts.MappingView({"a": {"b": 1}}, ("a", "b"))["c"]):
    try:
        probe()
    except Exception as e:
        errors.append([type(e).__name__, str(e)])
line = b'{"type":"ADDED","object":{"metadata":{"name":"p","n":9223372036854775807,"m":-9223372036854775808,"f":1.5,"u":"\\u00e9"}}}'
print(json.dumps({"seen": seen, "logged": logged, "detected": detected, "remembered": remembered, "lookups": lookups, "errors": errors, "decoded": api.json.loads(line)},
                 sort_keys=True))
"""


def probe(fast: bool) -> dict:
    prelude = ("import kopf\nfrom fgpu_operator.kopf_acyclic import make_kopf_bodies_acyclic\n"
               "make_kopf_bodies_acyclic()\n")
    if fast:
        prelude += ("from fgpu_operator.kopf_fast import speed_up_kopf\n"
                    "assert speed_up_kopf() == [], 'a part did not apply'\n")
    done = subprocess.run([sys.executable, "-c", prelude + PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def shipped_and_fast() -> tuple[dict, dict]:
    return probe(fast=False), probe(fast=True)


def test_every_part_applies_to_the_installed_kopf(shipped_and_fast):
    _, fast = shipped_and_fast
    assert [e["type"] for e in fast["seen"][:4]] == ["ADDED", "MODIFIED", "DELETED", "DELETED"]


def test_handlers_get_the_same_keyword_arguments(shipped_and_fast):
    shipped, fast = shipped_and_fast
    assert fast["seen"] == shipped["seen"]
    first = fast["seen"][0]
    assert {"memo", "patch", "logger", "resource", "retry", "started", "runtime", "param"} <= set(first["names"])
    assert (first["uid"], first["name"], first["namespace"]) == ("u1", "p", "ns")
    assert first["labels"] == {"a": "b"} and first["annotations"] == {"x": "y"}
    assert first["spec"] == {"nodeName": "n1"} and first["status"] == {"phase": "Pending"}


def test_a_failing_handler_is_logged_and_ignored_as_shipped(shipped_and_fast):
    shipped, fast = shipped_and_fast
    assert fast["logged"] == shipped["logged"]
    assert ["ERROR", "Handler 'failing' failed with an exception and will ignore it: boom", True] in fast["logged"]
    assert fast["logged"].count(["INFO", "Handler 'handler' succeeded.", False]) == 4


def test_a_resource_with_an_index_goes_through_kopf_as_shipped(shipped_and_fast):
    """Only resources whose handlers all watch take the shorter path; an index needs Kopf's own."""
    shipped, fast = shipped_and_fast
    assert fast["seen"][4:] == shipped["seen"][4:] == [{"indexed": "o", "index": ["o"]}]
    assert ["INFO", "Indexer 'by_name' succeeded.", False] in fast["logged"]
    assert shipped["detected"] == ["pods", "pods", "pods", "pods", "nodes", "configmaps"]
    assert fast["detected"] == ["pods", "configmaps"]  # the pod with Kopf's finalizer; the others the watching-only path


def test_kopf_forgets_an_object_on_deletion_alike(shipped_and_fast):
    shipped, fast = shipped_and_fast
    assert fast["remembered"] == shipped["remembered"] == [1, 1, 0]


def test_views_look_up_and_fail_as_shipped(shipped_and_fast):
    shipped, fast = shipped_and_fast
    assert fast["lookups"] == shipped["lookups"] == [{"c": 1}, {"b": {"c": 1}}, "default", "b"]
    assert fast["errors"] == shipped["errors"]
    assert [name for name, _ in fast["errors"]] == ["KeyError", "TypeError", "TypeError"]


def test_watch_lines_decode_as_json_does(shipped_and_fast):
    shipped, fast = shipped_and_fast
    assert fast["decoded"] == shipped["decoded"]
    assert fast["decoded"]["object"]["metadata"]["n"] == 2**63 - 1  # the apiserver's largest (int64)


def test_the_operator_command_applies_it_before_kopf_runs():
    """`fgpu operator` up to the moment it hands over to Kopf, with kopf.run replaced by a look at Kopf."""
    runner = ("import kopf\n"
              "def look_instead(**_):\n"
              "    from kopf._cogs.clients import api\n"
              "    from kopf._core.intents import causes\n"
              "    from fgpu_operator.kube import wirejson\n"
              "    print(api.json.loads is wirejson.loads, '_kwargs' in causes.WatchingCause.__dict__)\n"
              "    return 0\n"
              "kopf.run = look_instead\n"
              "from fgpu_operator.cli import main\n"
              "main(['operator', '--no-leader-elect'])\n")
    done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True True"
