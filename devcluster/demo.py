"""`make demo`: fgpu itself, end to end, on this machine, with no Docker.

    python -m devcluster.demo up   [--state DIR] [--pods NAME,...] [--workload-seconds S] [--no-report]
                                   [--no-simulate]
    python -m devcluster.demo down [--state DIR]

`up` tears down whatever an earlier demo left in the state directory, then starts the real control plane of
`make testbin` (etcd, kube-apiserver, kube-scheduler, KWOK), three KWOK nodes with emulated GPUs of different
models and sharing modes (the quick start's node pools, deploy/values/quickstart.yaml: 4x A100-80GB
fractional, 2x H100 with MIG, 2x L4 time-sliced), on each the simgpu node daemon and fgpu's device plugin
registered with a stub kubelet (devcluster.kubelets), fgpu's operator with its admission webhook, and a real
Prometheus scraping them all through deploy/prometheus/scrape-configs.yaml. It applies the example pods of
deploy/examples/pods, says what each asked for, where it went (`fgpu inspect`), why the one that cannot fit
is Pending and why the webhook denied the invalid one; runs each placed pod's own workload (`simgpu run`,
with the env its Allocate gave it) against its node's daemon for a few seconds so the metrics move; draws the
dashboards' key panels with `fgpu report`; and ends with a short `fgpu simulate` on the bundled trace. The
cluster stays up for poking at (kubeconfig and Prometheus URL printed) until `down` (`make demo-down`) stops
every process it started (pid files, checked against each process's start time) and removes its sockets
and data; logs and the report stay in the state directory. Ctrl-C or a failure tears down at once.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from devcluster import fgpu
from devcluster.kubelets import kwok_stages
from devcluster.kubeplane import (
    KWOK_STAGES,
    ComponentError,
    ControlPlane,
    TestbinError,
    find_testbin,
    free_port,
)
from devcluster.polling import WaitTimeout, wait_until
from devcluster.prometheus import start_prometheus, static_scrape_configs
from simgpu.token import load_or_create_secret

REPO = fgpu.REPO
STATE = REPO / "out" / "demo"
EXAMPLES = REPO / "deploy" / "examples" / "pods"
POOLS = REPO / "deploy" / "values" / "quickstart.yaml"
NAMESPACE = "default"
EXPECT = "examples.fgpu.io/expect"
POOL_LABEL = "fgpu.io/node-pool"
KEPT = ("logs", "report")  # what `down` leaves in the state directory


class DemoError(Exception):
    """The demo cannot go on; the message says why and what to do."""


# ---- pid files: what `down` stops ------------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, what tells
    a process we started from a later one that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def remember(state: Path, name: str, pid: int) -> None:
    pids = state / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    seq = len(list(pids.glob("*.pid")))
    (pids / f"{seq:02d}-{name}.pid").write_text(f"{pid} {_start_time(pid)}\n")


def _ours(pidfile: Path) -> int | None:
    """The pid in `pidfile` if that process is still the one we started."""
    try:
        pid, started = pidfile.read_text().split()
    except (OSError, ValueError):
        return None
    return int(pid) if _start_time(int(pid)) == started else None


TIERS = ("etcd", "kube-apiserver")  # stopped last, in this order reversed: the apiserver before etcd


def _stop_all(pidfiles: list[Path], grace: float = 15) -> None:
    """SIGTERM each one's process group at once, wait for them together, SIGKILL what is left."""
    for pidfile in pidfiles:
        pid = _ours(pidfile)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        alive = [p for p in pidfiles if _ours(p) is not None]
        if not alive:
            return
        for pidfile in alive:
            with contextlib.suppress(ChildProcessError, ProcessLookupError, TypeError):
                os.waitpid(_ours(pidfile), os.WNOHANG)  # our own child (Ctrl-C during `up`): reap it
        time.sleep(0.05)
    for pidfile in pidfiles:
        pid = _ours(pidfile)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def down(state: Path, say=print) -> list[str]:
    """Stop every process the demo in `state` started, each by its process group (each runs in a session of
    its own): fgpu's processes, Prometheus, KWOK and kube-scheduler together, then the apiserver, then etcd;
    remove sockets, data and pid files. Returns what is still alive afterwards (nothing, normally)."""
    pidfiles = sorted((state / "pids").glob("*.pid")) if (state / "pids").is_dir() else []
    running = [p for p in pidfiles if _ours(p) is not None]

    def named(p: Path) -> str:
        return p.stem.split("-", 1)[1]

    _stop_all([p for p in running if named(p) not in TIERS])
    for tier in reversed(TIERS):
        _stop_all([p for p in running if named(p) == tier])
    time.sleep(0.1)
    alive = [f"{p.stem} (pid {_ours(p)})" for p in pidfiles if _ours(p) is not None]
    if state.is_dir():
        for entry in state.iterdir():
            if entry.name not in KEPT:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
    if running:
        say(f"stopped {len(running)} processes; removed sockets and data under {state} (kept: logs, report)")
    return alive


