"""The chart's generated files stay in step with their sources: values.schema.json with simgpu's node config
model and GPU catalogue (charts/chartgen.py), the README's values table with values.yaml; every value in
values.yaml is documented and every documented value has a default there."""
from __future__ import annotations

import json
import subprocess
import sys

import yaml
from helmchart import CHART, ROOT


def test_schema_and_values_table_are_up_to_date():
    out = subprocess.run([sys.executable, "-m", "charts.chartgen", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_gpu_model_enum_is_the_catalogue():
    from simgpu.catalog import all_gpus, get_gpu

    schema = json.loads((CHART / "values.schema.json").read_text())
    enum = schema["$defs"]["GpuGroup"]["properties"]["model"]["enum"]
    assert set(enum) == {n for g in all_gpus() for n in (g.name, g.short_name, *g.aliases)}
    for name in enum:
        get_gpu(name)  # each one is a name simgpu knows


def _leaves(values, schema, prefix=""):
    """(path, schema) for every key of values.yaml, down to the schema's leaves."""
    for key, value in values.items():
        sub = schema.get("properties", {}).get(key)
        assert sub is not None, f"values.yaml has {prefix}{key}, which the schema does not describe"
        if isinstance(value, dict) and "properties" in sub:
            yield from _leaves(value, sub, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", sub


def test_every_value_is_described_and_in_the_readme_table():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    paths = list(_leaves(values, schema))
    assert len(paths) > 40
    for path, sub in paths:
        assert sub.get("description") or "$ref" in sub.get("items", {}), path
        assert f"| `{path}` |" in readme, f"{path} is not in the README's values table"
