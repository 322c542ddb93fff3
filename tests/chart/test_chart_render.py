"""charts/fgpu with the real helm: lint and render for the defaults and each example values file of
deploy/values/, and what the rendered objects must hold (webhooks that never see kube-system, a CA that
signed the serving certificate, RBAC without wildcards or Secrets, dashboards and CRDs from their one home,
a node config per pool that simgpu loads); values.schema.json refusing bad values with helm's error."""
from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from helmchart import CHART, EXAMPLE_VALUES, ROOT, find, helm, one, render

pytestmark = pytest.mark.e2e  # needs helm from the testbin (`make testbin`)

DEPLOY = ROOT / "deploy"
SCHEMA_ERROR = "values don't meet the specifications of the schema"


@pytest.fixture(scope="module")
def default() -> list[dict]:
    return render()


@pytest.mark.parametrize("values", [None, *EXAMPLE_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_lint_and_render_each_values_file(values):
    args = ["-f", str(values)] if values else []
    out = helm("lint", "--strict", str(CHART), *args)
    assert "0 chart(s) failed" in out.stdout
    objects = render(*args)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "ClusterRole", "ServiceAccount", "Service"} <= kinds
    for obj in objects:  # every object carries the release's labels (helm uninstall finds them by those)
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "fgpu", obj["metadata"]["name"]


def test_operator_deployment(default):
    dep = one(default, "Deployment", "fgpu-operator")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = c["args"]
    assert c["command"] == ["fgpu", "operator"]
    assert "--lease-namespace=fgpu-system" in args and "--identity=$(POD_NAME)" in args
    assert "--no-leader-elect" not in args
    assert "--webhook-host=fgpu-webhook.fgpu-system.svc" in args
    assert "--takeover-schedulers=hami-scheduler,kai-scheduler,kubeshare-scheduler,default-scheduler" in args
    assert "--aliyun-memory-unit=GiB" in args
    assert {a for a in args if a.startswith("--trusted-user=")} == {
        "--trusted-user=system:serviceaccount:fgpu-system:fgpu-operator",
        "--trusted-user=system:serviceaccount:fgpu-system:fgpu-node"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["tcpSocket"]["port"] == "webhook"
    assert c["startupProbe"]["httpGet"]["port"] == "health"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["securityContext"]["runAsNonRoot"] and c["securityContext"]["readOnlyRootFilesystem"]
    assert pod["serviceAccountName"] == "fgpu-operator"
    cert = next(v for v in pod["volumes"] if v["name"] == "webhook-cert")["secret"]
    assert {i["path"] for i in cert["items"]} == {"tls.crt", "tls.key", "ca.pem"}  # what --webhook-cert-dir reads
    pdb = one(default, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    lease = one(default, "Role", "fgpu-operator-leader")
    assert {"fgpu-scheduler"} == {n for r in lease["rules"] for n in r.get("resourceNames", [])}


def test_takeover_schedulers_and_the_aliyun_unit_are_values():
    objects = render("--set", "operator.takeoverSchedulers={kai-scheduler}", "--set", "operator.aliyunMemoryUnit=MiB")
    args = one(objects, "Deployment", "fgpu-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--takeover-schedulers=kai-scheduler" in args and "--aliyun-memory-unit=MiB" in args
    none = render("--set-json", "operator.takeoverSchedulers=[]")
    assert "--takeover-schedulers=" in one(none, "Deployment", "fgpu-operator")["spec"]["template"]["spec"][
        "containers"][0]["args"]


def test_one_replica_without_lease_and_two_without_refused():
    objects = render("--set", "operator.replicas=1", "--set", "operator.leaderElection.enabled=false")
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-leader-elect" in args
    assert not find(objects, "PodDisruptionBudget") and not find(objects, "Role")
    out = helm("template", "x", str(CHART), "--set", "operator.leaderElection.enabled=false", check=False)
    assert out.returncode == 1 and "needs operator.leaderElection.enabled" in out.stderr


def test_webhooks_never_see_kube_system_or_the_release_namespace_and_trust_the_ca_that_signed_the_cert(default):
    secret = one(default, "Secret", "fgpu-webhook")
    pem = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca, cert = x509.load_pem_x509_certificate(pem["ca.crt"]), x509.load_pem_x509_certificate(pem["tls.crt"])
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert "fgpu-webhook.fgpu-system.svc" in sans
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    paths = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = one(default, kind, "fgpu-webhook")["webhooks"]
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == pem["ca.crt"]
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["port"]) == ("fgpu-webhook", "fgpu-system", 443)
        paths[kind] = (svc["path"], hook["rules"][0]["operations"])
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        assert {"kube-system", "fgpu-system"} <= set(expr["values"])
    # Kopf serves each handler at /<its id> (operator/controller/webhook.py)
    assert paths == {"MutatingWebhookConfiguration": ("/fgpu-request", ["CREATE"]),
                     "ValidatingWebhookConfiguration": ("/fgpu-handoff", ["UPDATE"])}
    service = one(default, "Service", "fgpu-webhook")
    deployment = one(default, "Deployment", "fgpu-operator")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    extra = render("--set", "webhook.excludeNamespaces={monitoring}", "--namespace", "gpu")
    (hook,) = one(extra, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "gpu", "monitoring"]


def test_cert_manager_mode_issues_and_injects_instead(default):
    objects = render("-f", str(DEPLOY / "values" / "cert-manager.yaml"))
    assert [s["metadata"]["name"] for s in find(objects, "Secret")] == ["fgpu-handoff-key"]  # no webhook cert
    cert = one(objects, "Certificate")
    assert cert["spec"]["secretName"] == "fgpu-webhook" and cert["spec"]["issuerRef"]["kind"] == "Issuer"
    assert one(objects, "Issuer")["spec"] == {"selfSigned": {}}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        hook_config = one(objects, kind)
        assert hook_config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "fgpu-system/fgpu-webhook"
        assert "caBundle" not in hook_config["webhooks"][0]["clientConfig"]


def test_rbac_has_no_wildcards_and_no_secrets():
    for values in [None, *EXAMPLE_VALUES]:
        objects = render(*(["-f", str(values)] if values else []))
        rules = [(o["metadata"]["labels"].get("app.kubernetes.io/component"), r)
                 for o in objects if o["kind"] in ("ClusterRole", "Role") for r in o["rules"]]
        assert rules
        for component, rule in rules:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), rule
            assert "secrets" not in rule["resources"], rule
            # fgpu-dra's own slices; the scheduler's preemption victims (as kube-scheduler's own role allows)
            victims = component == "operator" and rule["resources"] == ["pods"]
            allowed = {"delete"} if rule["resources"] == ["resourceslices"] or victims else set()
            assert not {"delete", "deletecollection", "escalate", "bind", "impersonate"} - allowed & set(rule["verbs"]), rule


def test_node_pools_each_get_a_daemonset_with_a_config_simgpu_loads():
    from simgpu.nodeconfig import load_node_config

    quickstart = DEPLOY / "values" / "quickstart.yaml"
    pools = yaml.safe_load(quickstart.read_text())["nodePools"]
    objects = render("-f", str(quickstart))
    for pool in pools:
        ds = one(objects, "DaemonSet", f"fgpu-node-{pool['name']}")
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"fgpu.io/node-pool": pool["name"]}
        assert [c["name"] for c in pod["containers"]] == ["device-plugin", "daemon"]
        cm = one(objects, "ConfigMap", f"fgpu-node-{pool['name']}")
        config = yaml.safe_load(cm["data"]["config.yaml"])
        assert config == pool["config"]
        assert next(v for v in pod["volumes"] if v["name"] == "config")["configMap"]["name"] == cm["metadata"]["name"]
        mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]}
        socket = next(v for v in pod["volumes"] if v["name"] == "socket-dir")["hostPath"]["path"]
        assert mounts["socket-dir"] == socket  # the plugin hands this path to the kubelet: host path == mount path
        assert mounts["state"] == "/etc/fgpu"  # where tokenSecretFile defaults to
        path = Path("/tmp") / f"fgpu-chart-{pool['name']}.yaml"
        path.write_text(cm["data"]["config.yaml"])
        load_node_config(str(path))  # raises with the field on any rule the schema cannot express
    mine = render("-f", str(DEPLOY / "values" / "existing-configmap.yaml"))
    ds = one(mine, "DaemonSet")
    assert next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")["configMap"][
        "name"] == "gpu-nodes-h100"
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert not [c for c in find(mine, "ConfigMap") if c["metadata"]["name"].startswith("fgpu-node")]


