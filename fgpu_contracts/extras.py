"""The optional parts of fgpu (pyproject's extras) and the one line a command says when its extra is missing.

The image carries what the operator, the device plugin, the node daemon and the workload client import; planning
and reporting pull in scipy, matplotlib, rich and the Grafana SDK, which only `fgpu simulate`, `fgpu report`,
`fgpu dashboards`, `simgpu calibrate` and the benches use. tests/test_extras.py checks this table against
pyproject.toml.
"""
from __future__ import annotations

#: Top-level module -> the extras that install it (the first is the one to name when a command names none).
EXTRA_OF_MODULE = {
    "scipy": ("plan",),
    "rich": ("plan",),
    "matplotlib": ("plan", "report"),
    "grafana_foundation_sdk": ("report",),
}


def missing_extra(prog: str, error: ModuleNotFoundError, extra: str | None = None) -> str | None:
    """The line for `prog` (e.g. "fgpu simulate") that could not import an optional module, naming the extra
    that brings it (`extra`, the command's own, when that extra has the module); None for any other import
    failure, which is a bug to show as is."""
    top = (error.name or "").partition(".")[0]
    extras = EXTRA_OF_MODULE.get(top)
    if extras is None:
        return None
    name = extra if extra in extras else extras[0]
    return f"{prog} needs the '{name}' extra: pip install 'fgpu[{name}]'"


def need(*modules: str) -> None:
    """Fail now, before minutes of work, if an optional module is not installed (`run_command` turns the
    error into the line naming its extra)."""
    from importlib.util import find_spec

    for module in modules:
        if find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
