"""Kopf's per-event work, the same results for less CPU.

The operator takes every pod event through Kopf (`@kopf.on.event`) on the one thread that also decides, and
py-spy put Kopf's per-event machinery at ~45% of that thread's samples in a burst of 5,000 pods (fgpu's own
handler: 2.3%). Three parts of it are made cheaper here, each giving what Kopf as shipped gives:

- The watch stream's JSON is decoded by orjson (`kube/wirejson.py`), not `json` (7.3% of the samples).
- A watching cause builds its handler keyword arguments once. As shipped they were built twice per event (once for
  the lifecycle, which ignores them, once for the handler), each time walking the dataclass fields and making
  fresh `meta`/`spec`/`status` views, and `meta` six times over (~10% of the samples).
- A `MappingView` looks an item up by walking its path directly; as shipped each lookup re-parsed the path and
  checked every level against the `Mapping` ABC (every `body.metadata.uid` and logger set-up goes through it).
- A resource with only `on.event` handlers (fgpu's pods, nodes, GPUNodes, policies) skips the steps that serve other
  handler kinds: the diff of essences, the finalizer checks, two more loggers, the index and handler-progress
  state. perf put `process_resource_event` at 22% of the operator's CPU at 100 pods/s offered, and the handler
  calls inside it at 14%. Any other resource, an object Kopf still holds a patch or a daemon body for, or one that
  carries Kopf's finalizer (which Kopf as shipped removes when no handler needs it) takes Kopf's path as shipped.

Kopf's internals are private: the operator applies this module through `kopf_patches.apply_kopf_patches`, only to a
Kopf of the tested range whose internals have the shape used here (any other runs as shipped). Each part checks
what it replaces once more and leaves it as shipped if that moved; `tests/controller/test_kopf_fast.py` compares
Kopf as shipped with Kopf patched, event by event, on the Kopf installed.
"""
from __future__ import annotations

import dataclasses
import logging
import types
from collections.abc import Mapping

log = logging.getLogger("fgpu.operator")


def speed_up_kopf() -> list[str]:
    """Apply every part in this process (after importing Kopf and `kopf_acyclic`, before Kopf runs); returns the
    names of the parts that could not be applied to this Kopf."""
    missing = []
    for part in (_orjson_watch_stream, _kwargs_once_per_watching_cause, _direct_view_lookup, _watch_only_processing):
        try:
            part()
        except (AttributeError, ImportError, TypeError) as e:
            missing.append(part.__name__)
            log.warning("Kopf speed-up %s not applied to this Kopf (%s): it runs as shipped", part.__name__, e)
    return missing


def _orjson_watch_stream() -> None:
    import json

    from kopf._cogs.clients import api

    from .kube import wirejson

    if getattr(api, "json", None) is not json:
        raise AttributeError("kopf._cogs.clients.api no longer decodes with the json module")
    api.json = types.SimpleNamespace(**{**vars(json), "loads": wirejson.loads})


def _kwargs_once_per_watching_cause() -> None:
    """`WatchingCause._kwargs` (the handler's keyword arguments, before indices) cached on the cause. The cache
    holds the body, patch, logger and memo, none of which refers back to the cause, so no cycle is made; every
    caller (`kwargs`, `sync_kwargs`, `async_kwargs`) copies it before use."""
    from kopf._core.actions import execution
    from kopf._core.intents import causes

    fields: dict[type, tuple[str, ...]] = {}

    def cause_kwargs(self) -> dict:  # execution.Cause._kwargs, with the field names looked up once per class
        names = fields.get(type(self))
        if names is None:
            names = fields[type(self)] = tuple(f.name for f in dataclasses.fields(self))
        return {name: getattr(self, name) for name in names}

    def resource_kwargs(self) -> dict:  # causes.ResourceCause._kwargs, with one `meta` view
        body = self.body
        meta = body.metadata
        return dict(super(causes.ResourceCause, self)._kwargs, spec=body.spec, meta=meta, status=body.status,
                    uid=meta.uid, name=meta.name, namespace=meta.namespace, labels=meta.labels,
                    annotations=meta.annotations)

    def watching_kwargs(self) -> dict:
        cached = self.__dict__.get("_fgpu_kwargs")
        if cached is None:
            cached = self.__dict__["_fgpu_kwargs"] = resource_kwargs(self)
        return cached

    for cls, name in ((execution.Cause, "_kwargs"), (causes.ResourceCause, "_kwargs")):
        if not isinstance(cls.__dict__.get(name), property):
            raise AttributeError(f"{cls.__qualname__}.{name} is no longer a property")
    if "_kwargs" in causes.WatchingCause.__dict__:
        raise AttributeError("WatchingCause defines its own _kwargs")
    execution.Cause._kwargs = property(cause_kwargs)
    causes.ResourceCause._kwargs = property(resource_kwargs)
    causes.WatchingCause._kwargs = property(watching_kwargs)


