"""deploy/prometheus/ passes `promtool check config`: prometheus.yml as is, and scrape-configs.yaml inside a
config. Debian's Prometheus is built without Kubernetes service discovery, so there each job's
kubernetes_sd_configs is swapped for a static target carrying the meta labels Kubernetes SD would give (the
rest of the job, relabelling included, is checked unchanged; the e2e test scrapes through it)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("FGPU_REQUIRE_E2E") == "1":
            pytest.fail("promtool not found: run `make prometheus`")
        pytest.skip("promtool not found (make prometheus)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def static_scrape_configs(pods: dict[str, tuple[str, str]]) -> list[dict]:
    """scrape-configs.yaml with Kubernetes SD replaced by one static target per job: `pods` maps a job's
    component label (operator, device-plugin, node-daemon) to (host:port, node name)."""
    jobs = yaml.safe_load((DEPLOY / "scrape-configs.yaml").read_text())
    for job in jobs:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}], job["job_name"]
        component = job["job_name"].removeprefix("fgpu-")
        address, node = pods[component]
        job["static_configs"] = [{"targets": [address], "labels": {
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": "fgpu",
            "__meta_kubernetes_pod_label_app_kubernetes_io_component": component,
            "__meta_kubernetes_pod_container_port_name": "metrics",
            "__meta_kubernetes_pod_node_name": node,
            "__meta_kubernetes_pod_name": f"fgpu-{component}-x",
        }}]
    return jobs


def test_local_prometheus_yml_is_valid():
    done = promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_scrape_configs_are_valid(tmp_path):
    jobs = static_scrape_configs({c: ("localhost:1", "n") for c in ("operator", "device-plugin", "node-daemon")})
    assert [j["job_name"] for j in jobs] == ["fgpu-operator", "fgpu-device-plugin", "fgpu-node-daemon"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    done = promtool("check", "config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
