"""deploy/prometheus/ passes `promtool check config`: prometheus.yml as is, and scrape-configs.yaml inside a
config, its Kubernetes discovery swapped for static targets as tests/promserver.py does (Debian's Prometheus
has no Kubernetes SD); the relabelling is checked unchanged, and the e2e test scrapes through it."""
from __future__ import annotations

import subprocess

import yaml
from promserver import DEPLOY, JOBS, prometheus_binary, static_scrape_configs


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([prometheus_binary("promtool"), *args], capture_output=True, text=True, timeout=60)


def test_local_prometheus_yml_is_valid():
    done = promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_scrape_configs_are_valid(tmp_path):
    jobs = static_scrape_configs({job: ("localhost:1", "n") for job in JOBS})
    assert tuple(j["job_name"] for j in jobs) == JOBS
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    done = promtool("check", "config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
