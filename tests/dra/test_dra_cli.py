"""`fgpu-dra` refuses bad input in one line with exit code 2, before serving anything."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    return subprocess.run([sys.executable, "-m", "deviceplugin.dra.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**clean, **(env or {})})


@pytest.mark.parametrize(("config", "extra", "expect"), [
    ("version: v2\ngpus: []\n", [], "version"),
    ("version: v1\ngpus:\n  - model: Z9000\n", [], "gpus[0].model"),
    ("version: v1\ngpus:\n  - model: A100-80GB\n", [], "--kubeconfig"),
    ("version: v1\ngpus:\n  - model: A100-80GB\n", ["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, config, extra, expect):
    path = tmp_path / "node.yaml"
    path.write_text(config + f"tokenSecretFile: {tmp_path}/secret\n")
    proc = _run("--config", str(path), "--node-name", "n1", *extra)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fgpu-dra: error:") and expect in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_config_that_lost_a_prepared_device_is_refused(tmp_path):
    import json

    state = tmp_path / "state"
    state.mkdir()
    (state / "fgpu-dra-checkpoint.json").write_text(json.dumps({"version": 1, "claims": {"u1": {
        "namespace": "ns", "name": "c1", "uid": "u1", "cdiIDs": {"gpu": "fgpu.io/gpu=u1-gpu"},
        "devices": [{"request": "gpu", "device": "gpu-1-shared", "shareID": "s", "memory": 1, "smShare": 1}]}}}))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n")
    path = tmp_path / "node.yaml"
    path.write_text(f"version: v1\ngpus:\n  - model: A100-80GB\n    sharing: fractional\n"
                    f"fractional: {{resources: {{gpu: fgpu.io/vgpu}}}}\ntokenSecretFile: {tmp_path}/secret\n")
    proc = _run("--config", str(path), "--node-name", "n1", "--state-dir", str(state), "--kubeconfig", str(kubeconfig))
    assert proc.returncode == 2, proc.stderr
    assert "--config" in proc.stderr and "gpu-1-shared" in proc.stderr and "ns/c1" in proc.stderr
