"""`make demo`: fgpu end to end on this machine, installed as a user installs it: with its Helm chart.

    python -m devcluster.demo up   [--state DIR] [--pods NAME,...] [--workload-seconds S] [--no-report]
                                   [--no-simulate] [--kwok-nodes N]
    python -m devcluster.demo down [--state DIR]

`up` tears down whatever an earlier demo left, then brings up `make cluster-up`'s cluster (devcluster.cluster:
the control plane, kube-proxy, one real node with containerd and a kubelet, KWOK nodes; the fgpu image built
by buildah from the Dockerfile and imported into the node) and runs `helm install` of charts/fgpu with
deploy/values/devcluster.yaml, the same install and checks as kind and minikube get (devcluster.install): the
operator's two replicas, the webhook behind its Service, the device plugin and simgpu daemon DaemonSet, all as
the chart's pods on the real kubelet. It applies the example pods of deploy/examples/pods (each a different
request form), says what each asked for, where it went (`fgpu inspect`), why the one that cannot fit is
Pending and why the webhook denied the invalid one; reads each placed pod's own workload output (its container
runs `simgpu run` against the node's daemon pod); places a burst of best-effort pods on the KWOK nodes (which
carry GPU inventories: the scheduler's view at scale); has Debian's Prometheus scrape every chart pod and draws
the dashboards' key panels with `fgpu report`; and ends with a short `fgpu simulate` on the bundled trace. The
cluster stays up for poking at (kubeconfig and Prometheus URL printed) until `down` (`make demo-down`).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from devcluster import cluster, examples, fgpu, install, pidfiles, qos
from devcluster.kubeplane import ComponentError, free_port
from devcluster.polling import WaitTimeout, wait_until
from devcluster.prometheus import pod_scrape_configs, start_prometheus

REPO = fgpu.REPO
STATE = REPO / "out" / "demo"
EXAMPLES = REPO / "deploy" / "examples" / "pods"
VALUES = REPO / "deploy" / "values" / "devcluster.yaml"
NAMESPACE = "default"
SETTLE_S = 180  # how long a round of examples may take to end as they say
KEPT = ("logs", "report")  # what `down` leaves in the state directory
# the KWOK nodes' GPUs (the scheduler's view at scale: KWOK only pretends to run their pods)
KWOK_POOL = {"version": "v1", "gpus": [{"model": "A100-80GB", "count": 4, "sharing": "fractional"}],
             "fractional": {"splitCount": 10}}
BURST = 24  # best-effort 0.25-GPU pods placed on the KWOK nodes


class DemoError(Exception):
    """The demo cannot go on; the message says why and what to do."""


def down(state: Path, say=print) -> list[str]:
    """Stop Prometheus, then the cluster (its supervisor tears down the node and the control plane); remove
    everything in `state` but the logs and the report. Returns what is still alive (nothing, normally)."""
    pidfiles.stop_all(pidfiles.files(state))
    left = pidfiles.still_alive(state) + cluster.down(state / "cluster", say=say)
    pidfiles.forget(state)
    if state.is_dir():
        for entry in state.iterdir():
            if entry.name not in KEPT:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
    return left


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


def kwok_gpu_annotations(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """A KWOK node's GPUs as its device plugin would publish them: (capacity, annotations)."""
    from deviceplugin.labels import inventory, inventory_annotation
    from deviceplugin.resources import discover
    from simgpu.nodeconfig import parse_node_config

    cfg = parse_node_config(KWOK_POOL)
    resources = discover(cfg, name)
    inv = inventory(cfg, name, cfg.gpu_devices(name), resources, {})
    return {r.name: str(len(r.slots)) for r in resources}, inventory_annotation(inv)


