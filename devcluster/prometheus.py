"""A real Prometheus server (Debian package prometheus, `make prometheus`) scraping fgpu's components through
the shipped deploy/prometheus/scrape-configs.yaml. Debian builds Prometheus without Kubernetes service
discovery, so each job's kubernetes_sd_configs is swapped for a static target carrying the meta labels
Kubernetes SD would give the component's pod; the job's relabelling (keep, node) then runs unchanged."""
from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from devcluster.fgpu import REPO, log_tail, spawn, stop
from devcluster.kubeplane import ComponentError

DEPLOY = REPO / "deploy" / "prometheus"
JOBS = ("fgpu-operator", "fgpu-device-plugin", "fgpu-node-daemon")
_KEEP = ["__meta_kubernetes_pod_label_app_kubernetes_io_name",
         "__meta_kubernetes_pod_label_app_kubernetes_io_component", "__meta_kubernetes_pod_container_port_name"]


def static_scrape_configs(pods: dict[str, list[tuple[str, str]] | tuple[str, str]]) -> list[dict]:
    """scrape-configs.yaml with Kubernetes SD replaced by static targets: `pods` maps a job name to (host:port,
    the node its pod runs on), or to a list of them (one per node); each target's meta labels are those its
    job's keep rule asks for."""
    jobs = yaml.safe_load((DEPLOY / "scrape-configs.yaml").read_text())
    for job in jobs:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}], job["job_name"]
        (keep,) = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        assert keep["source_labels"] == _KEEP, job["job_name"]
        targets = pods[job["job_name"]]
        job["static_configs"] = [{"targets": [address], "labels": {
            **dict(zip(_KEEP, keep["regex"].split(";"), strict=True)),
            "__meta_kubernetes_pod_node_name": node,
            "__meta_kubernetes_pod_name": f"{job['job_name']}-{node}" if isinstance(targets, list)
            else f"{job['job_name']}-0",
        }} for address, node in (targets if isinstance(targets, list) else [targets])]
    return jobs


def pod_scrape_configs(pods: list[dict]) -> list[dict]:
    """scrape-configs.yaml for pods that run in a cluster: Kubernetes SD (which Debian's build lacks) replaced
    by what it would find, each pod's IP and the port of each of its containers, with the meta labels SD gives
    them (the pod's labels, its name and node, the port's name). The jobs' own relabelling then keeps and
    labels the targets unchanged, exactly as in a cluster whose Prometheus has SD."""
    jobs = yaml.safe_load((DEPLOY / "scrape-configs.yaml").read_text())
    for job in jobs:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}], job["job_name"]
        job["static_configs"] = []
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip:
                continue
            meta = {f"__meta_kubernetes_pod_label_{_label_name(k)}": v
                    for k, v in (pod["metadata"].get("labels") or {}).items()}
            meta.update({"__meta_kubernetes_pod_name": pod["metadata"]["name"],
                         "__meta_kubernetes_namespace": pod["metadata"]["namespace"],
                         "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", "")})
            for container in pod["spec"]["containers"]:
                for port in container.get("ports") or []:
                    job["static_configs"].append({"targets": [f"{ip}:{port['containerPort']}"], "labels": {
                        **meta, "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                        "__meta_kubernetes_pod_container_name": container["name"]}})
    return jobs


def _label_name(key: str) -> str:
    """A Kubernetes label key as Kubernetes SD spells it in a meta label: every invalid character an '_'."""
    return "".join(c if c.isalnum() else "_" for c in key)


def start_prometheus(binary: str, workdir: Path, scrape_configs: list[dict], port: int, interval: str = "1s",
                     detach: bool = False, timeout: float = 30) -> tuple[subprocess.Popen, str]:
    """`prometheus` on 127.0.0.1:port with its config, log and TSDB in workdir, scraping every `interval`;
    returns (process, URL) once it is ready, else raises ComponentError with its log."""
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": interval, "evaluation_interval": interval},
                                      "scrape_configs": scrape_configs}))
    proc = spawn([binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], workdir / "prometheus.log",
                 detach=detach)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise ComponentError(f"prometheus did not start:\n{log_tail(proc)}")
        time.sleep(0.2)
