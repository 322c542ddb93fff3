"""Boards to Grafana dashboard JSON through grafana-foundation-sdk, Grafana's own typed builders, so the
JSON has the shape Grafana's schema gives it rather than one written by hand. `fgpu dashboards` writes it;
the JSON committed in deploy/grafana/ is what `render` returns (tests/observe checks they never drift).

Every panel and variable reads the `datasource` variable (any Prometheus), and rows are laid out as Grafana
saves an expanded row: the row panel, then its panels at the top level."""
from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from .model import Board, Panel, Variable

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
_REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _variable(v: Variable) -> gd.QueryVariable:
    return (gd.QueryVariable(v.name).label(v.label).description(v.description)
            .datasource(DATASOURCE).query({"query": v.query, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"])))


def _panel(p: Panel, panel_id: int):
    builder = (timeseries.Panel() if p.kind == "timeseries" else stat.Panel())
    builder = (builder.id(panel_id).title(p.title).datasource(DATASOURCE).span(p.width).height(p.height)
               .unit(p.unit or "none"))
    if p.description:
        builder = builder.description(p.description)
    if p.min is not None:
        builder = builder.min(p.min)
    if p.max is not None:
        builder = builder.max(p.max)
    for ref, target in zip(_REF_IDS, p.targets, strict=False):
        builder = builder.with_target(prometheus.Dataquery().ref_id(ref).datasource(DATASOURCE).expr(target.expr)
                                      .legend_format(target.legend or "__auto").range())
    return builder


def build(board: Board) -> dm.Dashboard:
    """The board as the SDK's Dashboard model; panel ids count from 1 over rows and panels alike."""
    if any(len(p.targets) > len(_REF_IDS) for p in board.panels):
        raise ValueError(f"{board.uid}: a panel has more than {len(_REF_IDS)} queries")
    dash = (gd.Dashboard(board.title).uid(board.uid).description(board.description).tags(list(board.tags))
            .editable().time("now-1h", "now").refresh("30s").timezone("browser")
            .tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus")))
    for v in board.variables:
        dash = dash.with_variable(_variable(v))
    panel_id = 0
    for row in board.rows:
        panel_id += 1
        dash = dash.with_row(gd.Row(row.title).id(panel_id))
        for p in row.panels:
            panel_id += 1
            dash = dash.with_panel(_panel(p, panel_id))
    return dash.build()


def render(board: Board) -> str:
    """Grafana's dashboard JSON for `board`, stable (sorted keys, two-space indent, final newline)."""
    return json.dumps(build(board), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


def write(boards, out: Path) -> list[Path]:
    """Write each board to out/<uid>.json (creating `out`); the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for board in boards:
        path = out / f"{board.uid}.json"
        path.write_text(render(board))
        paths.append(path)
    return paths
