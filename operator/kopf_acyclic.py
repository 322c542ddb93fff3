"""Kopf's per-event Body and Patch without reference cycles.

Kopf wraps every watch event in a `Body` and a `Patch` whose `meta`/`spec`/`status` views (and `meta`'s
`labels`/`annotations`) are made at once and point back at their parent: a cycle per event. Reference counting
cannot free a cycle, so each event's decoded object (the whole pod, hundreds of dicts and lists) waited for the
cyclic collector, which then walked it. Here the views are made when asked for (each is a path into the same
dict, so a fresh one reads and writes what a kept one would), and an event's objects go when Kopf drops them.
"""
from __future__ import annotations


def make_kopf_bodies_acyclic() -> None:
    """Patch Kopf's Body, Meta, Patch and MetaPatch in this process. Call after importing Kopf, before it runs."""
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

    bodies.Body.__init__ = body_init
    bodies.Body.meta = bodies.Body.metadata = property(bodies.Meta)
    bodies.Body.spec = property(bodies.Spec)
    bodies.Body.status = property(bodies.Status)
    bodies.Meta.__init__ = meta_init
    bodies.Meta.labels = property(lambda meta: dicts.MappingView(meta, "labels"))
    bodies.Meta.annotations = property(lambda meta: dicts.MappingView(meta, "annotations"))
    patches.Patch.__init__ = patch_init
    patches.Patch.meta = patches.Patch.metadata = property(patches.MetaPatch)
    patches.Patch.spec = property(patches.SpecPatch)
    patches.Patch.status = property(patches.StatusPatch)
    patches.MetaPatch.__init__ = meta_patch_init
    patches.MetaPatch.labels = property(lambda meta: dicts.MutableMappingView(meta, "labels"))
    patches.MetaPatch.annotations = property(lambda meta: dicts.MutableMappingView(meta, "annotations"))
