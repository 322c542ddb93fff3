"""Test modules have unique file names: pytest imports them by base name (rootdir-relative, no packages), so a
second `test_x.py` in another folder stops the whole collection ("import file mismatch")."""
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_name():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
