"""Fixtures that run tests against a real control plane (see docs/testing.md for how to use them).

    k8s                 session: etcd + kube-apiserver; .kubeconfig .server .api() .bin(name) .create_namespace()
    controller_manager  session: + kube-controller-manager (default ServiceAccounts, namespace deletion, GC)
    kube_scheduler      session: + kube-scheduler
    kwok                session: + KWOK (fake nodes Ready, their pods Running)
    make_kwok_node      function: make_kwok_node(name, capacity) -> V1Node; deleted after the test
    namespace           function: a fresh namespace that can take pods at once
    kubeconfig_env      function: KUBECONFIG -> the admin kubeconfig, also for in-process clients (Kopf)

Everything runs on 127.0.0.1 with free ports, in a temp dir whose path is printed when a test fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from devcluster.kubeplane import ComponentError, ControlPlane, TestbinError, find_testbin

_PLANE: ControlPlane | None = None  # for failure reports


def _require_e2e() -> bool:
    return os.environ.get("FGPU_REQUIRE_E2E") == "1"


@pytest.fixture(scope="session")
def testbin() -> Path:
    """The directory of control-plane executables (env FGPU_TESTBIN, printed by `make testbin`)."""
    raw = os.environ.get("FGPU_TESTBIN")
    try:
        return find_testbin(raw)
    except TestbinError as e:
        problem = str(e)
    # outside the except block, so the report is one message rather than a chained traceback
    if raw or _require_e2e():
        pytest.fail(problem + ("" if raw else " (FGPU_REQUIRE_E2E=1: e2e tests may not skip)"), pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def k8s(testbin: Path, tmp_path_factory: pytest.TempPathFactory):
    """etcd + kube-apiserver for the whole session; logs and kubeconfig in a kept pytest temp dir."""
    global _PLANE
    workdir = tmp_path_factory.mktemp("controlplane")
    datadir = Path(tempfile.mkdtemp(prefix="fgpu-etcd-"))
    plane = ControlPlane(testbin, workdir, datadir)
    _PLANE = plane
    problem = _attempt(plane.start)
    if problem:
        plane.stop()
        shutil.rmtree(datadir, ignore_errors=True)
        pytest.fail(f"control plane did not start: {problem}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(datadir, ignore_errors=True)


def _attempt(action) -> str | None:
    """Run action(); the ComponentError message if it fails (pytest.fail is then called outside the
    except block, so the report is that one message and not a chained traceback)."""
    try:
        action()
    except ComponentError as e:
        return str(e)
    return None


def _start(plane: ControlPlane, start) -> ControlPlane:
    problem = _attempt(start)
    if problem:
        pytest.fail(problem, pytrace=False)
    return plane


@pytest.fixture(scope="session")
def controller_manager(k8s: ControlPlane) -> ControlPlane:
    """Adds kube-controller-manager to the session's plane (stopped with it, before the apiserver)."""
    return _start(k8s, k8s.start_controller_manager)


@pytest.fixture(scope="session")
def kube_scheduler(k8s: ControlPlane) -> ControlPlane:
    """Adds the stock kube-scheduler to the session's plane."""
    return _start(k8s, k8s.start_scheduler)


@pytest.fixture(scope="session")
def kwok(k8s: ControlPlane) -> ControlPlane:
    """Adds KWOK, which manages nodes annotated kwok.x-k8s.io/node=fake and the pods bound to them."""
    return _start(k8s, k8s.start_kwok)


@pytest.fixture
def make_kwok_node(kwok: ControlPlane):
    """make_kwok_node(name, capacity, labels=None) -> V1Node: a Ready, schedulable fake node whose capacity
    and allocatable hold `capacity` (e.g. {"nvidia.com/gpu": 8}); deleted when the test ends."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    made: list[str] = []

    def make(name: str, capacity: dict, labels: dict | None = None):
        made.append(name)  # before creating: a node that never gets Ready is still deleted afterwards
        result = []
        problem = _attempt(lambda: result.append(kwok.make_kwok_node(name, capacity, labels=labels)))
        if problem:
            pytest.fail(problem, pytrace=False)
        return result[0]

    yield make
    with kwok.api() as api:
        core = client.CoreV1Api(api)
        for name in made:
            try:
                core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise


@pytest.fixture
def kubeconfig_env(k8s: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point KUBECONFIG at the admin kubeconfig for this test, for subprocesses *and* in-process code
    (Kopf, `kubernetes.config.load_kube_config()`): the client library reads KUBECONFIG once, at import, so
    setting the variable alone does not reach code running in this process."""
    from kubernetes.config import kube_config

    monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(k8s.kubeconfig))
    return k8s.kubeconfig


@pytest.fixture
def namespace(k8s: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A fresh namespace (with its default ServiceAccount) named after the test; deleted afterwards
    (deletion only completes if the controller-manager runs)."""
    from kubernetes import client

    base = request.node.name.lower().replace("_", "-")
    name = "".join(ch for ch in base if ch.isalnum() or ch == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    k8s.create_namespace(name)
    yield name
    from kubernetes.client.rest import ApiException

    with k8s.api() as api:
        core = client.CoreV1Api(api)
        try:  # pods first, at once: without a controller-manager the namespace's pods would outlive it,
            # still bound to (deleted) test nodes and counted by whatever looks at the whole cluster next
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:  # the test may have deleted it itself
                raise


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On a failing e2e test, attach the tail of every control-plane log to its report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _PLANE is not None and _PLANE.components:
        report.sections.append(("control plane logs (tails)", _PLANE.log_tails()))
