"""Kopf's per-event Body and Patch without reference cycles.

Kopf wraps every watch event in a `Body` and a `Patch` whose `meta`/`spec`/`status` views (and `meta`'s
`labels`/`annotations`) are made at once and point back at their parent: a cycle per event. Reference counting
cannot free a cycle, so each event's decoded object (the whole pod, hundreds of dicts and lists) waited for the
cyclic collector, which then walked it. Here the views are made when asked for (each is a path into the same
dict, so a fresh one reads and writes what a kept one would), and an event's objects go when Kopf drops them.
"""
from __future__ import annotations


def make_kopf_bodies_acyclic() -> None:
    """Patch Kopf's Body, Meta, Patch and MetaPatch in this process. Call after importing Kopf, before it runs, and
    only on a Kopf whose constructors are the ones replaced here (`kopf_patches.apply_kopf_patches` checks)."""
    from kopf._cogs.structs import bodies, dicts, patches

    def body_init(self, src, /) -> None:
        dicts.ReplaceableMappingView.__init__(self, src)

    def meta_init(self, src, /) -> None:
        dicts.MappingView.__init__(self, src, "metadata")

    def patch_init(self, src=None, /, body=None, fns=()) -> None:
        dict.__init__(self, src or {})
        self._original = body
        self._fns = (src.fns if isinstance(src, patches.Patch) else []) + list(fns)

    def meta_patch_init(self, src, /) -> None:
        dicts.MutableMappingView.__init__(self, src, "metadata")

    def labels_and_annotations(view) -> dict:
        return {name: (lambda parent, name=name: view(parent, name)) for name in ("labels", "annotations")}

    _views_on_demand(bodies.Body, body_init, meta=bodies.Meta, metadata=bodies.Meta, spec=bodies.Spec,
                     status=bodies.Status)
    _views_on_demand(bodies.Meta, meta_init, **labels_and_annotations(dicts.MappingView))
    _views_on_demand(patches.Patch, patch_init, meta=patches.MetaPatch, metadata=patches.MetaPatch,
                     spec=patches.SpecPatch, status=patches.StatusPatch)
    _views_on_demand(patches.MetaPatch, meta_patch_init, **labels_and_annotations(dicts.MutableMappingView))


def _views_on_demand(cls: type, init, **views) -> None:
    """`cls` built by `init` (which keeps no views), each named view made from the object when read."""
    cls.__init__ = init
    for name, make in views.items():
        setattr(cls, name, property(make))
