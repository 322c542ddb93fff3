"""A real Prometheus server for tests (Debian package prometheus, `make prometheus`), scraping through the
shipped deploy/prometheus/scrape-configs.yaml. Debian builds Prometheus without Kubernetes service discovery,
so each job's kubernetes_sd_configs is swapped for a static target carrying the meta labels Kubernetes SD would
give the component's pod; the job's relabelling (keep, node) then runs unchanged."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"
JOBS = ("fgpu-operator", "fgpu-device-plugin", "fgpu-node-daemon")
_KEEP = ["__meta_kubernetes_pod_label_app_kubernetes_io_name",
         "__meta_kubernetes_pod_label_app_kubernetes_io_component", "__meta_kubernetes_pod_container_port_name"]


def prometheus_binary(name: str = "prometheus") -> str:
    """The Debian package's `prometheus` or `promtool`; skipped without it, unless CI requires it."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("FGPU_REQUIRE_E2E") == "1":
            pytest.fail(f"{name} not found: run `make prometheus`")
        pytest.skip(f"{name} not found (make prometheus)")
    return path


def static_scrape_configs(pods: dict[str, tuple[str, str]]) -> list[dict]:
    """scrape-configs.yaml with Kubernetes SD replaced by one static target per job: `pods` maps a job name to
    (host:port, the node its pod runs on); the target's meta labels are those its job's keep rule asks for."""
    jobs = yaml.safe_load((DEPLOY / "scrape-configs.yaml").read_text())
    for job in jobs:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}], job["job_name"]
        (keep,) = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        assert keep["source_labels"] == _KEEP, job["job_name"]
        address, node = pods[job["job_name"]]
        job["static_configs"] = [{"targets": [address], "labels": {
            **dict(zip(_KEEP, keep["regex"].split(";"), strict=True)),
            "__meta_kubernetes_pod_node_name": node,
            "__meta_kubernetes_pod_name": f"{job['job_name']}-0",
        }}]
    return jobs


@contextlib.contextmanager
def running_prometheus(workdir: Path, scrape_configs: list[dict], port: int,
                       interval: str = "1s") -> Iterator[str]:
    """`prometheus` on 127.0.0.1:port with its TSDB in workdir, scraping every `interval`; yields its URL once
    ready, and prints its log's tail when stopped."""
    binary = prometheus_binary()
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": interval, "evaluation_interval": interval},
                                      "scrape_configs": scrape_configs}))
    log = workdir / "prometheus.log"
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(log.read_text(errors="replace")[-2000:])
