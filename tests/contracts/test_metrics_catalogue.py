"""The metric catalogue is well formed and docs/metrics.md is its rendering. (Each exporter's own test checks
that what it serves matches its part of the catalogue.)"""
from pathlib import Path

import pytest

from fgpu_contracts.metrics import CATALOGUE, Metric, lookup, of
from fgpu_contracts.metrics.__main__ import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_docs_are_the_rendered_catalogue():
    assert DOC.read_text() == render(), "run: python -m fgpu_contracts.metrics > docs/metrics.md"


def test_names_are_unique_and_found():
    assert len({m.name for m in CATALOGUE}) == len(CATALOGUE)
    for m in CATALOGUE:
        assert lookup(m.name) is m and of(m.component)[m.name] is m
    with pytest.raises(KeyError, match="not in the catalogue"):
        lookup("nope")


@pytest.mark.parametrize("bad", [dict(name="x", type="counter"), dict(name="x_total", type="histogram"),
                                 dict(name="x", type="gauge", buckets=(1.0,)), dict(name="9x", type="gauge")])
def test_malformed_entries_are_refused(bad):
    with pytest.raises(ValueError):
        Metric(component="operator", help="h", **bad)
