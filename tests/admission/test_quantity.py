"""Kubernetes quantities and plain numbers, exactly as apimachinery's grammar has them, and nothing else."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_number, parse_quantity, quantity_bytes

QUANTITIES = {
    "8Gi": 8 << 30, "8192Mi": 8 << 30, "1Ki": 1024, "2Ti": 2 << 40, "1Ei": 1 << 60, "1.5Gi": 3 << 29,
    "8G": 8 * 10**9, "1k": 1000, "1M": 10**6, "1T": 10**12, "1P": 10**15, "1E": 10**18,
    "500m": Decimal("0.5"), "250u": Decimal("0.00025"), "3n": Decimal("3e-9"),
    "3e3": 3000, "3E3": 3000, "1e-3": Decimal("0.001"), "+2": 2, ".5": Decimal("0.5"), "5.": 5, " 7 ": 7,
    "0": 0, 12: 12, 0.25: Decimal("0.25"),
}


@pytest.mark.parametrize("text", list(QUANTITIES), ids=str)
def test_quantity_grammar(text):
    assert parse_quantity(text, "f") == QUANTITIES[text]


@pytest.mark.parametrize("text", ["-1", "-8Gi", "nan", "NaN", "inf", "Infinity", "1e", "1K", "1gi", "1 Gi",
                                  "1e1.5", "0x10", "١", "", "Gi", "1..2", "1e99", "1e-99", "9" * 65, True, None,
                                  float("nan"), float("inf")], ids=repr)
def test_what_is_not_a_quantity(text):
    with pytest.raises(InputError) as err:
        parse_quantity(text, "f")
    assert err.value.message.startswith("f: ")
    assert "\n" not in err.value.message


@pytest.mark.parametrize("text,value", [("0.5", Decimal("0.5")), ("2000", 2000), ("5e-1", Decimal("0.5")),
                                        ("1E2", 100)])
def test_plain_numbers(text, value):
    assert parse_number(text, "f") == value


@pytest.mark.parametrize("text", ["2Gi", "500m", "1k", "-1", "nan"])
def test_plain_numbers_take_no_unit(text):
    with pytest.raises(InputError):
        parse_number(text, "f")


def test_memory_rounds_up_to_whole_bytes_and_is_positive():
    assert quantity_bytes("1500m", "f") == 2
    with pytest.raises(InputError, match=r"^f: '0Mi' is no memory"):
        quantity_bytes("0Mi", "f")


@settings(max_examples=300, derandomize=True)
@given(st.integers(0, 2**62), st.sampled_from([("", 0), ("Ki", 10), ("Mi", 20), ("Gi", 30)]))
def test_binary_suffixes_agree_with_shifts(n, suffix):
    text, shift = suffix
    if n << shift <= 2**63 - 1:
        assert parse_quantity(f"{n}{text}", "f") == n << shift
