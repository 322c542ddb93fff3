"""`fgpu inspect check --daemon-metrics [NODE=]URL`: the contexts each node daemon holds open, read from its
Prometheus endpoint (the one export of the daemon's state that reaches off the node), for the audit's
"no context outlives its pod" and "no context for a pod placed elsewhere" checks.

The node is the scrape's own `Hostname` label (the daemon's node name) unless the value names it
(`NODE=URL`, for a daemon started with another name). Every bad value is one InputError naming the option.
"""
from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from fgpu_contracts.errors import InputError

from .audit import Handed, handed_from_daemon_metrics

OPTION = "--daemon-metrics"
ALLOWED = ("[NODE=]http://HOST:PORT[/metrics]", "[NODE=]https://HOST:PORT[/metrics]")
TIMEOUT_S = 10.0
MAX_BYTES = 64 << 20  # a daemon's scrape is kilobytes per pod; more is not a daemon


@dataclass(frozen=True)
class Target:
    node: str | None  # None: the scrape's Hostname label says
    url: str


def parse_target(value: str) -> Target:
    """`[NODE=]URL`, checked before anything is read."""
    node, sep, url = value.partition("=") if "=" in value.split("://", 1)[0] else ("", "", value)
    if sep and not node.strip():
        raise _bad(value, "names an empty node before '='")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError as e:
        raise _bad(value, f"is not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(value, "is not an http(s) URL with a host")
    if not parts.path or parts.path == "/":
        url = urllib.parse.urlunsplit(parts._replace(path="/metrics"))
    return Target(node.strip() or None, url)


def _bad(value: str, why: str) -> InputError:
    return InputError(f"{value!r} {why}", field=OPTION, allowed=ALLOWED)


def read_contexts(targets: list[Target]) -> dict[str, list[Handed]]:
    """node -> the contexts its daemon holds open. One node named twice is refused (its contexts would be
    checked against a mixture)."""
    out: dict[str, list[Handed]] = {}
    for target in targets:
        text = _fetch(target.url)
        node = target.node or _hostname(text, target.url)
        if node in out:
            raise InputError(f"node {node} is given twice ({target.url})", field=OPTION,
                             allowed=["one URL per node daemon"])
        try:
            out[node] = handed_from_daemon_metrics(node, text)
        except ValueError as e:
            raise InputError(f"{target.url} is not a Prometheus text scrape ({' '.join(str(e).split())})",
                             field=OPTION) from None
    return out


def _fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) checked above
            body = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise InputError(f"{url} answered {e.code} {e.reason}", field=OPTION) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise InputError(f"cannot scrape {url}: {' '.join(str(reason).split())}", field=OPTION) from None
    if len(body) > MAX_BYTES:
        raise InputError(f"{url} sent more than {MAX_BYTES} bytes: not a node daemon's scrape", field=OPTION)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{url} is not a Prometheus text scrape (not UTF-8)", field=OPTION) from None


def _hostname(text: str, url: str) -> str:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.labels.get("Hostname") or sample.labels.get("hostname")
                if name:
                    return name
    except ValueError as e:
        raise InputError(f"{url} is not a Prometheus text scrape ({' '.join(str(e).split())})",
                         field=OPTION) from None
    raise InputError(f"{url} names no node (no Hostname label): not a node daemon, or give NODE={url}",
                     field=OPTION, allowed=ALLOWED)
