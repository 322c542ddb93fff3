"""`simgpu token` (issue 14, part A: a newcomer can follow `simgpu daemon` -> `simgpu run` without a device
plugin): the token is the device plugin's kind (same Grant, same signing) and the daemon accepts it."""
from __future__ import annotations

import json

from test_daemon import Daemon, simgpu

from simgpu.token import load_or_create_secret, verify_token

CONFIG = "version: v1\ntokenSecretFile: {secret}\ngpus: [{{model: H100}}, {{model: A100-40GB, mig: {{layout: [3g.20gb]}}}}]\n"


def test_a_minted_token_opens_a_context_on_the_daemon(tmp_path):
    daemon = Daemon(tmp_path, CONFIG)
    try:
        minted = simgpu("token", "--config", str(daemon.config), "--device", "0", "--mem", "8g", "--sm-pct", "30")
        assert minted.returncode == 0, minted.stderr
        token = minted.stdout.strip()
        grant = verify_token(load_or_create_secret(daemon.secret_file), token)
        assert (grant.device_uuid, grant.mem_limit_bytes, grant.sm_limit_pct) == (daemon.gpus[0], 8 << 30, 30)
        run = simgpu("run", "--socket", daemon.socket, "--token", token, "--workload", "memory", "--iterations", "2",
                     "--json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout.splitlines()[-1])["iterations"] == 2
        mig = simgpu("token", "--config", str(daemon.config), "--device", "1:0", "--export")
        assert mig.returncode == 0 and mig.stdout.startswith("export FGPU_CONTEXT_TOKEN=")
        assert verify_token(daemon.secret, mig.stdout.strip().split("=", 1)[1]).device_uuid == daemon.migs[0]
    finally:
        daemon.stop()


def test_bad_device_and_quota_are_one_line(tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text(CONFIG.format(secret=tmp_path / "secret"))
    for argv, needle in ((["--device", "7"], "--device: no device '7' on node n (allowed: 0, 1, 1:0, its UUID)"),
                         (["--mem", "99g"], "--mem: 99g is 106300440576 bytes (allowed: 1..")):
        proc = simgpu("token", "--config", str(config), "--node-name", "n", *argv)
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
        assert needle in proc.stderr, proc.stderr
