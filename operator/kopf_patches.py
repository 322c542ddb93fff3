"""Kopf's speed-ups (`kopf_acyclic`, `kopf_fast`) applied only to a Kopf they were tested on.

Both replace private parts of Kopf (~40 names under `kopf._cogs` and `kopf._core`), which any release may move or
reshape: Kopf 1.43, for one, has no `ResourceMemory.remaining_patch`, so a speed-up written for 1.44 would report
success there and then fail every watch event. So before either touches Kopf, `apply_kopf_patches` checks the
installed version against TESTED and every private name they use against the shape they expect (modules, classes,
dataclass fields, keyword parameters, the attributes Kopf's own constructors set). Anything else: Kopf runs as
shipped, correct and slower, and one WARNING line says why.

To support a new Kopf release: run `tests/controller/test_kopf_fast.py` and `test_kopf_acyclic.py` on it (they compare
Kopf as shipped with Kopf patched, event by event), fix what differs, then widen TESTED.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import re
import types
from collections.abc import Iterator

log = logging.getLogger("fgpu.operator")

#: The Kopf releases the patches were run on, both ends included (tests/controller/test_kopf_*.py on 1.44.0, 1.44.6,
#: 1.45.0 and 1.45.2; the operator e2e tests on 1.44.0 and 1.45.2).
TESTED = ((1, 44, 0), (1, 45, 2))


def apply_kopf_patches() -> bool:
    """Patch Kopf in this process if it is one the patches fit (call after importing Kopf, before it runs);
    returns whether it was patched. Otherwise Kopf stays as shipped and one WARNING line says why."""
    version = kopf_version()
    problem = unsupported(version)
    if problem:
        log.warning("Kopf %s: %s; running Kopf as shipped (correct, more CPU per event)", version, problem)
        return False
    from .kopf_acyclic import make_kopf_bodies_acyclic
    from .kopf_fast import speed_up_kopf

    make_kopf_bodies_acyclic()  # before Kopf makes its first Body
    speed_up_kopf()
    return True


def kopf_version() -> str:
    from importlib.metadata import version

    return version("kopf")


def unsupported(version: str) -> str:
    """Why the patches must not be applied to this Kopf ('' when they may)."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)$", version)
    if found is None or not TESTED[0] <= tuple(map(int, found.groups())) <= TESTED[1]:
        low, high = (".".join(map(str, v)) for v in TESTED)
        return f"the speed-ups were tested on Kopf {low} to {high} only"
    try:
        problems = list(_shape_problems())
    except (AttributeError, TypeError) as e:  # a name gone from under the checks themselves
        problems = [str(e)]
    if problems:
        return f"Kopf's internals differ from what the speed-ups expect ({'; '.join(problems[:3])})"
    return ""


def _module(name: str):
    return importlib.import_module(name)


