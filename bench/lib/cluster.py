"""The bench's cluster: the control plane's KWOK nodes, one scheduler process at a time (fgpu's operator,
kube-scheduler or the null binder), and one measured run of pods against it."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fgpu_operator.kube import load_kubeconfig

from lib.common import GPU, REPO, SLOTS_PER_GPU, log
from lib.load import delete_pods, fgpu_pod, kube_pod, run_pods, set_gpu_slots, summarize
from lib.metrics import Scraper, apiserver_writes, deletes_settled, operator_value, released, writes_per_pod
from lib.options import Setting, fractional, null_burn_ms
from lib.procs import proc_cpu, proc_memory, settle


class Bench:
    """The control plane, the nodes, and one scheduler process at a time."""

    def __init__(self, plane, workdir: Path, args: argparse.Namespace):
        self.plane, self.workdir, self.args = plane, workdir, args
        self.nodes: list[str] = []
        self.slots = 0  # the nvidia.com/gpu the nodes advertise now
        self.operator = None
        self.null: subprocess.Popen | None = None  # bench/helpers/null_binder.py, while it runs
        self.burner: subprocess.Popen | None = None  # bench/helpers/cpu_burner.py, with --cpu-burner
        self.webhook = False  # the running operator registered its admission webhook
        self.metrics_port = 0  # the running operator's --metrics-port
        self.runs: list[dict] = []
        self.serial = 0

    @functools.cached_property
    def creds(self):
        return load_kubeconfig(self.plane.kubeconfig)  # written by plane.start()

    def add_nodes(self, count: int) -> None:
        from inventories import fractional_inventory

        from fgpu_contracts import keys

        new = [f"bench-node-{i:04d}" for i in range(len(self.nodes), count)]
        if not new:
            return
        self.set_slots(SLOTS_PER_GPU * self.args.gpus_per_node)
        start = time.perf_counter()
        gpus = self.args.gpus_per_node
        self.plane.make_kwok_nodes(new, {GPU: self.slots},
                                   annotations=lambda name: {keys.INVENTORY: fractional_inventory(name, gpus)})
        self.nodes += new
        log(f"{len(new)} KWOK nodes Ready in {time.perf_counter() - start:.1f} s ({len(self.nodes)} in all)")

    def set_slots(self, slots: int) -> None:
        if slots != self.slots and self.nodes:
            asyncio.run(set_gpu_slots(self.creds, self.nodes, slots))
            log(f"nodes now advertise {GPU}: {slots}")
        self.slots = slots

    # -- schedulers
    def start(self, scheduler: str, setting: Setting | None, webhook: bool = False) -> int:
        """Start one scheduler (fgpu: the operator; setting None: its own defaults; `webhook`: serving its
        admission webhook too, registered with the apiserver); its pid."""
        if scheduler == "fgpu":
            from operator_proc import start_operator, wait_webhook_live

            self.set_slots(SLOTS_PER_GPU * self.args.gpus_per_node)
            from devcluster.kubeplane import free_port

            self.metrics_port = free_port()
            extra = [*(setting.fgpu_args() if setting else []), "--metrics-port", str(self.metrics_port),
                     *self.args.fgpu_args.split()]
            if webhook:
                extra += ["--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1", "--manage-webhook-config"]
            program = {"program": str(self.args.operator_python.with_name("fgpu"))} if self.args.operator_python else {}
            self.operator = start_operator(self.plane, self.workdir, *extra, policy=self.args.policy,
                                           log_name=f"operator-{self.serial}.log", **program)
            pid = self.operator.pid
            if webhook:
                from kubernetes import client

                self.webhook = True
                with self.plane.api() as api:
                    wait_webhook_live(client.CoreV1Api(api), "default")
        elif (burn := null_burn_ms(scheduler)) is not None:
            self.set_slots(SLOTS_PER_GPU * self.args.gpus_per_node)
            qps, burst = (setting.qps, setting.burst) if setting else (500.0, 1000)
            log_file = open(self.workdir / f"null-binder-{self.serial}.log", "w")  # noqa: SIM115 - the process keeps it
            self.null = subprocess.Popen([sys.executable, str(REPO / "bench" / "helpers" / "null_binder.py"), "--kubeconfig",
                                          str(self.plane.kubeconfig), "--qps", f"{qps:g}", "--burst", str(burst),
                                          "--burn-ms", f"{burn:g}"], stdout=log_file, stderr=subprocess.STDOUT)
            log_file.close()
            pid = self.null.pid
        else:
            self.set_slots(self.args.gpus_per_node)
            self.plane.start_scheduler(setting.qps, setting.burst, self.args.kube_nodes_to_score)
            pid = self.plane.pid("kube-scheduler")
        time.sleep(0.5)  # its watches are open
        return pid

    def stop(self) -> None:
        from operator_proc import stop

        if self.operator is not None:
            stop(self.operator)
            self.operator = None
        if self.webhook:  # a registered webhook nobody serves would refuse the next runs' pods
            from fgpu_operator.controller.handlers import MANAGED_WEBHOOKS
            from kubernetes import client

            with self.plane.api() as api:
                reg = client.AdmissionregistrationV1Api(api)
                for delete in (reg.delete_mutating_webhook_configuration, reg.delete_validating_webhook_configuration):
                    with contextlib.suppress(client.ApiException):
                        delete(MANAGED_WEBHOOKS)
            self.webhook = False
        if self.null is not None:
            self.null.terminate()
            self.null.wait(30)
            self.null = None
        self.plane.stop_component("kube-scheduler")

    # -- one run
    def run(self, scheduler: str, pid: int, setting_label: str, mode: str, pods: int, make_pod=None,
            rate: float | None = None) -> dict:
        """One run of `pods` pods; `rate` (pods/s offered) with mode "rate"."""
        self.serial += 1
        safe = "".join(c if c.isalnum() else "-" for c in scheduler.lower())  # null+2.5ms -> null-2-5ms
        namespace = self.plane.create_namespace(f"bench-{self.serial}-{safe}-{mode}")
        bodies = [(make_pod or (fgpu_pod if fractional(scheduler) else kube_pod))(i) for i in range(pods)]
        label = f"{scheduler} {setting_label} {mode}" + (f" {rate:g}/s" if rate else "")
        others = {name: self.plane.pid(name) for name in ("kube-apiserver", "etcd", "kwok")}
        pids = {"scheduler": pid, **others, "bench": os.getpid()}
        cpu0 = {k: proc_cpu(p, children=k == "scheduler") for k, p in pids.items()}
        burned0 = proc_cpu(self.burner.pid) if self.burner else 0.0
        writes0 = apiserver_writes(self.plane)
        dropped = "fgpu_scheduler_events_dropped_total"
        dropped0 = (operator_value(self.metrics_port, dropped) or 0.0) if scheduler == "fgpu" else 0.0
        log(f"run {self.serial}: {label}, {pods} pods on {len(self.nodes)} nodes")
        with self.scraper(scheduler) as scraper:
            trace = asyncio.run(run_pods(self.creds, namespace, bodies, rate, self.args.stall, label))
        cpu = {k: proc_cpu(p, children=k == "scheduler") - cpu0[k] for k, p in pids.items()}
        burned = proc_cpu(self.burner.pid) - burned0 if self.burner else 0.0
        hwm, rss = proc_memory(pid)
        row = summarize(trace, cpu)
        if self.burner:  # the share asked for, and the share of one core it took over the run's wall time
            row.update(cpu_burner_share=self.args.cpu_burner, cpu_burner_took=burned / row["wall"])
        row["writes_per_pod"] = writes_per_pod(writes0, apiserver_writes(self.plane), row["bound"])
        row.update(scheduler=scheduler, setting=setting_label, mode=mode, nodes=len(self.nodes), pods=pods,
                   rate_offered=rate, rss_peak_mb=hwm, rss_mb=rss, namespace=namespace, scrapes=len(scraper.took),
                   scrape_s=statistics.fmean(scraper.took) if scraper.took else 0.0, scrape_errors=scraper.errors)
        self.runs.append(row)
        log(f"  -> {row['bound']}/{pods} bound, {row['pods_per_s']:.1f} pods/s, p50 {row['p50']:.2f} s, "
            f"p99 {row['p99']:.2f} s, created {row['created_per_s']:.0f}/s, RSS {hwm:.0f} MB peak")
        start = time.perf_counter()
        # the bench's DELETE of each pod, and (KWOK's pod stages on) KWOK's own after it
        expect = apiserver_writes(self.plane).get("DELETE pods", 0.0) + len(bodies) * (
            1 if self.args.no_pod_stages else 2)
        asyncio.run(delete_pods(self.creds, namespace, [b["metadata"]["name"] for b in bodies]))
        deleted = time.perf_counter()
        if scheduler == "fgpu":  # its own word that every deletion was taken in: nothing allocated
            released(self.metrics_port)
            row["events_dropped"] = (operator_value(self.metrics_port, dropped) or 0.0) - dropped0
        busy = settle(pid)
        kwok, missing = deletes_settled(self.plane, expect)
        row.update(delete_s=deleted - start, busy_after_delete_s=busy, kwok_deletes_after_s=kwok,
                   kwok_deletes_missing=missing)
        log(f"  pods deleted in {deleted - start:.1f} s; the scheduler was busy {busy:.1f} s more taking that in, "
            f"KWOK's own pod deletions ended {kwok:.1f} s after that"
            + (f" ({missing:.0f} of them never came)" if missing else ""))
        return row


    def scraper(self, scheduler: str) -> Scraper:
        """What scrapes the running scheduler's /metrics during a run (nothing without --scrape-every)."""
        if scheduler == "fgpu":
            return Scraper(f"http://127.0.0.1:{self.metrics_port}/metrics", self.args.scrape_every)
        if null_burn_ms(scheduler) is not None:  # it serves no metrics
            return Scraper("", None)
        return Scraper(f"{self.plane.scheduler_url}/metrics", self.args.scrape_every)


def kwok_stages(plane, workdir: Path, args) -> Path | None:
    """KWOK's stage file for this run: testbin's upstream stages (None) unless --no-pod-stages drops the pod
    stages or --node-heartbeat lease swaps node-heartbeat for node-heartbeat-with-lease."""
    import yaml

    from devcluster.kubeplane import KWOK_LEASE_STAGE, KWOK_STAGES

    if not args.no_pod_stages and args.node_heartbeat == "status":
        return None
    stages = [d for d in yaml.safe_load_all((plane.testbin / KWOK_STAGES).read_text()) if d and d.get("kind") == "Stage"]
    if args.no_pod_stages:
        stages = [d for d in stages if d["metadata"]["name"].startswith("node-")]
    if args.node_heartbeat == "lease":
        lease = [d for d in yaml.safe_load_all((plane.testbin / KWOK_LEASE_STAGE).read_text()) if d]
        stages = [d for d in stages if d["metadata"]["name"] != "node-heartbeat"] + lease
    path = workdir / "kwok-stages.yaml"
    path.write_text(yaml.safe_dump_all(stages))
    return path