# ---- the demo --------------------------------------------------------------------------------------------
def first_comment(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def describe(config: dict) -> str:
    """A node config in a few words: "2x L4, time-sliced (4 replicas each)"."""
    parts = []
    for g in config["gpus"]:
        mig = g.get("mig", {}).get("layout")
        parts.append(f"{g.get('count', 1)}x {g['model']}" + (f" MIG {'+'.join(mig) if isinstance(mig, list) else mig}"
                                                              if mig else ""))
    sharing = config.get("sharing") or {}
    if "timeSlicing" in sharing:
        replicas = sharing["timeSlicing"]["resources"][0]["replicas"]
        parts.append(f"time-sliced, {replicas} replicas per GPU")
    elif any(g.get("sharing") == "fractional" for g in config["gpus"]):
        parts.append(f"fractional, {config.get('fractional', {}).get('splitCount', 10)} slots per GPU")
    return ", ".join(parts)


def as_submitted(pod: dict) -> dict:
    """The manifest as kubectl would send it: resource quantities as strings (YAML reads `6` as a number)."""
    for container in pod["spec"]["containers"]:
        for kind in ("limits", "requests"):
            values = (container.get("resources") or {}).get(kind) or {}
            for key, value in values.items():
                values[key] = str(value)
    return pod


def api_message(e) -> str:
    try:
        return json.loads(e.body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(e)


class Demo:
    def __init__(self, state: Path, pods: list[str] | None, workload_s: float, report: bool, simulate: bool):
        self.state, self.pod_names, self.workload_s = state, pods, workload_s
        self.report, self.simulate = report, simulate
        self.logs = state / "logs"
        self.t0 = time.monotonic()
        self.plane: ControlPlane | None = None
        self.core = None
        self.facts: dict = {"state": str(state), "ports": [], "sockets": [], "pods": {}}

    def say(self, msg: str = "") -> None:
        print(f"[{time.monotonic() - self.t0:5.1f}s] {msg}" if msg else "", flush=True)

    def show(self, text: str, indent: str = "    ") -> None:
        for line in text.rstrip("\n").splitlines():
            print(indent + line, flush=True)

    def spawned(self, name: str, proc: subprocess.Popen) -> subprocess.Popen:
        remember(self.state, name, proc.pid)
        return proc

    def save(self) -> None:
        (self.state / "demo.json").write_text(json.dumps(self.facts, indent=1))

    # -- 1. the control plane ----------------------------------------------------------------------------
    def testbin(self) -> Path:
        """$FGPU_TESTBIN if set (the tests'), else hack/testbin.sh: instant when cached; on a cold machine a long
        build, whose progress is shown."""
        if os.environ.get("FGPU_TESTBIN"):
            try:
                return find_testbin(os.environ["FGPU_TESTBIN"])
            except TestbinError as e:
                raise DemoError(str(e)) from None
        proc = subprocess.Popen([str(REPO / "hack" / "testbin.sh")], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump():
            for line in proc.stderr:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        start, announced, ticked = time.monotonic(), False, time.monotonic()
        while True:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                line = ""
            if line is None:
                break
            waited = time.monotonic() - start
            if not announced and (waited > 3 or "building" in line):
                announced = True
                self.say("the control plane is not built yet: a one-time build of kube-apiserver, kube-scheduler, "
                         "kubelet, etcd, KWOK and helm from their Go modules, ~36 min on 2 busy cores "
                         f"(cached in {os.environ.get('FGPU_CACHE', '~/.cache/fgpu')}; later demos take under "
                         "3 minutes). Progress:")
            if line and announced:
                self.show(line)
            if announced and time.monotonic() - ticked > 60:
                ticked = time.monotonic()
                self.show(f"... still building, {waited / 60:.0f} min so far")
        out = proc.stdout.read().strip().splitlines()
        if proc.wait() != 0 or not out:
            raise DemoError("hack/testbin.sh could not build the control plane (its last lines are above)")
        try:
            return find_testbin(out[-1])
        except TestbinError as e:
            raise DemoError(str(e)) from None

    def control_plane(self) -> None:
        testbin = self.testbin()
        self.say(f"control plane binaries: {testbin}")
        self.plane = plane = ControlPlane(testbin, self.state / "plane", self.state / "data", detach=True)
        try:
            plane.start()
            plane.start_scheduler()  # the time-sliced replica is the default scheduler's: a plain extended resource
            plane.start_kwok(stages=kwok_stages(testbin / KWOK_STAGES, self.state / "kwok-stages.yaml"))
        finally:
            for comp in plane.components:
                if comp.proc is not None:
                    remember(self.state, comp.name, comp.proc.pid)
        shutil.copy(plane.kubeconfig, self.state / "kubeconfig")
        self.kubeconfig = self.state / "kubeconfig"
        from kubernetes import client

        self.api = plane.api()
        self.core = client.CoreV1Api(self.api)
        self.facts["kubeconfig"] = str(self.kubeconfig)
        self.facts["ports"] += [int(plane.server.rsplit(":", 1)[1])]
        self.say(f"control plane up: etcd, kube-apiserver {plane.server}, kube-scheduler, KWOK "
                 f"(KUBECONFIG={self.kubeconfig})")
        fgpu.install_crds(plane)

    # -- 2. GPU nodes ------------------------------------------------------------------------------------
    def nodes(self) -> None:
        from deviceplugin.resources import discover
        from simgpu.nodeconfig import parse_node_config

        pools = yaml.safe_load(POOLS.read_text())["nodePools"]
        self.node_dirs: dict[str, Path] = {}
        self.node_ports: dict[str, tuple[int, int]] = {}
        expected: dict[str, dict[str, int]] = {}
        daemons = []
        for pool in pools:
            name = pool["name"]
            self.plane.make_kwok_nodes([name], {}, labels={POOL_LABEL: name})
            d = self.state / "nodes" / name
            (d / "dp").mkdir(parents=True)
            (d / "run").mkdir()
            load_or_create_secret(d / "secret")  # the node's token secret, in the form the plugin and daemon read
            config = d / "node.yaml"
            config.write_text(yaml.safe_dump({**pool["config"], "tokenSecretFile": str(d / "secret")},
                                             sort_keys=False))
            cfg = parse_node_config(pool["config"])
            expected[name] = {r.name: len(r.slots) for r in discover(cfg, name)}
            daemon_port, plugin_port = free_port(), free_port()
            sock = d / "run" / "daemon.sock"
            daemons.append((self.spawned(f"daemon-{name}", fgpu.start_daemon(
                config, sock, name, self.logs / f"daemon-{name}.log", "--metrics-port", str(daemon_port),
                "--metrics-interval", "1", detach=True, wait=False)), sock, name))
            self.spawned(f"plugin-{name}", fgpu.start_plugin(
                config, name, d / "dp", self.kubeconfig, sock, self.logs / f"plugin-{name}.log",
                "--metrics-port", str(plugin_port), detach=True))
            self.node_dirs[name], self.node_ports[name] = d, (daemon_port, plugin_port)
            self.facts["ports"] += [daemon_port, plugin_port]
            self.facts["sockets"] += [str(sock), str(d / "dp" / "kubelet.sock")]
            self.say(f"node {name}: {describe(pool['config'])}; simgpu daemon + fgpu-device-plugin started")
        for proc, sock, name in daemons:
            fgpu.wait_daemon(proc, sock, name)
        argv = [sys.executable, "-m", "devcluster.kubelets", "--kubeconfig", str(self.kubeconfig),
                *[f"--node={n}={d / 'dp'}" for n, d in self.node_dirs.items()]]
        self.spawned("kubelets", fgpu.spawn(argv, self.logs / "kubelets.log", detach=True))

        def advertised():
            for name, resources in expected.items():
                node = self.core.read_node(name)
                have = node.status.allocatable or {}
                if any(have.get(r) != str(n) for r, n in resources.items()):
                    return False
                if "fgpu.io/gpu-inventory" not in (node.metadata.annotations or {}):
                    return False
            return True

        wait_until(advertised, 90, "every node's plugin to register its devices with the stub kubelet",
                   interval=0.5, show=lambda: {n: self.core.read_node(n).status.allocatable for n in expected})
        for name, resources in expected.items():
            self.say(f"node {name} advertises " + ", ".join(f"{r}: {n}" for r, n in resources.items()))

    # -- 3. the operator and Prometheus ---------------------------------------------------------------------
    def operator(self) -> None:
        webhook_port, metrics_port = free_port(), free_port()
        self.operator_port = metrics_port
        proc = fgpu.start_operator(self.kubeconfig, self.logs / "operator.log", "--webhook-port", str(webhook_port),
                                   "--webhook-host", "127.0.0.1", "--manage-webhook-config", "--trusted-user", "admin",
                                   "--metrics-port", str(metrics_port), policy="fgpu", detach=True)
        self.spawned("operator", proc)
        self.facts["ports"] += [webhook_port, metrics_port]
        fgpu.wait_webhook_live(self.core, NAMESPACE)
        self.say(f"fgpu operator up (policy fgpu): scheduler, mutating + validating webhook on :{webhook_port}")

    def prometheus(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise DemoError("prometheus not found: run `make prometheus` (Debian package prometheus)")
        jobs = static_scrape_configs({
            "fgpu-operator": (f"127.0.0.1:{self.operator_port}", "control-plane"),
            "fgpu-device-plugin": [(f"127.0.0.1:{p}", n) for n, (_, p) in self.node_ports.items()],
            "fgpu-node-daemon": [(f"127.0.0.1:{d}", n) for n, (d, _) in self.node_ports.items()]})
        port = free_port()
        workdir = self.state / "prometheus"
        workdir.mkdir()
        proc, self.prom_url = start_prometheus(binary, workdir, jobs, port, detach=True)
        self.spawned("prometheus", proc)
        self.facts["ports"].append(port)
        self.facts["prometheus"] = self.prom_url
        self.prom_started = time.time()
        from fgpu_operator.observe.prom import Prometheus

        prom = Prometheus(self.prom_url)
        targets = 1 + 2 * len(self.node_ports)
        wait_until(lambda: len(prom.query("up == 1")) == targets, 30, f"Prometheus to scrape all {targets} targets",
                   show=lambda: prom.query("up"))
        self.say(f"Prometheus {self.prom_url} scrapes the operator, {len(self.node_ports)} device plugins and "
                 f"{len(self.node_ports)} node daemons every second")

    # -- 4. the example pods ----------------------------------------------------------------------------
    def examples(self) -> None:
        from kubernetes.client.rest import ApiException

        files = sorted(EXAMPLES.glob("*.yaml"))
        if self.pod_names:
            files = [f for f in files if f.stem in self.pod_names]
        self.say(f"applying {len(files)} example pods from deploy/examples/pods (namespace {NAMESPACE}):")
        for path in files:
            pod = yaml.safe_load(path.read_text())
            name, expect = pod["metadata"]["name"], pod["metadata"]["annotations"][EXPECT]
            self.facts["pods"][name] = {"expect": expect}
            print(f"  {name}: {first_comment(path)}", flush=True)
            try:
                self.core.create_namespaced_pod(NAMESPACE, as_submitted(pod))
            except ApiException as e:
                outcome = f"denied by fgpu's webhook: {api_message(e)}"
                self.facts["pods"][name]["outcome"] = "denied"
                self.facts["pods"][name]["message"] = api_message(e)
            else:
                outcome = "admitted"
                self.facts["pods"][name]["outcome"] = "admitted"
            print(f"      -> {outcome}" + ("" if (outcome != "admitted") == (expect == "denied")
                                           else f"   (UNEXPECTED: the example says {expect})"), flush=True)
        self.save()

    def settle(self) -> None:
        """Wait until each admitted pod runs on a node or is parked as unschedulable."""
        admitted = [n for n, p in self.facts["pods"].items() if p["outcome"] == "admitted"]

        def states():
            out = {}
            for name in admitted:
                pod = self.core.read_namespaced_pod(name, NAMESPACE)
                conditions = {c.type: c for c in pod.status.conditions or []}
                scheduled = conditions.get("PodScheduled")
                if pod.status.phase == "Running":
                    out[name] = ("running", pod.spec.node_name)
                elif scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
                    out[name] = ("unschedulable", scheduled.message)
                else:
                    out[name] = ("waiting", pod.spec.node_name or pod.status.phase)
            return out

        seen = wait_until(lambda: (s := states()) and all(v[0] != "waiting" for v in s.values()) and s, 120,
                          "every admitted pod to run or be parked as unschedulable", interval=0.5, show=states)
        for name, (state, where) in seen.items():
            self.facts["pods"][name].update(state=state, node=where if state == "running" else None,
                                            reason=where if state == "unschedulable" else None)
        self.save()
        running = sum(s == "running" for s, _ in seen.values())
        self.say(f"{running} pods placed by fgpu (the time-sliced replica by kube-scheduler), their devices "
                 f"allocated by each node's plugin and marked Running by KWOK; "
                 f"{len(seen) - running} Pending")

    def inspect(self, *args: str) -> str:
        from fgpu_operator.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["inspect", "--kubeconfig", str(self.kubeconfig), *args])
        return out.getvalue()

    def where(self) -> None:
        self.say("where each pod went, as `fgpu inspect` shows it:")
        self.show(self.inspect())
        for name, pod in self.facts["pods"].items():
            if pod.get("state") == "unschedulable":
                self.say(f"why {name} is Pending (`fgpu inspect pod {name}`):")
                self.show(self.inspect("pod", name))
                events = self.core.list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={name}")
                for ev in events.items:
                    if ev.reason == "FailedScheduling":
                        self.show(f"event FailedScheduling: {ev.message}")
                        break
            if pod["outcome"] == "denied":
                self.say(f"{name} was refused by the webhook: {pod['message']}")

    # -- 5. workloads, report, simulate -----------------------------------------------------------------
    def workloads(self) -> None:
        records = [json.loads(p.read_text()) for d in self.node_dirs.values()
                   for p in sorted((d / "dp" / "pods").glob("*.json"))]
        records = [r for r in records if r["command"][:1] == ["simgpu"]]
        if not records or self.workload_s <= 0:
            return
        s = self.workload_s
        self.say(f"running each placed pod's own command for {s:.0f} s against its node's simgpu daemon, with the "
                 "env its Allocate returned (FGPU_CONTEXT_TOKEN, CUDA_DEVICE_MEMORY_LIMIT, ...):")
        procs = []
        for r in records:
            cmd = list(r["command"][1:])
            for flag, value in (("--duration", f"{s:g}"), ("--report-every", f"{max(s / 2, 1):g}")):
                if flag in cmd:
                    cmd[cmd.index(flag) + 1] = value
                else:
                    cmd += [flag, value]
            env = {**os.environ, **r["env"]}
            log = self.logs / f"workload-{r['pod']}.log"
            proc = fgpu.spawn([sys.executable, "-m", "simgpu.cli", *cmd], log, env=env)
            procs.append((r, proc))
        for r, proc in procs:
            try:
                proc.wait(s + 60)
            except subprocess.TimeoutExpired:
                fgpu.stop(proc)
            lines = fgpu.log_tail(proc).strip().splitlines()
            print(f"  {r['pod']} on {r['node']}: " + (lines[0].removeprefix("simgpu run: ") if lines else ""),
                  flush=True)
            if len(lines) > 1:
                print(f"      {lines[-1]}", flush=True)
        time.sleep(2)  # one more scrape of the last counters

    def draw(self) -> None:
        if not self.report:
            return
        out = self.state / "report"
        since = f"{int(time.time() - self.prom_started) + 5}s"
        self.say(f"fgpu report: drawing the dashboards' key panels from Prometheus (last {since})")
        done = subprocess.run([fgpu.FGPU, "report", "--prometheus", self.prom_url, "--out", str(out), "--since", since],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise DemoError(f"fgpu report failed:\n{done.stderr[-2000:]}")
        self.say("the dashboards' key panels, as PNGs:")
        self.show(done.stdout)

    def replay(self) -> None:
        if not self.simulate:
            return
        self.say("fgpu simulate: the same placement core replaying Alibaba's openb GPU trace (one seed, fgd vs fgpu):")
        done = subprocess.run([fgpu.FGPU, "simulate", "--policy", "fgd", "--policy", "fgpu", "--seed", "42"],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise DemoError(f"fgpu simulate failed:\n{done.stderr[-2000:]}")
        self.show(done.stdout)

    def run(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.say(f"fgpu demo: the product end to end on this machine, no Docker (state: {self.state}, "
                 f"logs: {self.logs})")
        self.control_plane()
        self.nodes()
        self.operator()
        self.prometheus()
        self.save()
        self.examples()
        self.settle()
        self.where()
        self.workloads()
        self.draw()
        self.replay()
        self.say(f"done. The cluster is still up: KUBECONFIG={self.kubeconfig} kubectl get pods -o wide; "
                 f"KUBECONFIG={self.kubeconfig} .venv/bin/fgpu inspect; Prometheus {self.prom_url}")
        self.say("tear it all down: make demo-down")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devcluster.demo", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="tear down any earlier demo, then run the demo; the cluster stays up")
    down_p = sub.add_parser("down", help="stop everything `up` started; remove its sockets and data")
    for q in (up, down_p):
        q.add_argument("--state", type=Path, default=STATE, help=f"state directory (default {STATE})")
    up.add_argument("--pods", help="comma-separated example pod names (default: every example)")
    up.add_argument("--workload-seconds", type=float, default=10.0, help="how long the pods' workloads run")
    up.add_argument("--no-report", action="store_true", help="skip `fgpu report`")
    up.add_argument("--no-simulate", action="store_true", help="skip `fgpu simulate`")
    args = p.parse_args(argv)
    state = args.state.resolve()
    if args.command == "down":
        alive = down(state)
        if alive:
            print(f"still running: {', '.join(alive)}", file=sys.stderr)
            return 1
        print(f"demo down: nothing of it is running (state {state})")
        return 0

    down(state, say=lambda m: print(f"an earlier demo was still up: {m}"))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where the shell ignores it (a background job)

    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    demo = Demo(state, args.pods.split(",") if args.pods else None, args.workload_seconds,
                not args.no_report, not args.no_simulate)
    try:
        demo.run()
    except KeyboardInterrupt:
        print("\ninterrupted: tearing the demo down", file=sys.stderr, flush=True)
        down(state, say=lambda m: print(m, file=sys.stderr))
        return 130
    except (DemoError, ComponentError, WaitTimeout) as e:
        print(f"\ndemo failed: {e}\nlogs: {demo.logs}; tearing the demo down", file=sys.stderr, flush=True)
        down(state, say=lambda m: print(m, file=sys.stderr))
        return 1
    except BaseException:
        down(state, say=lambda m: print(m, file=sys.stderr))
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
