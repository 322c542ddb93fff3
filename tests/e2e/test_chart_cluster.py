"""charts/fgpu against the real apiserver: the rendered manifests applied for real (server-side apply), the
ServiceAccounts allowed exactly what the code needs (SubjectAccessReviews, and the operator run under its
own ServiceAccount's token with the chart's own flags and certificate: it lists, elects, binds and answers
admission reviews), the webhooks never called for kube-system or the release namespace, and `helm install`,
`helm upgrade` and `helm uninstall` leaving no webhook configuration behind.

Nothing runs the chart's pods here (no kubelet): the webhook Service has no endpoint, so while a chart's
configuration is installed, a pod in any namespace it covers is refused ("failed calling webhook"), which
is what shows which namespaces it covers."""
from __future__ import annotations

import base64
import copy
import http.client
import json
import re
import socket
import ssl
import uuid
from pathlib import Path

import yaml
from helmchart import ROOT, helm, render
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_proc import gpu_node, share_pod, start_operator, stop
from polling import wait_for

from devcluster.examples import load as load_examples
from devcluster.kubeplane import free_port
from fgpu_contracts import keys
from fgpu_contracts.signature import load_key, problem

QUICKSTART = ROOT / "deploy" / "values" / "quickstart.yaml"
EXAMPLES = ROOT / "deploy" / "examples" / "pods"
NO_PROMETHEUS_OPERATOR = ("--set", "metrics.serviceMonitor.enabled=false")  # no ServiceMonitor CRD here
PROBE_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def apply(api, obj: dict) -> None:
    """Server-side apply, as `kubectl apply --server-side --force-conflicts` does."""
    from kubernetes.dynamic import DynamicClient

    resource = DynamicClient(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    resource.server_side_apply(body=obj, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"),
                               field_manager="fgpu-chart-test", force_conflicts=True)


def delete_cluster_objects(api, objects: list[dict]) -> None:
    """The cluster-scoped objects of a rendering, but the CRDs (shared by the whole session)."""
    rbac, reg = client.RbacAuthorizationV1Api(api), client.AdmissionregistrationV1Api(api)
    calls = {"MutatingWebhookConfiguration": reg.delete_mutating_webhook_configuration,
             "ValidatingWebhookConfiguration": reg.delete_validating_webhook_configuration,
             "ClusterRole": rbac.delete_cluster_role, "ClusterRoleBinding": rbac.delete_cluster_role_binding}
    for obj in objects:
        if obj["kind"] in calls:
            try:
                calls[obj["kind"]](obj["metadata"]["name"])
            except ApiException as e:
                if e.status != 404:
                    raise


def pod_refused(core, namespace: str) -> str | None:
    """Why a (dry-run) pod in `namespace` is refused, or None if it would be created. Webhooks are called
    for dry-run requests too (theirs have no side effects), so nothing is left behind."""
    try:
        core.create_namespaced_pod(namespace, copy.deepcopy(PROBE_POD), dry_run="All")
    except ApiException as e:
        return e.body or str(e)
    return None


def webhook_called(core, namespace: str) -> None:
    """Wait until the apiserver calls the chart's webhook (nobody serves it here, so the call fails and the pod
    is refused): its informer sees a new configuration a moment after the write."""
    wait_for(lambda: "failed calling webhook" in (pod_refused(core, namespace) or ""),
             what="the apiserver to call the chart's webhook", show=lambda: pod_refused(core, namespace))


def ensure_default_service_account(core, namespace: str) -> None:
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except ApiException as e:
        if e.status != 409:
            raise


def sar(api, user: str, verb: str, resource: str, group: str = "", namespace: str = "",
        subresource: str = "", name: str = "") -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=["system:serviceaccounts", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group=group,
                                                        namespace=namespace or None,
                                                        subresource=subresource or None, name=name or None)))
    return client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed


