"""Checks every exporter's scrape must pass (a module at the tests root, importable from every test folder):
`promtool check metrics` (Debian package prometheus, `make prometheus`), and a scrape's series read back with
no duplicate, no NaN and no negative value; plus the registry's families compared with the catalogue."""
from __future__ import annotations

import math
import os
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from fgpu_contracts.metrics import Metric

Series = tuple[str, tuple[tuple[str, str], ...]]


def promtool_check(text: str) -> None:
    """`promtool check metrics` passes on this exposition (skipped without promtool, unless CI requires it)."""
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("FGPU_REQUIRE_E2E") == "1":
            pytest.fail("promtool not found: run `make prometheus`")
        pytest.skip("promtool not found (make prometheus)")
    done = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"promtool check metrics:\n{done.stdout}{done.stderr}"


def series(text: str) -> dict[Series, float]:
    """Every sample of a text exposition by (name, sorted labels); fails on a duplicate, a NaN or a negative."""
    out: dict[Series, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            assert not math.isnan(s.value), f"NaN in {key}"
            assert s.value >= 0, f"negative {key} = {s.value}"
            out[key] = s.value
    return out


def value(scraped: dict[Series, float], name: str, **labels: str) -> float | None:
    return scraped.get((name, tuple(sorted(labels.items()))))


def matching(scraped: dict[Series, float], name: str, **labels: str) -> dict[Series, float]:
    """The series of `name` whose labels include `labels`."""
    return {k: v for k, v in scraped.items() if k[0] == name and labels.items() <= dict(k[1]).items()}


def catalogue_shape(metrics: dict[str, Metric]) -> dict[str, str]:
    return {name: m.type for name, m in metrics.items()}


def registry_shape(registry) -> dict[str, str]:
    """Family name (a counter's with `_total`, as the catalogue writes it) -> type, samples or not; `registry`
    is a prometheus_client registry or a text exposition."""
    return {f.name + ("_total" if f.type == "counter" else ""): f.type for f in _families(registry)}


def sample_labels(registry) -> dict[str, set[tuple[str, ...]]]:
    """Family (catalogue name) -> the label-name tuples its samples carry (a histogram's `le` left out);
    `registry` as in `registry_shape`."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for f in _families(registry):
        name = f.name + ("_total" if f.type == "counter" else "")
        out[name] = {tuple(k for k in s.labels if k != "le") for s in f.samples}
    return out


def _families(registry):
    """A registry's families, or a text's without the `_created` gauges prometheus_client writes beside each
    counter and histogram unless disabled (`fgpu operator` disables them; a registry holds them as samples)."""
    if not isinstance(registry, str):
        return registry.collect()
    return [f for f in text_string_to_metric_families(registry)
            if not (f.type == "gauge" and f.name.endswith("_created"))]


def prometheus_client_gauges(families, samples: dict[str, dict[tuple[str, ...], float]]) -> bytes:
    """The reference for fgpu's own gauge writer: the same gauges (families of name, help, label names) written
    by prometheus_client, one family object per gauge."""
    class Gauges:
        def collect(self):
            for name, help_text, labels in families:
                family = GaugeMetricFamily(name, help_text, labels=labels)
                for key, v in samples.get(name, {}).items():
                    family.add_metric(key, v)
                yield family

    registry = CollectorRegistry()
    registry.register(Gauges())
    return generate_latest(registry)
