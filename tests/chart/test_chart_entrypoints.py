"""Each entrypoint of the image starts and prints its help, with the very command and arguments the chart
renders (so a flag the chart passes that the program no longer takes fails here, not on a node), and the
Dockerfile installs every console script the chart and the examples call."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helmchart import ROOT, find, helm_available, render

pytestmark = pytest.mark.e2e  # renders with helm from the testbin

BIN = Path(sys.executable).parent
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def containers() -> list[tuple[str, dict]]:
    objects = render("-f", str(ROOT / "deploy" / "values" / "quickstart.yaml"))
    out = []
    for kind in ("Deployment", "DaemonSet"):
        for obj in find(objects, kind):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                out.append((f"{obj['metadata']['name']}/{c['name']}", c))
    return out


def run_help(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", **env}
    return subprocess.run([*argv, "--help"], capture_output=True, text=True, env=env, timeout=120)


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """The kubelet's $(VAR) expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in args]


# rendered at collection; without helm an empty set, which pytest reports as one skipped test (a failure in CI)
@pytest.mark.parametrize("name, container", containers() if helm_available() else [], ids=lambda x: x if isinstance(x, str) else "")
def test_rendered_command_starts_and_prints_help(name, container):
    env = {"NODE_NAME": "node-1", "POD_NAME": "fgpu-operator-abc"}
    program = container["command"][0] if container["command"][0] != "/bin/sh" else container["command"][2]
    out = run_help(container["command"] + expand(container["args"], env), env)
    assert out.returncode == 0, f"{name}: {out.stderr[-2000:]}"
    assert out.stdout.startswith("usage: "), out.stdout[:300]
    assert any(script in program for script in SCRIPTS), program


@pytest.mark.parametrize("argv", [["simgpu", "run"], ["simgpu", "daemon"], ["fgpu", "operator"],
                                  ["fgpu-device-plugin"]], ids=" ".join)
def test_each_entrypoint_prints_help(argv):
    out = run_help([str(BIN / argv[0]), *argv[1:]], {})
    assert out.returncode == 0 and out.stdout.startswith("usage: "), out.stderr[-2000:]


def example_pods() -> list[tuple[Path, dict]]:
    from devcluster.examples import load

    return [(e.path, e.manifest) for e in load(ROOT / "deploy" / "examples" / "pods")[1]]


def test_example_pods_run_the_workload_client_and_the_image_installs_every_script():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-\w+$", dockerfile, re.M), "base not pinned"
    assert "USER 65532:65532" in dockerfile
    for script in ("fgpu", "fgpu-device-plugin", "simgpu"):
        assert script in SCRIPTS
        assert f"/opt/fgpu/bin/{script} " in dockerfile  # the build checks each one starts
    for path, pod in example_pods():
        (c,) = pod["spec"]["containers"]
        assert c["command"][:2] == ["simgpu", "run"], path.name
        out = run_help([str(BIN / "simgpu"), *c["command"][1:]], {})
        assert out.returncode == 0, f"{path.name}: {out.stderr[-1000:]}"