# (verb, resource, group, namespaced, subresource, name): what each ServiceAccount's code calls
OPERATOR_NEEDS = [
    ("list", "pods", "", False, "", ""), ("watch", "pods", "", False, "", ""),
    ("list", "nodes", "", False, "", ""), ("watch", "nodes", "", False, "", ""),
    ("create", "pods", "", True, "binding", "p"), ("patch", "pods", "", True, "status", "p"),
    ("patch", "pods", "", True, "", "p"),  # the hand-off guard's write-back
    ("delete", "pods", "", True, "", "p"),  # preemption's victims
    ("create", "events", "", True, "", ""), ("patch", "events", "", True, "", "e"),
    ("list", "gpunodes", "fgpu.io", False, "", ""), ("watch", "schedulingpolicies", "fgpu.io", False, "", ""),
    ("list", "poddisruptionbudgets", "policy", False, "", ""),
    ("watch", "poddisruptionbudgets", "policy", False, "", ""),  # preemption's budgets
    ("patch", "gpunodes", "fgpu.io", False, "status", "n"),
    ("patch", "schedulingpolicies", "fgpu.io", False, "status", "default"),
    ("create", "leases", "coordination.k8s.io", "lease", "", ""),
    ("get", "leases", "coordination.k8s.io", "lease", "", "fgpu-scheduler"),
    ("update", "leases", "coordination.k8s.io", "lease", "", "fgpu-scheduler"),
]
OPERATOR_MUST_NOT = [
    ("get", "secrets", "", True, "", ""), ("list", "secrets", "", False, "", ""),
    ("delete", "nodes", "", False, "", "n"), ("patch", "nodes", "", False, "", "n"),
    ("create", "pods", "", True, "", ""), ("update", "pods", "", True, "", "p"),
    ("get", "configmaps", "", True, "", ""), ("update", "leases", "coordination.k8s.io", "lease", "", "other"),
    ("update", "leases", "coordination.k8s.io", "kube-system", "", "fgpu-scheduler"),
    ("patch", "gpunodes", "fgpu.io", False, "", "n"), ("delete", "gpunodes", "fgpu.io", False, "", "n"),
    ("create", "mutatingwebhookconfigurations", "admissionregistration.k8s.io", False, "", ""),
    ("create", "serviceaccounts", "", True, "token", "fgpu-node"),
]
NODE_NEEDS = [
    ("list", "pods", "", False, "", ""), ("watch", "pods", "", False, "", ""), ("patch", "pods", "", True, "", "p"),
    ("get", "nodes", "", False, "", "n"), ("patch", "nodes", "", False, "", "n"),
    ("patch", "nodes", "", False, "status", "n"),
    ("create", "gpunodes", "fgpu.io", False, "", ""), ("patch", "gpunodes", "fgpu.io", False, "", "n"),
]
NODE_MUST_NOT = [
    ("get", "secrets", "", True, "", ""), ("list", "secrets", "", False, "", ""),
    ("delete", "nodes", "", False, "", "n"), ("delete", "pods", "", True, "", "p"),
    ("create", "pods", "", True, "binding", "p"), ("update", "nodes", "", False, "", "n"),
    ("delete", "gpunodes", "fgpu.io", False, "", "n"), ("patch", "gpunodes", "fgpu.io", False, "status", "n"),
    ("create", "leases", "coordination.k8s.io", "lease", "", ""), ("get", "configmaps", "", True, "", ""),
]


def check_access(api, user: str, namespace: str, needs: list, must_not: list) -> None:
    def ns_of(scope) -> str:
        return {True: "work", False: "", "lease": namespace}.get(scope, scope)

    wrong = []
    for verbs, expected in ((needs, True), (must_not, False)):
        for verb, resource, group, scope, sub, name in verbs:
            if sar(api, user, verb, resource, group, ns_of(scope), sub, name) != expected:
                wrong.append(f"{'cannot' if expected else 'can'} {verb} {resource}{'/' + sub if sub else ''} "
                             f"in {ns_of(scope) or 'the cluster'}")
    assert not wrong, f"{user}: {wrong}"


def sa_kubeconfig(k8s, api, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that is `account`: a token from the TokenRequest API (no controller-manager needed)."""
    token = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": k8s.server, "certificate-authority": str(k8s.ca_file)}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": account}}]}))
    return path


def review(port: int, service: str, ca_pem: bytes, path: str, pod: dict) -> dict:
    """POST an AdmissionReview to the operator's webhook as the apiserver would: TLS verified against the
    configuration's caBundle for the Service's DNS name."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
        "namespace": "default", "userInfo": {"username": "someone"}, "object": pod, "dryRun": False}})
    conn = http.client.HTTPConnection(service, port, timeout=10)
    conn.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname=service)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    return json.loads(conn.getresponse().read())["response"]