def _direct_view_lookup() -> None:
    from kopf._cogs.structs import dicts

    def getitem(self, item):  # dicts.resolve(self._src, self._path + (item,)) without a default
        found = self._src
        for key in (*self._path, item):
            if type(found) is not dict and not isinstance(found, Mapping):
                raise TypeError(f"The structure is not a dict with field {key!r}: {found!r}")
            found = found[key]
        return found

    if not isinstance(dicts.MappingView.__dict__.get("__getitem__"), types.FunctionType):
        raise AttributeError("MappingView.__getitem__ moved")
    dicts.MappingView.__getitem__ = getitem


def _watch_only_processing() -> None:
    """`processing.process_resource_event` for an event of a resource whose handlers are all watching ones: what
    Kopf does for those handlers (object memory, Kopf's per-object context, the readiness gates, the error
    throttler, each handler executed once with errors ignored and logged, results and patches applied), in
    Kopf's order, and nothing for the handler kinds the resource does not have."""
    import asyncio
    import contextlib

    from kopf._cogs.structs import bodies, patches
    from kopf._core.actions import application, execution, lifecycles, loggers, progression, throttlers
    from kopf._core.engines import posting
    from kopf._core.intents import causes, registries
    from kopf._core.reactor import processing

    shipped = processing.process_resource_event
    if getattr(shipped, "_fgpu_watch_only", False):
        return
    for name in ("_indexing", "_changing", "_spawning", "_watching"):  # the registries the choice reads
        if not hasattr(registries.OperatorRegistry(), name):
            raise AttributeError(f"OperatorRegistry has no {name}")

    async def process_resource_event(**kwargs):  # Kopf's keyword arguments, passed on whole when it takes the event
        registry, settings, resource = kwargs["registry"], kwargs["settings"], kwargs["resource"]
        raw_event, memories = kwargs["raw_event"], kwargs["memories"]
        raw_type, raw_body = raw_event["type"], raw_event["object"]
        if (registry._indexing.has_handlers(resource=resource) or registry._changing.has_handlers(resource=resource)
                or registry._spawning.has_handlers(resource=resource)
                or settings.persistence.finalizer in ((raw_body.get("metadata") or {}).get("finalizers") or ())):
            return await shipped(**kwargs)
        memory = await memories.recall(raw_body, noticed_by_listing=raw_type is None, memobase=kwargs["memobase"])
        if memory.remaining_patch or memory.daemons_memory.live_fresh_body is not None:
            return await shipped(**kwargs)  # recalls the same memory; nothing is forgotten yet
        stream_pressure = kwargs.get("stream_pressure")
        resource_indexed, operator_indexed = kwargs.get("resource_indexed"), kwargs.get("operator_indexed")
        if raw_type == "DELETED":
            await memories.forget(raw_body)
        body = bodies.Body(raw_body)
        patch = patches.Patch(body=body)
        logger = loggers.LocalObjectLogger(body=body, settings=settings)
        throttled = contextlib.nullcontext(True) if kwargs.get("no_throttling") else throttlers.throttled(
            throttler=memory.error_throttler, logger=logger, delays=settings.queueing.error_delays,
            wakeup=stream_pressure)
        async with throttled as should_run:
            if not should_run:
                return None
            posting.event_queue_loop_var.set(asyncio.get_running_loop())
            posting.event_queue_var.set(kwargs["event_queue"])
            if operator_indexed is not None and resource_indexed is not None:
                await operator_indexed.drop_toggle(resource_indexed)
            if operator_indexed is not None:
                await operator_indexed.wait_for(True)
            cause = causes.detect_watching_cause(raw_event=raw_event, resource=resource,
                                                 indices=kwargs["indexers"].indices,
                                                 logger=logger, patch=patch, body=body, memo=memory.memo)
            handlers = registry._watching.get_handlers(cause=cause)
            basetime = progression._get_basetime()  # every handler's state starts before any runs, as in Kopf
            states = [progression.HandlerState.from_scratch(basetime=basetime) for _ in handlers]
            outcomes = {}
            for handler, state in zip(handlers, states, strict=True):
                outcomes[handler.id] = await execution.execute_handler_once(
                    settings=settings, handler=handler, cause=cause, lifecycle=lifecycles.all_at_once,
                    state=state, default_errors=execution.ErrorsMode.IGNORED)
            progression.deliver_results(outcomes=outcomes, patch=patch)
            if raw_type != "DELETED" and patch:
                _, resource_version, memory.remaining_patch = await application.apply(
                    settings=settings, resource=resource, body=body, patch=patch, logger=logger, delays=[],
                    stream_pressure=stream_pressure)
                return resource_version
        return None

    process_resource_event._fgpu_watch_only = True
    processing.process_resource_event = process_resource_event
