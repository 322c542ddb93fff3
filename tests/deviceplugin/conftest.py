"""A stub kubelet: the Registration service on a temp kubelet.sock that checks what a plugin registers, dials
the plugin back, follows its ListAndWatch like the kubelet does, and lets tests drive Allocate & co. Plus a
fixture that runs `fgpu-device-plugin` as a separate process against it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from devcluster.stub_kubelet import StubKubelet

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin_dir():
    # unix socket paths are limited to 107 bytes: keep the directory short
    path = tempfile.mkdtemp(prefix="dp", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir):
    stub = StubKubelet(plugin_dir)
    stub.start()
    yield stub
    stub.stop()


SECRET = b"test-secret-0123456789abcdef-xyz"


@pytest.fixture
def secret_file(plugin_dir):
    path = os.path.join(plugin_dir, "secret")
    with open(path, "wb") as fh:
        fh.write(SECRET)
    return path


def write_config(plugin_dir: str, text: str, secret_file: str) -> str:
    path = os.path.join(plugin_dir, "node.yaml")
    with open(path, "w") as fh:
        fh.write(text + f"\ntokenSecretFile: {secret_file}\n")
    return path


class PluginProcess:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "deviceplugin.cli", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stdout.read() if self.proc.stdout else ""


@pytest.fixture
def run_plugin(plugin_dir, secret_file):
    """Start `fgpu-device-plugin` (a separate process) on a config text; stopped at teardown."""
    started: list[PluginProcess] = []

    def start(config_text: str, *extra: str, node: str = "node-1") -> PluginProcess:
        cfg = write_config(plugin_dir, config_text, secret_file)
        args = ["--config", cfg, "--node-name", node, "--device-plugin-path", plugin_dir, *extra]
        if "--kubeconfig" not in extra:
            args.append("--standalone")
        proc = PluginProcess(args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
