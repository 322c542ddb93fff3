"""fgpu's own processes on a dev cluster: the operator (scheduler + admission webhook), a node's simgpu daemon
and device plugin; fgpu's CRDs; waiting until the apiserver calls the webhook. Used by the e2e tests (through
tests/e2e/operator_proc.py), bench/scheduler.py and the demo.

`detach=True` starts a process in a session of its own that outlives its parent (the demo's cluster stays up
after `make demo` returns, until `make demo-down`); otherwise it dies with its parent (PR_SET_PDEATHSIG), so a
killed test run leaves nothing behind.

The operator and every device plugin of one cluster get the same hand-off key (`handoff_key_file`, beside the
cluster's kubeconfig), so every e2e run and demo signs and verifies each assignment."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devcluster.kubeplane import ComponentError, die_with_parent
from devcluster.polling import wait_until
from fgpu_contracts import keys

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "deploy" / "crds"
FGPU = str(Path(sys.executable).with_name("fgpu"))


SETPRIV = shutil.which("setpriv")  # util-linux


def spawn(argv: list[str], log_path: Path, env: dict[str, str] | None = None, detach: bool = False,
          cwd: Path = REPO) -> subprocess.Popen:
    """Start argv with stdout and stderr in log_path (truncated); the Popen carries `.log_path`. Unless detached
    it gets SIGTERM when this process dies, set by `setpriv --pdeathsig` rather than Python code run in the
    forked child: with gRPC threads in this process, gRPC's fork handlers can crash that child before it execs
    (seen starting Prometheus in a clean CI run)."""
    preexec = None
    if not detach and SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "TERM", "--", *argv]
    elif not detach:
        preexec = die_with_parent
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=detach, preexec_fn=preexec)
    proc.log_path = log_path
    return proc


def log_tail(proc: subprocess.Popen, chars: int = 3000) -> str:
    try:
        return Path(proc.log_path).read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


HANDOFF_KEY_NAME = "fgpu-handoff.key"
HANDOFF_KEY_FLAG = "--handoff-key-file"


def handoff_key_file(kubeconfig: Path) -> Path:
    """The cluster's hand-off key (the Helm chart's Secret, for dev clusters): made once beside its kubeconfig."""
    path = Path(kubeconfig).resolve().parent / HANDOFF_KEY_NAME
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".handoff-key.")
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    try:
        os.link(tmp, path)  # whole or not at all; a concurrent maker's key wins
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return path


def _with_key(kubeconfig: Path, extra: tuple[str, ...]) -> list[str]:
    """`extra`, plus the cluster's key unless the caller names one."""
    named = any(a == HANDOFF_KEY_FLAG or a.startswith(HANDOFF_KEY_FLAG + "=") for a in extra)
    return [*extra] if named else [HANDOFF_KEY_FLAG, str(handoff_key_file(kubeconfig)), *extra]


def start_operator(kubeconfig: Path, log_path: Path, *extra: str, leader_elect: bool = False,
                   policy: str = "binpack", ready: str = "fgpu scheduler started", detach: bool = False,
                   timeout: float = 60, program: str = FGPU) -> subprocess.Popen:
    """`fgpu operator` against `kubeconfig`; returns once its log shows `ready` (the model is synced), else
    raises ComponentError with the log's tail. Its temporary files (the self-signed webhook certificate) go
    beside its log, so one killed mid-test leaves nothing behind in /tmp."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "TMPDIR": str(Path(log_path).resolve().parent)}
    argv = [program, "operator", "--policy", policy, *([] if leader_elect else ["--no-leader-elect"]),
            *_with_key(kubeconfig, extra)]
    proc = spawn(argv, log_path, env=env, detach=detach)
    deadline = time.monotonic() + timeout
    while ready not in log_tail(proc, 1 << 20):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            raise ComponentError(f"operator did not start:\n{log_tail(proc)}")
        time.sleep(0.2)
    return proc


def start_daemon(config: Path, socket: Path, node: str, log_path: Path, *extra: str,
                 detach: bool = False, timeout: float = 30, wait: bool = True) -> subprocess.Popen:
    """`simgpu daemon` for `node`; returns once it listens on `socket` (at once with wait=False: then
    wait_daemon())."""
    proc = spawn([sys.executable, "-m", "simgpu.cli", "daemon", "--config", str(config), "--socket", str(socket),
                  "--node-name", node, *extra], log_path, detach=detach)
    if wait:
        wait_daemon(proc, socket, node, timeout)
    return proc


def wait_daemon(proc: subprocess.Popen, socket: Path, node: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not socket.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise ComponentError(f"simgpu daemon for {node} did not listen on {socket}:\n{log_tail(proc)}")
        time.sleep(0.1)


def start_plugin(config: Path, node: str, plugin_dir: Path, kubeconfig: Path, daemon_socket: Path,
                 log_path: Path, *extra: str, detach: bool = False) -> subprocess.Popen:
    """`fgpu-device-plugin` for `node`, registering with the kubelet.sock in `plugin_dir`."""
    return spawn([sys.executable, "-m", "deviceplugin.cli", "--config", str(config), "--node-name", node,
                  "--device-plugin-path", str(plugin_dir), "--kubeconfig", str(kubeconfig),
                  "--daemon-socket", str(daemon_socket), *_with_key(kubeconfig, extra)], log_path, detach=detach)


def install_crds(k8s) -> None:
    """Apply deploy/crds/*.yaml (idempotent) and wait until each kind is served."""
    import yaml
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    with k8s.api() as api:
        ext = client.ApiextensionsV1Api(api)
        for path in sorted(CRDS.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            try:
                ext.create_custom_resource_definition(crd)
            except ApiException as e:
                if e.status != 409:
                    raise
            group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
            version = crd["spec"]["versions"][0]["name"]
            custom = client.CustomObjectsApi(api)

            def served(custom=custom, group=group, version=version, plural=plural):
                try:
                    custom.list_cluster_custom_object(group, version, plural)
                except ApiException as e:
                    if e.status == 404:
                        return False
                    raise
                return True

            wait_until(served, 30, f"{plural}.{group} to be served")


def wait_webhook_live(core, namespace: str, timeout: float = 60.0) -> None:
    """The apiserver calls a webhook once its own informer has seen the configuration, a moment after the
    configuration exists: until then pods are admitted unmutated. Dry-run a GPU pod until it comes back routed
    to fgpu, or with DRA's claim (`--dra-claims`; dry-run calls webhooks without side effects and creates
    nothing)."""
    from kubernetes.client.rest import ApiException

    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "fgpu-webhook-probe", "annotations": {keys.FGPU_FRACTION: "0.1"}},
             "spec": {"containers": [{"name": "probe", "image": "busybox"}]}}

    def routed() -> bool:
        try:
            pod = core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as e:  # the webhook's server may answer a moment after its configuration exists
            if e.status == 400 and "fgpu" in (e.body or ""):
                raise
            return False
        return pod.spec.scheduler_name == keys.SCHEDULER_NAME or bool(pod.spec.resource_claims)  # or DRA's claim

    wait_until(routed, timeout, "the apiserver to call fgpu's mutating webhook")
