"""`simgpu daemon` options under bad input (issue 14, part A): one line naming the option, exit code 2, and a
live daemon's socket is never taken over."""
from __future__ import annotations

import os
import socket
import stat

import pytest
from test_daemon import Daemon, simgpu

from simgpu.client import DaemonClient
from simgpu.daemon.server import _prepare_socket
from simgpu.errors import SimgpuError

CONFIG = "version: v1\ntokenSecretFile: {secret}\ngpus: [{{model: H100}}]\n"


def one_line(proc) -> str:
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip()


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(CONFIG.format(secret=tmp_path / "secret"))
    return str(path)


def test_a_second_daemon_refuses_the_live_socket_of_the_first(tmp_path):
    first = Daemon(tmp_path, CONFIG)
    try:
        err = one_line(simgpu("daemon", "--config", str(first.config), "--socket", first.socket))
        assert err == (f"simgpu daemon: error: --socket: {first.socket} is in use: a process (another simgpu "
                       "daemon?) answers on it (allowed: a path no live process listens on)")
        with DaemonClient(first.socket) as client:  # the first still owns its socket
            assert client.devices()
    finally:
        first.stop()


def test_a_stale_socket_is_replaced_and_other_files_are_left_alone(tmp_path):
    stale = str(tmp_path / "stale.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(stale)  # closed without unlinking: what a killed daemon leaves
    _prepare_socket(stale)
    assert not os.path.exists(stale)
    live = str(tmp_path / "live.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(live)
        s.listen()
        with pytest.raises(SimgpuError, match="is in use"):
            _prepare_socket(live)
        assert stat.S_ISSOCK(os.lstat(live).st_mode)
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    with pytest.raises(SimgpuError, match="exists and is not a socket"):
        _prepare_socket(str(plain))
    assert plain.read_text() == "keep me"


@pytest.mark.parametrize(("argv", "needle"), [
    (["--metrics-port", "99999"], "argument --metrics-port: '99999' is not allowed (allowed: an integer, "
                                  "0 <= N <= 65535; 0 picks any free port)"),
    (["--metrics-port", "-1"], "argument --metrics-port: '-1' is not allowed"),
    (["--metrics-interval", "nan"], "argument --metrics-interval: 'nan' is not allowed (allowed: a finite number, "
                                    "0 < N <= 3600)"),
    (["--metrics-interval", "0"], "argument --metrics-interval: '0' is not allowed"),
])
def test_numeric_options(tmp_path, config, argv, needle):
    err = one_line(simgpu("daemon", "--config", config, "--socket", str(tmp_path / "d.sock"), *argv))
    assert needle in err, err


@pytest.mark.parametrize("path", ["/tmp/" + "x" * 120 + ".sock", "/proc/self/fgpu.sock", "/sys/fgpu.sock"])
def test_socket_paths_the_kernel_cannot_serve(config, path):
    err = one_line(simgpu("daemon", "--config", config, "--socket", path))
    assert err.startswith(f"simgpu daemon: error: argument --socket: {path!r} is ")


def test_a_taken_metrics_port_is_one_line_and_leaves_no_socket(tmp_path, config):
    sock = tmp_path / "d.sock"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        err = one_line(simgpu("daemon", "--config", config, "--socket", str(sock),
                              "--metrics-port", str(taken.getsockname()[1])))
    assert err.startswith("simgpu daemon: error: --metrics-port: cannot serve metrics on port ")
    assert not sock.exists()


def test_a_socket_under_a_file_is_one_line(tmp_path, config):
    (tmp_path / "f").write_text("")
    err = one_line(simgpu("daemon", "--config", config, "--socket", str(tmp_path / "f" / "d.sock")))
    assert err.startswith("simgpu daemon: error: --socket: ")


@pytest.mark.parametrize(("secret", "what"), [("f/secret", "read"), ("/proc/fgpu-test/secret", "create")])
def test_a_bad_token_secret_path_names_tokenSecretFile_not_another_option(tmp_path, secret, what):
    (tmp_path / "f").write_text("")
    path = tmp_path / "node.yaml"
    path.write_text(CONFIG.format(secret=tmp_path / secret))
    err = one_line(simgpu("daemon", "--config", str(path), "--socket", str(tmp_path / "d.sock")))
    assert err.startswith(f"simgpu daemon: error: tokenSecretFile: cannot {what} token secret {tmp_path / secret}: ")