class PodWatch:
    """Every condition the matching pods carried, by pod and type, as a watch saw them: a preempted pod's
    DisruptionTarget lasts only while it terminates, so a later read would miss it."""

    def __init__(self, core, namespace: str, selector: str):
        from kubernetes import watch

        self.conditions: dict[str, dict[str, dict]] = {}
        self._watch = watch.Watch()
        start = core.list_namespaced_pod(namespace, label_selector=selector).metadata.resource_version

        def run():
            with contextlib.suppress(Exception):  # the watch ends with stop() or the cluster
                for event in self._watch.stream(core.list_namespaced_pod, namespace, label_selector=selector,
                                                resource_version=start, timeout_seconds=3600):
                    pod = event["object"]
                    for c in pod.status.conditions or []:
                        self.conditions.setdefault(pod.metadata.name, {})[c.type] = {
                            "status": c.status, "reason": c.reason, "message": c.message}

        self._thread = threading.Thread(target=run, name="example-pod-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._watch.stop()


class Demo:
    def __init__(self, state: Path, pods: list[str] | None, workload_s: float, report: bool, simulate: bool,
                 kwok_nodes: int):
        self.state, self.pod_names, self.workload_s = state, pods, workload_s
        self.report, self.simulate, self.kwok_nodes = report, simulate, kwok_nodes
        self.logs = state / "logs"
        self.t0 = time.monotonic()
        self.core = None
        self.facts: dict = {"state": str(state), "pods": {}}

    def say(self, msg: str = "") -> None:
        print(f"[{time.monotonic() - self.t0:5.1f}s] {msg}" if msg else "", flush=True)

    def show(self, text: str, indent: str = "    ") -> None:
        for line in text.rstrip("\n").splitlines():
            print(indent + line, flush=True)

    def save(self) -> None:
        (self.state / "demo.json").write_text(json.dumps(self.facts, indent=1))

    # -- 1. the cluster and the chart ---------------------------------------------------------------------
    def cluster(self) -> None:
        self.say("make cluster-up: control plane, kube-proxy, a real node (containerd + kubelet), KWOK nodes; "
                 "the fgpu image built from the Dockerfile (each part cached after its first build):")
        try:
            facts = cluster.up(self.state / "cluster", self.kwok_nodes, image=True, say=self.say)
        except cluster.ClusterError as e:
            raise DemoError(str(e)) from None
        self.kubeconfig = Path(facts["kubeconfig"])
        self.testbin = Path(facts["testbin"])
        self.facts.update(kubeconfig=str(self.kubeconfig), cluster=facts)
        t = facts["timings"]
        self.say(f"cluster up in {t['total_s']:.0f} s: apiserver {facts['server']}, real node {facts['node']} "
                 f"({facts['node_ip']}), {self.kwok_nodes} KWOK nodes; KUBECONFIG={self.kubeconfig}")
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)

    def chart(self) -> None:
        self.target = install.Target(kubeconfig=self.kubeconfig, helm=str(self.testbin / "helm"))
        self.say(f"helm install fgpu charts/fgpu -n fgpu-system -f {VALUES.relative_to(REPO)} "
                 "(the chart's own templates; values only):")
        try:
            install.install(self.target, [VALUES], [], "fgpu:dev")
            found = install.check(self.target, say=lambda m: self.show(m))
        except install.InstallError as e:
            raise DemoError(str(e)) from None
        self.facts["chart"] = found
        self.say(f"fgpu installed in {found['timings']['helm_install_s']:.0f} s; every chart pod Ready")

    def kwok_gpus(self) -> None:
        names = [f"kwok-node-{i}" for i in range(1, self.kwok_nodes + 1)]
        for name in names:
            capacity, annotations = kwok_gpu_annotations(name)
            self.core.patch_node_status(name, {"status": {"capacity": capacity, "allocatable": capacity}})
            self.core.patch_node(name, {"metadata": {"annotations": annotations}})
        if names:
            self.say(f"KWOK nodes {', '.join(names)}: 4x A100-80GB each (fractional), published as a device plugin "
                     "would; tainted, so only pods that tolerate kwok.x-k8s.io/node go there")

    # -- 2. the example pods ----------------------------------------------------------------------------
    def examples(self) -> None:
        """Apply the examples in rounds (a pod after the pods its `examples.fgpu.io/after` names run), each
        round settled before the next; then say what was preempted."""
        try:
            classes, pods = examples.load(EXAMPLES, self.pod_names)
            rounds = examples.waves(pods)
        except examples.ExampleError as e:
            raise DemoError(str(e)) from None
        self.examples_ = {e.name: e for e in pods}
        if classes:
            from kubernetes import client

            sched = client.SchedulingV1Api(self.api)
            for pc in classes:
                sched.create_priority_class(pc)
            self.say("PriorityClasses the examples name: " + ", ".join(
                f"{pc['metadata']['name']} ({pc['value']})" for pc in classes))
        self.watch = PodWatch(self.core, NAMESPACE, "app.kubernetes.io/part-of=fgpu-examples")
        created: list[examples.Example] = []
        try:
            for i, round_ in enumerate(rounds):
                if i:
                    self.say("applying, now that " + ", ".join(sorted({n for e in round_ for n in e.after}))
                             + " run:")
                else:
                    self.say(f"applying {len(round_)} example pods from deploy/examples/pods (namespace "
                             f"{NAMESPACE}):")
                for example in round_:
                    self.create(example)
                created += round_
                self.settle(created)
        finally:
            self.watch.stop()
        self.preempted()

    def create(self, example: examples.Example) -> None:
        from kubernetes.client.rest import ApiException

        name, expect = example.name, example.expect
        self.facts["pods"][name] = {"expect": expect}
        print(f"  {name}: {example.about}", flush=True)
        try:
            self.core.create_namespaced_pod(NAMESPACE, as_submitted(copy.deepcopy(example.manifest)))
        except ApiException as e:
            outcome = f"denied by fgpu's webhook: {api_message(e)}"
            self.facts["pods"][name].update(outcome="denied", message=api_message(e))
        else:
            outcome = "admitted"
            self.facts["pods"][name]["outcome"] = "admitted"
        print(f"      -> {outcome}" + ("" if (outcome != "admitted") == (expect == "denied")
                                       else f"   (UNEXPECTED: the example says {expect})"), flush=True)
        self.save()

    def pod_state(self, name: str) -> tuple[str, str | None]:
        """(running | unschedulable | waiting | gone, node or reason) of one example pod now."""
        from kubernetes.client.rest import ApiException

        try:
            pod = self.core.read_namespaced_pod(name, NAMESPACE)
        except ApiException as e:
            if e.status == 404:
                return "gone", None
            raise
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        if pod.metadata.deletion_timestamp is not None:
            return "gone" if pod.status.phase != "Running" else "terminating", pod.spec.node_name
        if pod.status.phase == "Running":
            return "running", pod.spec.node_name
        if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
            return "unschedulable", scheduled.message
        return "waiting", pod.spec.node_name or pod.status.phase

    def settle(self, created: list[examples.Example]) -> None:
        """Wait until each admitted pod is as its example says it ends (Running, parked as unschedulable, gone
        after its preemption), up to SETTLE_S; what each pod is then is recorded either way."""
        want = {e.name: examples.end_state(e, created) for e in created
                if self.facts["pods"][e.name]["outcome"] == "admitted"}

        def states():
            return {name: self.pod_state(name) for name in want}

        deadline = time.monotonic() + SETTLE_S
        while (seen := states()) and any(seen[n][0] != w for n, w in want.items()) and time.monotonic() < deadline:
            time.sleep(0.5)
        for name, (state, where) in seen.items():
            self.facts["pods"][name].update(state=state, node=where if state == "running" else None,
                                            reason=where if state == "unschedulable" else None)
            if state != want[name]:
                print(f"  UNEXPECTED: {name} is {state} ({where}) after {SETTLE_S} s; the example says it ends "
                      f"{want[name]}", flush=True)
        self.save()
        running = sum(s == "running" for s, _ in seen.values())
        self.say(f"{running} pods placed by fgpu (the time-sliced replica by kube-scheduler), their devices "
                 f"allocated by the chart's device plugin and their containers started by the real kubelet; "
                 f"{sum(s == 'unschedulable' for s, _ in seen.values())} Pending, "
                 f"{sum(s == 'gone' for s, _ in seen.values())} preempted")

    def preempted(self) -> None:
        """Each victim's DisruptionTarget condition (seen by the watch while it terminated) and its Preempted
        Event, which names the preemptor."""
        for name, example in self.examples_.items():
            if example.expect != "preempted" or name not in self.facts["pods"]:
                continue
            condition = self.watch.conditions.get(name, {}).get("DisruptionTarget")
            events = self.core.list_namespaced_event(
                NAMESPACE, field_selector=f"involvedObject.name={name},reason=Preempted").items
            event = events[-1].message if events else None
            self.facts["pods"][name]["preempted"] = {"condition": condition, "event": event}
            self.say(f"{name} was preempted (`kubectl get events --field-selector involvedObject.name={name}`):")
            print(f"    Event Preempted: {event or '(none)'}", flush=True)
            print("    condition DisruptionTarget: " + (
                f"{condition['status']}, {condition['reason']}: {condition['message']}" if condition else "(not seen)"),
                flush=True)
        self.save()

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
            if pod["outcome"] == "denied":
                self.say(f"{name} was refused by the webhook: {pod['message']}")

    # -- 3. workloads, scale, metrics, simulate -------------------------------------------------------------
    def workloads(self) -> None:
        """Each running example's own container output: what the daemon gave it, then its throughput."""
        from kubernetes.client.rest import ApiException

        names = [n for n, p in self.facts["pods"].items() if p.get("state") == "running"]
        if not names:
            return
        self.say(f"each placed pod's container runs `simgpu run` against the node's daemon pod; its output "
                 f"(waiting up to {self.workload_s:.0f} s for a throughput line):")
        deadline = time.monotonic() + self.workload_s
        logs: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name in names:
                with contextlib.suppress(ApiException):
                    logs[name] = self.core.read_namespaced_pod_log(name, NAMESPACE, container="main")
            if all(len(logs.get(n, "").strip().splitlines()) >= 2 for n in names):
                break
            time.sleep(2)
        for name in names:
            lines = logs.get(name, "").strip().splitlines()
            print(f"  {name}: " + (lines[0].removeprefix("simgpu run: ") if lines else "(no output yet)"), flush=True)
            if len(lines) > 1:
                print(f"      {lines[-1]}", flush=True)
            self.facts["pods"][name]["output"] = lines[-2:]
        self.save()

    def qos(self) -> None:
        """The QoS board's SLO attainment of every protected example pod, and that every best-effort one is placed
        (issue 35's demo target), from the demo's own Prometheus."""
        from fgpu_operator.observe.prom import PromError, Prometheus

        prom = Prometheus(self.prom_url)
        pods = [p for p in self.core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/part-of="
                                                          "fgpu-examples").items if p.status.phase == "Running"]
        protected = [n for n, (prot, _, _) in qos.classes(pods).items() if prot]

        def measured():
            rows = qos.measure(prom, pods)
            have = {r.pod for r in rows if r.attainment is not None}
            return rows if all(n in have for n in protected) else None

        try:
            rows = wait_until(measured, 60, "every protected pod's SLO attainment on the QoS board", interval=2)
        except WaitTimeout:
            rows = qos.measure(prom, pods)
        except PromError as e:
            raise DemoError(f"reading the QoS board from Prometheus: {e}") from None
        self.say(f"the QoS board's \"SLO attainment\" panel now (its query: {qos.panel_query()}; each pod's "
                 f"attainment since its workload started, target >= {qos.TARGET:.0%} for protected pods):")
        self.show(qos.table(rows))
        self.facts["qos"] = qos.facts(rows)
        self.save()

    def burst(self) -> None:
        if not self.kwok_nodes:
            return
        pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": f"burst-{i:02d}", "labels": {"app.kubernetes.io/part-of": "fgpu-demo-burst"},
                    "annotations": {"fgpu.io/gpu-fraction": "0.25"}},
                 "spec": {"nodeSelector": {cluster.POOL_LABEL: "kwok"},
                          "tolerations": [{**cluster.KWOK_TAINT, "operator": "Equal"}],
                          "containers": [{"name": "main", "image": "fgpu:dev", "imagePullPolicy": "Never"}]}}
                for i in range(BURST)]
        t = time.monotonic()
        for pod in pods:
            self.core.create_namespaced_pod(NAMESPACE, pod)

        def bound():
            listed = self.core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/part-of=fgpu-demo-burst")
            return sum(bool(p.spec.node_name) for p in listed.items) == BURST

        wait_until(bound, 120, f"the {BURST} burst pods bound", interval=0.2)
        self.say(f"{BURST} best-effort 0.25-GPU pods placed on the KWOK nodes' GPUs in {time.monotonic() - t:.1f} s")

    def prometheus(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise DemoError("prometheus not found: run `make prometheus` (Debian package prometheus)")
        pods = install.release_pods(self.core, self.target)
        port = free_port()
        workdir = self.state / "prometheus"
        workdir.mkdir()
        proc, self.prom_url = start_prometheus(binary, workdir, pod_scrape_configs(pods), port, detach=True)
        pidfiles.remember(self.state, "prometheus", proc.pid)
        self.facts["prometheus"] = self.prom_url
        self.prom_started = time.time()
        from fgpu_operator.observe.prom import Prometheus

        prom = Prometheus(self.prom_url)
        targets = len([c for p in pods for c in p["spec"]["containers"] if c.get("ports")])
        wait_until(lambda: len(prom.query("up == 1")) >= targets, 60, f"Prometheus to scrape all {targets} targets",
                   show=lambda: prom.query("up"))
        self.say(f"Prometheus {self.prom_url} scrapes every chart pod ({targets} targets: the operators, the node's "
                 "device plugin and daemon) through the chart's container ports and labels")

    def draw(self) -> None:
        if not self.report:
            return
        out = self.state / "report"
        time.sleep(5)  # a few more scrapes of the workloads' counters
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
        self.say(f"fgpu demo: the product as a user installs it, on this machine, no Docker (state: {self.state})")
        self.cluster()
        self.chart()
        self.kwok_gpus()
        self.save()
        self.examples()
        self.prometheus()
        self.where()
        self.workloads()
        self.qos()
        self.burst()
        self.draw()
        self.replay()
        self.save()
        self.say(f"done. The cluster is still up: KUBECONFIG={self.kubeconfig} kubectl get pods -A -o wide; "
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
    up.add_argument("--workload-seconds", type=float, default=45.0,
                    help="how long to wait for the example workloads' first throughput lines")
    up.add_argument("--kwok-nodes", type=int, default=2, help="KWOK nodes with GPUs beside the real node")
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
    if args.kwok_nodes < 0:
        p.error(f"--kwok-nodes: {args.kwok_nodes} is not a count of nodes (0 or more)")

    down(state, say=lambda m: print(f"an earlier demo was still up: {m}"))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where the shell ignores it (a background job)

    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    demo = Demo(state, args.pods.split(",") if args.pods else None, args.workload_seconds,
                not args.no_report, not args.no_simulate, args.kwok_nodes)
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
