"""Small readers that several spellings share: one annotation, a fraction of a GPU, a group name, a list."""
from __future__ import annotations

import re
from decimal import Decimal

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import ceil_int, parse_number, show
from fgpu_contracts.request import MILLI

from ..claims import Claim
from ..podview import PodView, annotation_field

MAX_DEVICES = 64  # ContainerRequest.count's ceiling
_GROUP = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")  # a label value
_TOKEN = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.:]*")


class Claims(list[Claim]):
    """The claims one spelling makes; `add` takes a value with (text, field) as `note` returns them."""

    def __init__(self, source: str, container: str | None = None):
        super().__init__()
        self.source, self.container = source, container

    def add(self, attr: str, value: object, text: str, field: str, container: str | None = None) -> None:
        self.append(Claim(attr, value, field, text, self.source, container or self.container))


def note(view: PodView, key: str) -> tuple[str, str] | None:
    """(value, field) of an annotation, or None."""
    value = view.annotations.get(key)
    return None if value is None else (value, annotation_field(key))


def fraction(text: str, field: str, *, counts: bool) -> tuple[int | None, int]:
    """(device count or None, milli-GPU per device) of `0 < f <= 1`, or with `counts` also a whole number of
    GPUs. Fractions finer than a milli-GPU round up: nobody is given less than asked."""
    allowed = ["0 < f <= 1"] + ([f"a whole number of GPUs 1..{MAX_DEVICES}"] if counts else [])
    value = parse_number(text, field, allowed=allowed)
    if Decimal(0) < value <= 1:
        return None, ceil_int(value * MILLI)
    if counts and value == value.to_integral_value() and 1 < value <= MAX_DEVICES:
        return int(value), MILLI
    raise InputError(f"{show(text)} is not a share of one GPU" + (" or a whole number of GPUs" if counts else ""),
                     field=field, allowed=allowed)


def group(text: str, field: str) -> str:
    """A KubeShare-style group name (label-value syntax, so it can be matched like one)."""
    if not _GROUP.fullmatch(text):
        raise InputError(f"{show(text)} is not a group name", field=field,
                         allowed=["1-63 letters, digits, '-', '_', '.'; alphanumeric at both ends"])
    return text


def tokens(text: str, field: str, what: str) -> tuple[str, ...]:
    """A comma-separated list of identifiers (GPU UUIDs), deduplicated and sorted: order means nothing."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = next((t for t in items if not _TOKEN.fullmatch(t)), None)
    if not items or bad is not None:
        raise InputError(f"{show(bad if bad is not None else text)} is not a list of {what}", field=field,
                         allowed=[f"comma-separated {what}, e.g. GPU-8d2f...,GPU-77a1..."])
    return tuple(sorted(set(items)))


def choice(text: str, field: str, allowed: tuple[str, ...]) -> str:
    """One of a few words, case-insensitively."""
    word = text.strip().lower()
    if word not in allowed:
        raise InputError(f"{show(text)} is not supported", field=field, allowed=allowed)
    return word
