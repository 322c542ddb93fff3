"""The image carries only what the operator, the device plugin, the node daemon and the workload client import; the
commands that plan and report say, in one line, which extra to install when theirs is missing. Each case runs in
a child process where the optional modules cannot be imported, as in an install without the extras."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fgpu_contracts.extras import EXTRA_OF_MODULE

ROOT = Path(__file__).resolve().parents[1]

#: Run `main(argv)` of a command line with the given top-level modules unimportable; print its exit code.
BLOCKED = """
import json, sys
blocked, entry, argv = json.loads(sys.argv[1])
for name in blocked:
    sys.modules[name] = None  # `import name` now raises ModuleNotFoundError, as when it is not installed
module, _, func = entry.partition(":")
code = getattr(__import__(module, fromlist=[func]), func)(argv)
print("exit", code)
"""


def run_without(blocked, entry: str, argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED, json.dumps([list(blocked), entry, argv])], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_the_table_is_pyprojects_extras():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(extra):
        return {r.split(">")[0].split("=")[0].split("[")[0].strip().replace("-", "_") for r in extras[extra]}

    assert {(m, e) for m, es in EXTRA_OF_MODULE.items() for e in es} == \
        {(m, e) for e in ("plan", "report") for m in names(e)}
    assert "fgpu[plan,report]" in extras["test"]  # the suite runs every command


@pytest.mark.parametrize("blocked, entry, argv, line", [
    (["scipy"], "fgpu_operator.cli:main", ["simulate", "--seed", "1"],
     "fgpu simulate needs the 'plan' extra: pip install 'fgpu[plan]'"),
    (["matplotlib"], "fgpu_operator.cli:main", ["simulate", "--seed", "1", "--plot", "{tmp}/a.png"],
     "fgpu simulate needs the 'plan' extra: pip install 'fgpu[plan]'"),
    (["grafana_foundation_sdk"], "fgpu_operator.cli:main", ["dashboards", "--out", "{tmp}"],
     "fgpu dashboards needs the 'report' extra: pip install 'fgpu[report]'"),
    (["matplotlib"], "fgpu_operator.cli:main", ["report", "--prometheus", "http://127.0.0.1:9", "--out", "{tmp}"],
     "fgpu report needs the 'report' extra: pip install 'fgpu[report]'"),
    (["scipy"], "simgpu.cli:main", ["calibrate", "--from-measurements", "{tmp}/m.json", "--out", "{tmp}/p.yaml"],
     "simgpu calibrate needs the 'plan' extra: pip install 'fgpu[plan]'"),
], ids=["simulate", "simulate-plot", "dashboards", "report", "calibrate"])
def test_a_missing_extra_is_one_line_naming_it(tmp_path, blocked, entry, argv, line):
    done = run_without(blocked, entry, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert (done.stderr, done.stdout) == (line + "\n", "exit 1\n")
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_the_images_commands_need_no_extra():
    """What the image runs (the Dockerfile's smoke test and the chart's commands) with every optional module
    missing: the operator, the webhook, the device plugin, the node daemon and the workload client load."""
    optional = list(EXTRA_OF_MODULE)
    loads = ("import fgpu_operator.controller.handlers, fgpu_operator.controller.webhook, deviceplugin.cli, "
             "simgpu.daemon.server, simgpu.commands.run")
    done = subprocess.run([sys.executable, "-c", f"import sys\nfor m in {optional!r}: sys.modules[m] = None\n{loads}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for entry, argv in (("fgpu_operator.cli:main", ["operator", "--help"]), ("deviceplugin.cli:main", ["--help"]),
                        ("simgpu.cli:main", ["daemon", "--help"]), ("simgpu.cli:main", ["run", "--help"])):
        done = run_without(optional, entry, argv)
        assert "usage:" in done.stdout and done.stderr == "", (entry, argv, done.stderr)


def test_a_broken_import_of_fgpu_itself_is_not_blamed_on_an_extra(tmp_path):
    """Only the optional modules map to an extra; any other missing module is a bug and shows as one."""
    done = run_without(["fgpu_operator.sim.runner"], "fgpu_operator.cli:main", ["simulate", "--seed", "1"])
    assert "ModuleNotFoundError" in done.stderr and "extra" not in done.stderr
