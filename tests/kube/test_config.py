"""Credentials from kubeconfig files and the in-cluster service account; TLS checked on a real HTTPS server
with a throwaway CA, server and client certificate made by `openssl`."""
from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from fgpu_operator.kube import ApiSession, ConfigError, Result, in_cluster, load, load_kubeconfig


def kubeconfig(path: Path, cluster: dict, user: dict, namespace: str | None = None, name: str = "ctx") -> Path:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": name, "context": context}]}))
    return path


def test_token_ca_file_relative_to_the_kubeconfig_and_namespace(tmp_path):
    (tmp_path / "conf").mkdir()
    path = kubeconfig(tmp_path / "conf" / "kc", {"server": "https://k:6443/", "certificate-authority": "ca.crt"},
                      {"token": "abc"}, namespace="team-a")
    creds = load_kubeconfig(path)
    assert (creds.server, creds.namespace, creds.info.token) == ("https://k:6443", "team-a", "abc")
    assert creds.info.ca_path == str(tmp_path / "conf" / "ca.crt") and creds.token_file is None


def test_kubeconfig_list_first_definition_wins(tmp_path, monkeypatch):
    a = kubeconfig(tmp_path / "a", {"server": "https://a"}, {"token": "ta"}, name="first")
    b = tmp_path / "b"
    b.write_text(yaml.safe_dump({"current-context": "second", "clusters": [{"name": "c", "cluster": {"server": "https://b"}}],
                                 "contexts": [{"name": "second", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'missing'}:{b}")
    assert load_kubeconfig().server == "https://a"  # current-context "first" from the first file
    assert load_kubeconfig(context="second").server == "https://a"  # cluster "c" as the first file has it


def test_unknown_context_names_the_known_ones(tmp_path):
    path = kubeconfig(tmp_path / "kc", {"server": "https://k"}, {"token": "t"})
    with pytest.raises(ConfigError, match=r"no context 'nope' \(has: ctx\)"):
        load_kubeconfig(path, context="nope")


@pytest.mark.parametrize("plugin", ["exec", "auth-provider"])
def test_credential_plugins_are_refused(tmp_path, plugin):
    path = kubeconfig(tmp_path / "kc", {"server": "https://k"}, {plugin: {"command": "aws"}})
    with pytest.raises(ConfigError, match=f"`{plugin}` credentials are not supported"):
        load_kubeconfig(path)


def test_token_file_is_reread(tmp_path):
    (tmp_path / "tok").write_text("one\n")
    creds = load_kubeconfig(kubeconfig(tmp_path / "kc", {"server": "https://k"}, {"tokenFile": "tok"}))
    assert creds.info.token == "one" and creds.token_file.token() == "one"
    (tmp_path / "tok").write_text("two\n")
    assert creds.token_file.token(force=True) == "two"


def test_in_cluster_service_account(tmp_path):
    for name, text in {"token": "sa-token\n", "ca.crt": "", "namespace": "fgpu-system\n"}.items():
        (tmp_path / name).write_text(text)
    creds = in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert (creds.server, creds.namespace, creds.info.token) == ("https://10.0.0.1:443", "fgpu-system", "sa-token")
    assert creds.info.ca_path == str(tmp_path / "ca.crt") and creds.token_file.path == tmp_path / "token"
    v6 = in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})
    assert v6.server == "https://[fd00::1]:443"


def test_in_cluster_outside_a_pod_says_so(tmp_path):
    with pytest.raises(ConfigError, match="not in a pod"):
        in_cluster(tmp_path, {})


def test_load_goes_in_cluster_only_without_a_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="token file"):  # went to /var/run/secrets/..., absent here
        load()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", {"server": "https://k"}, {"token": "t"})))
    assert load().server == "https://k"


# ---- TLS on a real HTTPS server ----------------------------------------------------------------------
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _issue(d: Path, name: str, ca: str, subject: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "1", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """ca.crt signs server.crt (for 127.0.0.1) and client.crt (CN fgpu-test-user); other-ca.crt signs nothing."""
    if shutil.which("openssl") is None:
        pytest.skip("the `openssl` command is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-days", "1", "-subj", f"/CN={ca}", cwd=d)
    _issue(d, "server", "ca", "/CN=apiserver", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    _issue(d, "client", "ca", "/CN=fgpu-test-user", "extendedKeyUsage=clientAuth")
    return d


@pytest.fixture
async def https_api(pki):
    """An HTTPS server that reports who the client is: certificate CN and Authorization header."""
    async def whoami(request: web.Request) -> web.Response:
        cert = request.transport.get_extra_info("peercert") or {}
        cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"), "")
        return web.json_response({"cn": cn, "auth": request.headers.get("Authorization", "")})

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki / "server.crt", pki / "server.key")
    ctx.load_verify_locations(pki / "ca.crt")
    ctx.verify_mode = ssl.CERT_OPTIONAL
    app = web.Application()
    app.router.add_get("/whoami", whoami)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=ctx)
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        await server.close()


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def _whoami(path: Path):
    async with ApiSession(load_kubeconfig(path)) as api:
        return await api.request("GET", "/whoami")


async def test_client_certificate_and_ca_given_as_data(pki, https_api, tmp_path):
    path = kubeconfig(tmp_path / "kc", {"server": https_api, "certificate-authority-data": _b64(pki / "ca.crt")},
                      {"client-certificate-data": _b64(pki / "client.crt"), "client-key-data": _b64(pki / "client.key")})
    out = await _whoami(path)
    assert out.ok, out
    assert out.body == {"cn": "fgpu-test-user", "auth": ""}


async def test_client_certificate_and_ca_given_as_files(pki, https_api, tmp_path):
    for name in ("ca.crt", "client.crt", "client.key"):
        shutil.copy(pki / name, tmp_path / name)
    path = kubeconfig(tmp_path / "kc", {"server": https_api, "certificate-authority": "ca.crt"},
                      {"client-certificate": "client.crt", "client-key": "client.key"})
    assert (await _whoami(path)).body["cn"] == "fgpu-test-user"


async def test_a_server_the_ca_did_not_sign_is_refused(pki, https_api, tmp_path):
    path = kubeconfig(tmp_path / "kc", {"server": https_api, "certificate-authority-data": _b64(pki / "other-ca.crt")},
                      {"token": "t"})
    out = await _whoami(path)
    assert (out.result, out.status, out.attempts) == (Result.UNAVAILABLE, 0, 1)  # not retried: it is final
    assert "certificate" in out.message.lower()


async def test_insecure_skip_tls_verify_with_a_bearer_token(https_api, tmp_path):
    path = kubeconfig(tmp_path / "kc", {"server": https_api, "insecure-skip-tls-verify": True}, {"token": "t0k"})
    assert (await _whoami(path)).body == {"cn": "", "auth": "Bearer t0k"}
