"""The dashboards as committed: deploy/grafana/*.json is exactly a fresh render of operator/observe/boards.py
through grafana-foundation-sdk (so the two never drift), reads back through the SDK's own Dashboard model, and
every query uses only metric names and labels the catalogue (fgpu_contracts/metrics) gives, or that the scrape
config adds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fgpu_operator.cli import main
from fgpu_operator.observe import grafana, promql
from fgpu_operator.observe.boards import BOARDS
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from fgpu_contracts.metrics import CATALOGUE

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "deploy" / "grafana"
BUILTIN = {"__rate_interval"}
# labels every scraped series carries, and those the scrape config adds per component (a job's
# relabel target_label, deploy/prometheus/scrape-configs.yaml)
SCRAPE_LABELS = {"job", "instance"}
JOBS = {"fgpu-operator": "operator", "fgpu-device-plugin": "deviceplugin", "fgpu-node-daemon": "daemon"}


def _added_labels() -> dict[str, set[str]]:
    jobs = yaml.safe_load((REPO / "deploy" / "prometheus" / "scrape-configs.yaml").read_text())
    return {JOBS[j["job_name"]]: {r["target_label"] for r in j.get("relabel_configs", ()) if "target_label" in r}
            for j in jobs}


def _labels_of() -> dict[str, set[str]]:
    """Metric name as a query may write it (a histogram's _bucket/_sum/_count) -> labels it may carry."""
    added = _added_labels()
    out = {}
    for m in CATALOGUE:
        labels = set(m.labels) | SCRAPE_LABELS | added[m.component]
        if m.type == "histogram":
            for suffix in promql.HISTOGRAM_SUFFIXES:
                out[m.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
        else:
            out[m.name] = labels
    return out


def _queries():
    for board in BOARDS:
        for panel in board.panels:
            for target in panel.targets:
                yield board, panel, target.expr
        for v in board.variables:
            yield board, None, promql.label_values_query(v.query)[0]


@pytest.mark.parametrize("board", BOARDS, ids=[b.uid for b in BOARDS])
def test_committed_json_is_a_fresh_render(board):
    path = COMMITTED / f"{board.uid}.json"
    assert path.exists(), f"{path} missing: run `fgpu dashboards --out deploy/grafana`"
    assert path.read_text() == grafana.render(board), f"{path} is stale: run `fgpu dashboards --out deploy/grafana`"


def test_no_other_dashboard_is_committed():
    assert {p.name for p in COMMITTED.glob("*.json")} == {f"{b.uid}.json" for b in BOARDS}


@pytest.mark.parametrize("board", BOARDS, ids=[b.uid for b in BOARDS])
def test_json_reads_back_through_the_sdk_model_with_unique_ids_and_datasource_refs(board):
    data = json.loads((COMMITTED / f"{board.uid}.json").read_text())
    again = json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))
    assert again == data  # nothing the SDK's schema model does not know, nothing lost
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    refs = [p["datasource"] for p in data["panels"] if p["type"] != "row"]
    refs += [t["datasource"] for p in data["panels"] for t in p.get("targets", ())]
    refs += [v["datasource"] for v in variables.values() if v["type"] == "query"]
    assert refs and all(r == {"type": "prometheus", "uid": "${datasource}"} for r in refs)
    assert {"node", "gpu", "namespace"} <= set(variables)
    for v in variables.values():
        if v["type"] == "query":
            assert v["multi"] and v["includeAll"] and v["allValue"] == ".*"
    # every $variable a query or variable uses is defined (or Grafana's own)
    used = {n for p in data["panels"] for t in p.get("targets", ()) for n in promql.variables(t["expr"])}
    used |= {n for v in variables.values() if v["type"] == "query" for n in promql.variables(v["query"]["query"])}
    assert used <= set(variables) | BUILTIN
    rows = [p for p in data["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == [r.title for r in board.rows] and not any(r["panels"] for r in rows)
    assert len(data["panels"]) == len(board.rows) + len(board.panels)


def test_every_query_uses_catalogue_names_and_labels():
    labels_of = _labels_of()
    checked = 0
    for board, panel, expr in _queries():
        where = f"{board.uid} / {panel.title if panel else 'variables'}: {expr}"
        names = promql.metric_names(expr)
        assert names, where
        unknown = names - set(labels_of)
        assert not unknown, f"not in the catalogue: {unknown} in {where}"
        for metric, label, _, _ in promql.matchers(expr):
            assert label in labels_of[metric], f"{metric} has no label {label!r} in {where}"
        allowed = set().union(*(labels_of[n] for n in names))
        for grouping in promql.groupings(expr):
            assert grouping <= allowed, f"grouping by {grouping - allowed} in {where}"
        checked += 1
    assert checked >= 50


def test_every_variable_query_names_a_catalogued_label():
    labels_of = _labels_of()
    for board in BOARDS:
        for v in board.variables:
            selector, label = promql.label_values_query(v.query)
            (metric,) = promql.metric_names(selector)
            assert label in labels_of[metric], v


def test_every_board_has_key_panels_and_titles_are_unique():
    for board in BOARDS:
        titles = [p.title for p in board.panels]
        assert len(titles) == len(set(titles)), board.uid
        assert 2 <= len(board.key_panels) <= 8, board.uid


def test_fgpu_dashboards_writes_what_is_committed(tmp_path, capsys):
    assert main(["dashboards", "--out", str(tmp_path / "g")]) == 0
    for board in BOARDS:
        assert (tmp_path / "g" / f"{board.uid}.json").read_text() == (COMMITTED / f"{board.uid}.json").read_text()
    assert len(capsys.readouterr().out.splitlines()) == len(BOARDS)
