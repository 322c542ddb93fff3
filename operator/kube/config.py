"""Where the apiserver is and how to log in: a kubeconfig file or the pod's service account.

The result is Kopf's own `kopf.ConnectionInfo` (so the operator can equally hand over what Kopf logged in
with, and the TLS/header code is Kopf's), plus the token file to re-read when it rotates — bound
service-account tokens expire, and client-go re-reads the file every minute.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import kopf
import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_S = 60.0  # client-go's cached file token source period


class ConfigError(Exception):
    """The kubeconfig or in-cluster environment cannot be used; the message names the field."""


class TokenFile:
    """A bearer token read from a file, re-read every TOKEN_REREAD_S or when asked (after a 401)."""

    def __init__(self, path: Path, reread_s: float = TOKEN_REREAD_S):
        self.path = Path(path)
        self.reread_s = reread_s
        self._token = ""
        self._read_at = float("-inf")

    def token(self, force: bool = False) -> str:
        if force or time.monotonic() - self._read_at >= self.reread_s:
            try:
                self._token = self.path.read_text().strip()
            except OSError as e:
                if not self._token:
                    raise ConfigError(f"cannot read token file {self.path}: {e}") from e
            self._read_at = time.monotonic()
        return self._token


@dataclass(frozen=True)
class Credentials:
    """A Kopf ConnectionInfo, and the token file behind its bearer token if the token can rotate."""

    info: kopf.ConnectionInfo
    token_file: TokenFile | None = None

    @property
    def server(self) -> str:
        return self.info.server.rstrip("/")

    @property
    def namespace(self) -> str:
        return self.info.default_namespace or "default"


def load(path: str | os.PathLike | None = None, context: str | None = None) -> Credentials:
    """kubeconfig if one is named (argument or $KUBECONFIG), else in-cluster if we run in a pod, else
    ~/.kube/config — the order kubectl and client-go use."""
    if path is None and not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    return load_kubeconfig(path, context)


def in_cluster(root: Path = SERVICE_ACCOUNT_DIR, env: dict[str, str] | None = None) -> Credentials:
    """The pod's service account: token (re-read as it rotates), CA and namespace under `root`."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset")
    token = TokenFile(root / "token")
    ns_file = root / "namespace"
    info = kopf.ConnectionInfo(
        server=f"https://{f'[{host}]' if ':' in host else host}:{port}",
        ca_path=str(root / "ca.crt"),
        token=token.token(),
        default_namespace=ns_file.read_text().strip() if ns_file.exists() else None,
    )
    return Credentials(info, token)


def load_kubeconfig(path: str | os.PathLike | None = None, context: str | None = None) -> Credentials:
    """The named (or current) context of a kubeconfig. $KUBECONFIG may list several files; as in kubectl,
    the first file to define a name (or current-context) wins. exec and auth-provider plugins are not
    supported: use a token, token file or client certificate."""
    files = _kubeconfig_files(path)
    merged = _merge([_read_yaml(f) for f in files])
    name = context or merged["current-context"]
    if not name:
        raise ConfigError(f"no context given and no current-context in {', '.join(map(str, files))}")
    ctx = _named(merged, "contexts", name)
    cluster = _named(merged, "clusters", ctx.get("cluster", ""))
    user = _named(merged, "users", ctx.get("user", "")) if ctx.get("user") else {}
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise ConfigError(f"user {ctx.get('user')!r}: `{plugin}` credentials are not supported")
    if not cluster.get("server"):
        raise ConfigError(f"cluster {ctx.get('cluster')!r} has no server")
    base = {key: Path(f).resolve().parent for key, f in merged["origin"].items()}

    def rel(section: str, owner: str, key: str, node: dict) -> str | None:
        value = node.get(key)
        return str(base[(section, owner)] / value) if value else None

    cname, uname = ctx.get("cluster", ""), ctx.get("user", "")
    token_path = rel("users", uname, "tokenFile", user)
    token_file = TokenFile(Path(token_path)) if token_path and not user.get("token") else None
    info = kopf.ConnectionInfo(
        server=cluster["server"],
        ca_path=rel("clusters", cname, "certificate-authority", cluster),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=user.get("token") or (token_file.token() if token_file else None),
        username=user.get("username"),
        password=user.get("password"),
        certificate_path=rel("users", uname, "client-certificate", user),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=rel("users", uname, "client-key", user),
        private_key_data=user.get("client-key-data"),
        default_namespace=ctx.get("namespace"),
    )
    return Credentials(info, token_file)


def _kubeconfig_files(path: str | os.PathLike | None) -> list[Path]:
    if path is not None:
        return [Path(path)]
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    files = [p for p in listed if p.exists()] if listed else [Path.home() / ".kube" / "config"]
    if not files or not files[0].exists():
        raise ConfigError(f"no kubeconfig found (looked at {', '.join(map(str, listed or files))})")
    return files


def _read_yaml(path: Path) -> tuple[Path, dict]:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read kubeconfig {path}: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path} is not a mapping")
    return path, doc


def _merge(docs: list[tuple[Path, dict]]) -> dict:
    """First definition of each cluster/user/context name wins; remember which file it came from, since
    relative paths in it are relative to that file."""
    merged: dict = {"current-context": "", "clusters": {}, "users": {}, "contexts": {}, "origin": {}}
    for path, doc in docs:
        merged["current-context"] = merged["current-context"] or doc.get("current-context", "")
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(section) or []:
                name = entry.get("name", "")
                if name not in merged[section]:
                    merged[section][name] = entry.get(inner) or {}
                    merged["origin"][(section, name)] = path
    return merged


def _named(merged: dict, section: str, name: str) -> dict:
    try:
        return merged[section][name]
    except KeyError:
        known = ", ".join(sorted(merged[section])) or "none"
        raise ConfigError(f"kubeconfig has no {section[:-1]} {name!r} (has: {known})") from None