def test_every_example_node_config_passes_the_chart_schema(tmp_path):
    """The chart's schema is the v1 node config: every documented node config is accepted as a pool's."""
    configs = sorted((DEPLOY / "examples" / "node-config").glob("*.yaml"))
    assert configs
    pools = [{"name": p.stem, "config": yaml.safe_load(p.read_text())} for p in configs]
    values = tmp_path / "pools.yaml"
    values.write_text(yaml.safe_dump({"nodePools": pools}))
    objects = render("-f", str(values))
    assert len(find(objects, "DaemonSet")) == len(configs)


@pytest.mark.parametrize("bad, where", [
    ({"nodePools": [{"name": "x", "config": {"version": "v1", "gpus": [{"model": "RTX-9090"}]}}]},
     "/nodePools/0/config/gpus/0/model"),
    ({"nodePools": [{"name": "x", "config": {"version": "v1", "gpus": [{"model": "H100", "count": "two"}]}}]},
     "/nodePools/0/config/gpus/0/count"),
    ({"nodePools": [{"name": "x", "config": {"version": "v2", "gpus": [{"model": "H100"}]}}]},
     "/nodePools/0/config/version"),
    ({"nodePools": [{"name": "x", "config": {"version": "v1", "gpus": [{"model": "H100", "sharing": "magic"}]}}]},
     "/nodePools/0/config/gpus/0/sharing"),
    ({"nodePools": [{"name": "Bad_Name", "existingConfigMap": "c"}]}, "/nodePools/0/name"),
    ({"operator": {"replicas": "two"}}, "/operator/replicas"),
    ({"operator": {"policy": "random"}}, "/operator/policy"),
    ({"operator": {"replica": 2}}, "/operator"),
    ({"webhook": {"failurePolicy": "Sometimes"}}, "/webhook/failurePolicy"),
    ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
    ({"node": {"daemon": {"metricsPort": 0}}}, "/node/daemon/metricsPort"),
    ({"image": {"tag": 1.0}}, "/image/tag"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_schema_refuses_bad_values_with_helms_error(bad, where, tmp_path):
    values = tmp_path / "bad.yaml"
    values.write_text(yaml.safe_dump(bad))
    out = helm("template", "fgpu", str(CHART), "-f", str(values), check=False)
    assert out.returncode == 1, out.stdout[:500]
    assert SCHEMA_ERROR in out.stderr and f"at '{where}'" in out.stderr, out.stderr


def test_every_catalogued_gpu_spelling_is_accepted(tmp_path):
    from simgpu.catalog import all_gpus

    names = [n for g in all_gpus() for n in (g.name, g.short_name, *g.aliases)]
    values = tmp_path / "all.yaml"
    values.write_text(yaml.safe_dump({"nodePools": [
        {"name": f"p{k}", "config": {"version": "v1", "gpus": [{"model": n}]}} for k, n in enumerate(names)]}))
    assert len(find(render("-f", str(values)), "DaemonSet")) == len(names)


def test_dashboards_and_crds_come_from_their_one_home(default):
    dashboards = {Path(p).name: Path(p).read_text() for p in sorted((DEPLOY / "grafana").glob("*.json"))}
    maps = [c for c in find(default, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    got = {k: v for c in maps for k, v in c["data"].items()}
    assert got.keys() == dashboards.keys()
    for name, text in dashboards.items():
        assert json.loads(got[name]) == json.loads(text), name
    crds = {yaml.safe_load(p.read_text())["metadata"]["name"]: yaml.safe_load(p.read_text())
            for p in (DEPLOY / "crds").glob("*.yaml")}
    rendered = {c["metadata"]["name"]: c for c in find(default, "CustomResourceDefinition")}
    assert rendered.keys() == crds.keys()
    for name, crd in rendered.items():
        assert crd["spec"] == crds[name]["spec"]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not find(render("--set", "crds.install=false", "--set", "dashboards.enabled=false"),
                    "CustomResourceDefinition")


def test_the_packaged_chart_holds_deploys_crds_and_dashboards_only(tmp_path):
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("fgpu-*.tgz")
    with tarfile.open(archive) as tar:
        names = [n for n in tar.getnames() if n.startswith("fgpu/files/")]
    assert names
    dra = ("fgpu/files/dra/deviceclasses.yaml", "fgpu/files/dra/extended-resource.yaml")
    outside = [n for n in names if not n.startswith(("fgpu/files/crds/", "fgpu/files/grafana/")) and n not in dra]
    assert not outside, f"deploy/ entries not in charts/fgpu/.helmignore: {outside}"



def test_service_monitors_keep_the_labels_the_dashboards_read():
    """The operator and daemon label series with the pod and namespace they describe (honorLabels, else
    Prometheus renames them exported_*); the plugin's per-node series get `node` from the pod's node."""
    objects = render("--set", "metrics.serviceMonitor.enabled=true")
    endpoints = {e["port"]: e for o in find(objects, "ServiceMonitor") for e in o["spec"]["endpoints"]}
    assert set(endpoints) == {"metrics", "daemon-metrics", "plugin-metrics"}
    assert endpoints["metrics"]["honorLabels"] and endpoints["daemon-metrics"]["honorLabels"]
    assert "honorLabels" not in endpoints["plugin-metrics"]
    assert endpoints["plugin-metrics"]["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]


def test_the_handoff_key_is_one_secret_mounted_read_only_into_the_operator_and_every_plugin(default, tmp_path):
    from fgpu_contracts.signature import load_key

    secret = one(default, "Secret", "fgpu-handoff-key")
    key = base64.b64decode(secret["data"]["key"])
    (tmp_path / "key").write_bytes(key)  # what the pods read: long enough for --handoff-key-file
    assert load_key(str(tmp_path / "key")) == key and len(key) == 64
    assert one(render(), "Secret", "fgpu-handoff-key")["data"]["key"] != secret["data"]["key"]  # random
    pods = [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in default
            if o["kind"] in ("Deployment", "DaemonSet")]
    users = [n for n, pod in pods for c in pod["containers"] if "--handoff-key-file=/etc/fgpu-handoff/key" in c["args"]]
    assert "fgpu-operator" in users and any(n.startswith("fgpu-node-") for n in users)
    for name, pod in pods:
        if name not in users:
            continue
        (volume,) = [v for v in pod["volumes"] if v["name"] == "handoff-key"]
        assert volume["secret"] == {"secretName": "fgpu-handoff-key", "items": [{"key": "key", "path": "key"}]}
        mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", []) if m["name"] == "handoff-key"]
        assert mounts and all(m["readOnly"] and m["mountPath"] == "/etc/fgpu-handoff" for m in mounts)