def operator_args(container: dict, cert_dir: Path, ports: dict[str, int], key_file: Path) -> list[str]:
    """The chart's operator flags, with this machine's ports, the certificate in `cert_dir` and the hand-off
    key (the chart's Secret, as its volume shows it) in `key_file`."""
    out = []
    for arg in container["args"]:
        flag = arg.split("=", 1)[0]
        if flag == "--liveness":
            arg = f"--liveness=http://127.0.0.1:{ports['health']}/healthz"
        elif flag in ("--metrics-port", "--webhook-port"):
            arg = f"{flag}={ports[flag]}"
        elif flag == "--webhook-cert-dir":
            arg = f"--webhook-cert-dir={cert_dir}"
        elif flag == "--handoff-key-file":
            arg = f"--handoff-key-file={key_file}"
        out.append(arg.replace("$(POD_NAME)", "operator-under-test"))
    return out


def test_rendered_manifests_apply_and_the_service_accounts_can_do_exactly_their_work(
        k8s, kwok, make_kwok_node, tmp_path):
    ns = f"fgpu-chart-{uuid.uuid4().hex[:6]}"
    release = f"fgpu-{uuid.uuid4().hex[:6]}"
    objects = render("-f", str(QUICKSTART), *NO_PROMETHEUS_OPERATOR, release=release, namespace=ns)
    # what `helm install` creates: not the hooks (the `helm test` smoke pod is created by `helm test` alone)
    objects = [o for o in objects if "helm.sh/hook" not in (o["metadata"].get("annotations") or {})]
    k8s.create_namespace(ns)
    other = k8s.create_namespace(f"fgpu-chart-other-{uuid.uuid4().hex[:6]}")
    proc = None
    with k8s.api() as api:
        core = client.CoreV1Api(api)
        try:
            order = {"CustomResourceDefinition": 0, "ServiceAccount": 1, "ClusterRole": 1, "Role": 1}
            for obj in sorted(objects, key=lambda o: order.get(o["kind"], 2)):
                apply(api, obj)
                if obj["kind"] == "CustomResourceDefinition":
                    wait_for(lambda name=obj["metadata"]["name"]: any(
                        c.type == "Established" and c.status == "True" for c in
                        client.ApiextensionsV1Api(api).read_custom_resource_definition(name).status.conditions or []),
                        what=f"CRD {obj['metadata']['name']} established")
            deployment = next(o for o in objects if o["kind"] == "Deployment")
            assert client.AppsV1Api(api).read_namespaced_deployment(deployment["metadata"]["name"], ns)

            # the webhooks: refused where they apply (no endpoint answers), never in kube-system or the release's
            ensure_default_service_account(core, "kube-system")  # else the pod is refused before any webhook
            webhook_called(core, other)
            assert pod_refused(core, "kube-system") is None
            assert pod_refused(core, ns) is None

            operator_sa = f"system:serviceaccount:{ns}:{release}-operator"
            node_sa = f"system:serviceaccount:{ns}:{release}-node"
            check_access(api, operator_sa, ns, OPERATOR_NEEDS, OPERATOR_MUST_NOT)
            check_access(api, node_sa, ns, NODE_NEEDS, NODE_MUST_NOT)

            # the operator as the chart runs it, as its ServiceAccount: lists, leads, binds, admits
            secret = core.read_namespaced_secret(f"{release}-webhook", ns).data
            cert_dir = tmp_path / "webhook"
            cert_dir.mkdir()
            volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "webhook-cert")
            for item in volume["secret"]["items"]:
                (cert_dir / item["path"]).write_bytes(base64.b64decode(secret[item["key"]]))
            key_file = tmp_path / "handoff-key"
            key_file.write_bytes(base64.b64decode(core.read_namespaced_secret(f"{release}-handoff-key", ns).data["key"]))
            ports = {"health": free_port(), "--metrics-port": free_port(), "--webhook-port": free_port()}
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            kubeconfig = sa_kubeconfig(k8s, api, ns, f"{release}-operator", tmp_path / "operator.kubeconfig")
            gpu_node(make_kwok_node, k8s, f"{ns}-gpu", model="A100-SXM4-80GB", count=1)
            proc = start_operator(k8s, tmp_path, "--kubeconfig", str(kubeconfig),
                                  *operator_args(container, cert_dir, ports, key_file), leader_elect=True, policy="fgpu")
            lease = wait_for(lambda: _lease_holder(api, ns), 30, "the operator to take the Lease")
            assert lease == "operator-under-test"
            core.create_namespaced_pod(ns, share_pod("share", 500))  # the release namespace: no webhook call
            wait_for(lambda: core.read_namespaced_pod("share", ns).spec.node_name, 30, "the pod bound")
            shared = core.read_namespaced_pod("share", ns)
            annotations = shared.metadata.annotations
            assert keys.ASSIGNMENT in annotations  # signed with the chart's key
            assert problem(load_key(str(key_file)), shared.metadata.uid, shared.spec.node_name, annotations) is None

            ca = base64.b64decode(client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
                f"{release}-webhook").webhooks[0].client_config.ca_bundle)
            service = f"{release}-webhook.{ns}.svc"
            for example in load_examples(EXAMPLES)[1]:  # as the demo reads them (PriorityClasses beside pods)
                answer = review(ports["--webhook-port"], service, ca, "/fgpu-request", example.manifest)
                assert answer["allowed"] == (example.expect != "denied"), f"{example.path.name}: {answer}"
            said = _messages(proc.log_path.read_text(errors="replace"))
            assert "403" not in said and "orbidden" not in said, said[-3000:]
        finally:
            if proc is not None:
                stop(proc)
            delete_cluster_objects(api, objects)
            for name in (ns, other):
                core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
                core.delete_namespace(name)


