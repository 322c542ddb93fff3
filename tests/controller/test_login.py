"""Kopf logs in the way client-go's InClusterConfig does: in a pod, the apiserver at
KUBERNETES_SERVICE_HOST:PORT (the `kubernetes` Service's ClusterIP), never a DNS name a cluster without DNS
cannot resolve; outside a pod, Kopf's kubeconfig login."""
from __future__ import annotations

import kopf
from fgpu_operator.controller import handlers
from fgpu_operator.kube import config as kubeconfig


def test_in_a_pod_kopf_dials_the_service_ip_from_the_env(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("tok-1\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "namespace").write_text("fgpu-system")
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    info = handlers.login(settings=kopf.OperatorSettings(), logger=None)
    assert info.server == "https://10.0.0.1:443"
    assert (info.token, info.default_namespace, info.ca_path) == ("tok-1", "fgpu-system", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert handlers.login(settings=kopf.OperatorSettings(), logger=None).server == "https://[fd00::1]:443"


def test_a_named_kubeconfig_wins_over_the_pod(tmp_path, monkeypatch):
    config = tmp_path / "kubeconfig"
    config.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    info = handlers.login(settings=kopf.OperatorSettings(), logger=None)
    assert info.server == "https://127.0.0.1:6443" and info.token == "abc"