def _shape_problems() -> Iterator[str]:
    """Each private name the patches read, call or replace, as they expect it; one message per difference."""
    try:
        api = _module("kopf._cogs.clients.api")
        bodies, dicts, patches = (_module(f"kopf._cogs.structs.{m}") for m in ("bodies", "dicts", "patches"))
        application, execution, lifecycles, loggers, progression, throttlers = (
            _module(f"kopf._core.actions.{m}")
            for m in ("application", "execution", "lifecycles", "loggers", "progression", "throttlers"))
        daemons, posting = (_module(f"kopf._core.engines.{m}") for m in ("daemons", "posting"))
        causes, registries = (_module(f"kopf._core.intents.{m}") for m in ("causes", "registries"))
        inventory, processing = (_module(f"kopf._core.reactor.{m}") for m in ("inventory", "processing"))
        settings = _module("kopf").OperatorSettings()
    except (ImportError, AttributeError) as e:
        yield str(e)
        return
    import json

    # kopf_fast: the watch stream's decoder
    if getattr(api, "json", None) is not json:
        yield "kopf._cogs.clients.api does not decode with the json module"
    # kopf_fast: the handler keyword arguments, cached per watching cause
    for cls in (execution.Cause, causes.ResourceCause):
        if not isinstance(cls.__dict__.get("_kwargs"), property):
            yield f"{cls.__qualname__}._kwargs is not a property"
    if not issubclass(causes.WatchingCause, causes.ResourceCause) or "_kwargs" in causes.WatchingCause.__dict__:
        yield "WatchingCause is not a ResourceCause inheriting its _kwargs"
    yield from _fields(causes.WatchingCause, "body", "patch", "logger", "memo", "resource", "type", "event")
    for name in ("kwargs", "sync_kwargs", "async_kwargs"):
        if not isinstance(getattr(execution.Cause, name, None), property):
            yield f"Cause.{name} is not a property"
    # kopf_fast: the views' item lookup; kopf_acyclic: the views made on demand
    if not isinstance(dicts.MappingView.__dict__.get("__getitem__"), types.FunctionType):
        yield "MappingView.__getitem__ is not a plain function"
    yield from _attributes(lambda: dicts.MappingView({"a": {}}, "a"), "_src", "_path")
    yield from _attributes(lambda: bodies.Body({}), "_src", "_path", "_meta", "_spec", "_status")
    yield from _attributes(lambda: bodies.Meta(bodies.Body({})), "_src", "_path", "_labels", "_annotations")
    yield from _attributes(lambda: patches.Patch({}, body=None, fns=()), "_meta", "_spec", "_status", "_original",
                           "_fns")
    yield from _attributes(lambda: patches.MetaPatch(patches.Patch()), "_src", "_path", "_labels", "_annotations")
    for cls, base in ((bodies.Body, dicts.ReplaceableMappingView), (bodies.Meta, dicts.MappingView),
                      (bodies.Spec, dicts.MappingView), (bodies.Status, dicts.MappingView), (patches.Patch, dict),
                      (patches.MetaPatch, dicts.MutableMappingView), (patches.SpecPatch, dicts.MutableMappingView),
                      (patches.StatusPatch, dicts.MutableMappingView)):
        if not issubclass(cls, base):
            yield f"{cls.__qualname__} is not a {base.__qualname__}"
    for cls, views in ((bodies.Body, ("meta", "metadata", "spec", "status")), (bodies.Meta, ("labels", "annotations")),
                       (patches.Patch, ("meta", "metadata", "spec", "status", "fns")),
                       (patches.MetaPatch, ("labels", "annotations"))):
        for name in views:
            if not isinstance(getattr(cls, name, None), property):
                yield f"{cls.__qualname__}.{name} is not a property"
    # kopf_fast: the watching-only processing of an event, every function it calls with the keywords it passes
    yield from _parameters(processing.process_resource_event, "lifecycle", "indexers", "registry", "settings",
                           "memories", "memobase", "resource", "raw_event", "event_queue", "stream_pressure",
                           "resource_indexed", "operator_indexed", "no_throttling")
    registry = registries.OperatorRegistry()
    for name in ("_indexing", "_changing", "_spawning", "_watching"):
        if not callable(getattr(getattr(registry, name, None), "has_handlers", None)):
            yield f"OperatorRegistry.{name} has no has_handlers()"
    if not callable(getattr(getattr(registry, "_watching", None), "get_handlers", None)):
        yield "OperatorRegistry._watching has no get_handlers()"
    yield from _fields(inventory.ResourceMemory, "memo", "error_throttler", "daemons_memory", "remaining_patch")
    yield from _fields(daemons.DaemonsMemory, "live_fresh_body")
    yield from _parameters(inventory.ResourceMemories.recall, "raw_body", "noticed_by_listing", "memobase")
    yield from _parameters(inventory.ResourceMemories.forget, "raw_body")
    yield from _parameters(loggers.LocalObjectLogger, "body", "settings")
    yield from _parameters(throttlers.throttled, "throttler", "logger", "delays", "wakeup")
    yield from _parameters(causes.detect_watching_cause, "raw_event", "body", "resource", "indices", "logger",
                           "patch", "memo")
    yield from _parameters(progression._get_basetime)
    yield from _parameters(progression.HandlerState.from_scratch, "basetime")
    yield from _parameters(progression.deliver_results, "outcomes", "patch")
    yield from _parameters(execution.execute_handler_once, "settings", "handler", "cause", "lifecycle", "state",
                           "default_errors")
    yield from _parameters(application.apply, "settings", "resource", "body", "patch", "logger", "delays",
                           "stream_pressure")
    returns = str(inspect.signature(application.apply).return_annotation)
    if not re.fullmatch(r"tuple\[bool, [^,\[\]]+, [^,\[\]]+\]", returns.replace("typing.", "")):
        yield f"application.apply returns {returns}, not (applied, resource_version, remaining_patch)"
    if not hasattr(execution.ErrorsMode, "IGNORED") or not callable(getattr(lifecycles, "all_at_once", None)):
        yield "execution.ErrorsMode.IGNORED or lifecycles.all_at_once is missing"
    for name in ("event_queue_loop_var", "event_queue_var"):
        if not callable(getattr(getattr(posting, name, None), "set", None)):
            yield f"posting.{name} is not a context variable"
    if not isinstance(getattr(getattr(settings, "persistence", None), "finalizer", None), str):
        yield "settings.persistence.finalizer is not a string"
    if not hasattr(getattr(settings, "queueing", None), "error_delays"):
        yield "settings.queueing.error_delays is missing"


def _fields(cls: type, *names: str) -> Iterator[str]:
    have = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for name in names:
        if name not in have:
            yield f"{cls.__qualname__} has no field {name!r}"


def _parameters(func, *names: str) -> Iterator[str]:
    """`func` takes each of `names` by keyword (or, with no names, can be called without arguments)."""
    label = getattr(func, "__qualname__", repr(func))
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        yield f"{label} is not a callable with a signature"
        return
    kinds = {n: p.kind for n, p in params.items()}
    takes_any = inspect.Parameter.VAR_KEYWORD in kinds.values()
    for name in names:
        if kinds.get(name) not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) and \
                not (takes_any and name not in kinds):
            yield f"{label}() takes no keyword {name!r}"
    required = [n for n, p in params.items() if p.default is p.empty and n not in names and n != "self"
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        yield f"{label}() also requires {', '.join(required)}"


def _attributes(make, *names: str) -> Iterator[str]:
    """The object Kopf's own constructor makes has exactly these instance attributes (the patched constructors
    set the same state, less the eager views)."""
    try:
        obj = make()
    except Exception as e:  # any failure: the constructor is not the one expected
        yield f"cannot construct as expected: {type(e).__name__}: {e}"
        return
    have = set(vars(obj))
    if have != set(names):
        yield f"{type(obj).__qualname__} sets {sorted(have)}, not {sorted(names)}"