def _lease_holder(api, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("fgpu-scheduler", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return lease.spec.holder_identity


def test_helm_install_upgrade_and_uninstall_leave_no_webhook_behind(k8s):
    ns = f"fgpu-helm-{uuid.uuid4().hex[:6]}"
    release = f"fgpu-{uuid.uuid4().hex[:6]}"
    other = k8s.create_namespace(f"fgpu-helm-other-{uuid.uuid4().hex[:6]}")
    # the CRDs are the session's (other tests install them without Helm): this release leaves them alone
    args = ("--namespace", ns, "-f", str(QUICKSTART), "--set", "crds.install=false", *NO_PROMETHEUS_OPERATOR)
    selector = f"app.kubernetes.io/instance={release}"
    with k8s.api() as api:
        core, reg = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)

        def hooks():
            return (reg.list_mutating_webhook_configuration(label_selector=selector).items
                    + reg.list_validating_webhook_configuration(label_selector=selector).items)

        try:
            out = helm("install", release, str(ROOT / "charts" / "fgpu"), "--create-namespace", *args,
                       kubeconfig=k8s.kubeconfig)
            assert "helm uninstall" in out.stdout  # NOTES.txt
            assert len(hooks()) == 2
            secret = core.read_namespaced_secret(f"{release}-webhook", ns).data
            bundle = hooks()[0].webhooks[0].client_config.ca_bundle
            assert base64.b64decode(bundle) == base64.b64decode(secret["ca.crt"])
            webhook_called(core, other)
            handoff_key = core.read_namespaced_secret(f"{release}-handoff-key", ns).data

            helm("upgrade", release, str(ROOT / "charts" / "fgpu"), *args, "--set", "operator.qps=200",
                 kubeconfig=k8s.kubeconfig)
            assert core.read_namespaced_secret(f"{release}-webhook", ns).data == secret  # kept, not remade
            # the hand-off key too: a new one would make every plugin refuse the assignments signed before
            assert core.read_namespaced_secret(f"{release}-handoff-key", ns).data == handoff_key
            assert {h.webhooks[0].client_config.ca_bundle for h in hooks()} == {bundle}
            args_now = client.AppsV1Api(api).read_namespaced_deployment(f"{release}-operator", ns).spec.template.spec
            assert "--qps=200" in args_now.containers[0].args

            helm("uninstall", release, "--namespace", ns, "--wait", kubeconfig=k8s.kubeconfig)
            assert hooks() == []
            # nothing left that blocks pod creation, once the apiserver's informer has dropped the configurations
            wait_for(lambda: pod_refused(core, other) is None, what="pods admitted again after the uninstall",
                     show=lambda: pod_refused(core, other))
            rbac = client.RbacAuthorizationV1Api(api)
            assert not rbac.list_cluster_role(label_selector=selector).items
            assert not rbac.list_cluster_role_binding(label_selector=selector).items
        finally:
            helm("uninstall", release, "--namespace", ns, "--ignore-not-found", kubeconfig=k8s.kubeconfig,
                 check=False)
            for name in (ns, other):
                try:
                    core.delete_namespace(name)
                except ApiException as e:
                    if e.status != 404:
                        raise


def _messages(log: str) -> str:
    """What the operator's log says, without each line's timestamp (its milliseconds can read 403) and without
    its webhook server's access lines (their answer sizes can too): a 403 left is an API call refused."""
    lines = (line for line in log.splitlines() if "aiohttp.access" not in line)
    return "\n".join(re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", line) for line in lines)
