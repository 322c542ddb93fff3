"""Numbers as users write them in pod specs, parsed exactly (Decimal, never float) and refused in one line.

Two grammars: Kubernetes quantities (`8Gi`, `1.5G`, `500m`, `3e3`: resources, and `fgpu.io/gpu-memory`), and
plain numbers (`0.5`, `2000`, `5e-1`: annotations and labels whose unit the key fixes, where `2Gi` would
be ambiguous). NaN, infinities, signs other than `+`, unicode digits and absurd exponents are refused before
any arithmetic, so a hostile value costs nothing and can never reach the output.
"""
from __future__ import annotations

import decimal
import math
import re
from decimal import Decimal

from fgpu_contracts.errors import InputError

# [0-9], not \d: \d also matches other scripts' digits, which Kubernetes refuses.
_DIGITS = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)"
_QUANTITY = re.compile(rf"\+?({_DIGITS})(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)")
_NUMBER = re.compile(rf"\+?({_DIGITS}(?:[eE][+-]?[0-9]+)?)")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_TEXT = 64
_MAX = Decimal(2**63 - 1)  # Kubernetes' int64 ceiling
_EXACT = decimal.Context(prec=100, traps=[decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero])


def show(value: object, limit: int = 40) -> str:
    """A user's value for a one-line message: quoted, escaped, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def as_text(value: object, field: str) -> str:
    """Quantities arrive as strings; hand-built dicts may hold plain numbers (bools are not numbers)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    raise InputError(f"{show(value)} is not a number", field=field)


def _bounded(value: Decimal, text: str, field: str) -> Decimal:
    if value and not -40 <= value.adjusted() <= 40:
        raise InputError(f"{show(text)} is out of range", field=field)
    return value


def parse_quantity(value: object, field: str) -> Decimal:
    """A non-negative Kubernetes quantity: `<number>[Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|e<exp>]`."""
    text = as_text(value, field).strip()
    m = _QUANTITY.fullmatch(text) if len(text) <= _MAX_TEXT else None
    if m is None:
        raise InputError(f"{show(text)} is not a non-negative Kubernetes quantity", field=field,
                         allowed=["e.g. 8Gi", "8192Mi", "8G", "1.5", "500m", "3e3"])
    number, suffix = m.groups()
    if suffix in _BINARY:
        scale = Decimal(2 ** _BINARY[suffix])
    else:
        exponent = int(suffix[1:]) if len(suffix) > 1 else _DECIMAL[suffix]
        scale = Decimal(10) ** max(-41, min(41, exponent))  # clamped: out of range either way below
    result = _EXACT.multiply(_bounded(Decimal(number), text, field), _bounded(scale, text, field))
    if result > _MAX:
        raise InputError(f"{show(text)} is out of range", field=field)
    return result


def parse_number(value: object, field: str, *, allowed: list[str] | None = None) -> Decimal:
    """A non-negative plain number (`0.5`, `2000`, `5e-1`), no unit suffix."""
    text = as_text(value, field).strip()
    m = _NUMBER.fullmatch(text) if len(text) <= _MAX_TEXT else None
    if m is None:
        raise InputError(f"{show(text)} is not a non-negative number", field=field, allowed=allowed)
    result = _bounded(Decimal(m.group(1)), text, field)
    if result > _MAX:
        raise InputError(f"{show(text)} is out of range", field=field, allowed=allowed)
    return result


def whole(value: Decimal, text: object, field: str, lo: int, hi: int, what: str = "") -> int:
    """An integer in [lo, hi], or one line saying what is allowed."""
    if value != value.to_integral_value() or not lo <= value <= hi:
        raise InputError(f"{show(text)} is not {what or 'a whole number'} in {lo}..{hi}", field=field,
                         allowed=[f"{lo}..{hi}"])
    return int(value)


def ceil_int(value: Decimal) -> int:
    """Rounded up, as Kubernetes rounds a quantity to whole bytes (`Quantity.Value()`)."""
    return math.ceil(value)


def quantity_bytes(value: object, field: str) -> int:
    """A memory quantity in whole bytes, more than zero."""
    result = ceil_int(parse_quantity(value, field))
    if result < 1:
        raise InputError(f"{show(value)} is no memory", field=field, allowed=["a positive quantity, e.g. 8Gi"])
    return result
