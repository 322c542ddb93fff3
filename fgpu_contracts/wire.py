"""Building blocks shared by the JSON contracts: the model base (frozen, no unknown fields, camelCase on the
wire), parsing that fails as one InputError, and the Kubernetes object parts custom resources reuse."""
from __future__ import annotations

from typing import Literal, TypeVar

import pydantic
from pydantic.alias_generators import to_camel

from fgpu_contracts.errors import InputError


class WireModel(pydantic.BaseModel):
    """Frozen (a parsed value is safe to cache and share), strict about unknown fields (a typo is an error,
    not a silently ignored key), camelCase on the wire and snake_case in Python."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel,
                                       populate_by_name=True)


M = TypeVar("M", bound=WireModel)


def parse_json(model: type[M], text: str | bytes, field: str) -> M:
    """`text` validated as `model`; the first problem becomes an InputError naming `field` (the annotation
    key or object the text came from) and where in the document it is."""
    try:
        return model.model_validate_json(text)
    except pydantic.ValidationError as err:
        e = err.errors()[0]
        loc = ".".join(str(p) for p in e["loc"])
        raise InputError(f"{e['msg']}" + (f" at {loc}" if loc else ""), field=field) from None


def without_derived(data: object, *keys: str) -> object:
    """`data` without the keys of derived (computed) fields: they are written for readers that cannot compute
    them (kubectl's printer columns) and recomputed on read, so a stale or hand-edited value never counts."""
    return {k: v for k, v in data.items() if k not in keys} if isinstance(data, dict) else data


class ObjectMeta(WireModel):
    """The part of a Kubernetes object's metadata the contracts pin down (the name); the apiserver's own
    fields (uid, resourceVersion, ...) pass through."""

    model_config = pydantic.ConfigDict(extra="allow")

    name: str = pydantic.Field(min_length=1, max_length=253)


class Condition(WireModel):
    """A standard Kubernetes condition (metav1.Condition, same rules), so `kubectl wait --for=condition=...`
    and every tool that reads conditions work on fgpu's objects."""

    type: str = pydantic.Field(max_length=316, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*"
                                                       r"[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
    status: Literal["True", "False", "Unknown"]
    reason: str = pydantic.Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = pydantic.Field(max_length=32768)  # required, may be empty
    last_transition_time: str  # RFC 3339
    observed_generation: int | None = pydantic.Field(default=None, ge=0)
