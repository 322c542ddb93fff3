"""A small Prometheus HTTP API client (standard library only): range and instant queries, label values, and
the scrape interval, which Grafana's `$__rate_interval` depends on. Failures are PromError, one line each."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from fgpu_contracts.errors import InputError


class PromError(Exception):
    """Prometheus could not be reached, or refused a query; the message is one line."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]  # (unix time, value)


def check_url(url: str) -> str:
    """`url` without a trailing slash if it is an http(s) URL with a host; InputError naming --prometheus if not."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InputError(f"{url!r} is not a Prometheus URL", field="--prometheus",
                         allowed=["http://HOST:PORT", "https://HOST[:PORT][/PATH]"])
    try:
        parsed.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise InputError(f"{url!r} has a bad port", field="--prometheus",
                         allowed=["http://HOST:PORT with PORT 1-65535"]) from None
    return url.rstrip("/")


_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds in a Prometheus-style duration made of d/h/m/s parts (`15m`, `1h30m`); ValueError if not one or
    if it is zero."""
    m = _DURATION.match(text or "")
    if not text or m is None:
        raise ValueError(f"{text!r} is not a duration")
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return total


class Prometheus:
    def __init__(self, url: str, timeout_s: float = 15.0):
        self.url = check_url(url)
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, str] | list[tuple[str, str]] | None = None):
        """The `data` of a JSON API answer; PromError on anything else."""
        query = urllib.parse.urlencode(params or {})
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read().decode())
        except urllib.error.HTTPError as e:
            try:
                detail = json.loads(e.read().decode()).get("error", e.reason)
            except (ValueError, OSError):
                detail = e.reason
            raise PromError(f"{self.url} answered HTTP {e.code} to {path}: {detail}") from None
        except urllib.error.URLError as e:
            raise PromError(f"{self.url} is unreachable: {e.reason}") from None
        except (OSError, ValueError) as e:  # timeouts, resets, a body that is not JSON
            raise PromError(f"{self.url} gave no Prometheus answer to {path}: {e}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PromError(f"{self.url}: {path} failed: {body.get('error') if isinstance(body, dict) else body}")
        return body["data"]

    def ready(self) -> str:
        """Prometheus' version, which also proves the URL is a Prometheus."""
        return str(self._get("/api/v1/status/buildinfo").get("version", "?"))

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Series]:
        data = self._get("/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{step_s:g}"})
        return [Series(r["metric"], tuple((float(t), float(v)) for t, v in r["values"])) for r in data["result"]]

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        """An instant query; a scalar or string result comes back as one series without labels."""
        data = self._get("/api/v1/query", {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})})
        if data["resultType"] in ("scalar", "string"):
            t, v = data["result"]
            return [Series({}, ((float(t), float(v)),))]
        key = "values" if data["resultType"] == "matrix" else "value"
        return [Series(r["metric"], tuple((float(t), float(v)) for t, v in
                                          (r[key] if key == "values" else [r[key]]))) for r in data["result"]]

    def label_values(self, selector: str, label: str, start: float, end: float) -> list[str]:
        """Values `label` takes on the series `selector` matches in [start, end] (Grafana's label_values)."""
        data = self._get(f"/api/v1/label/{urllib.parse.quote(label)}/values",
                         [("match[]", selector), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")])
        return sorted(data)

    def scrape_interval_s(self, default: float = 15.0) -> float:
        """The longest scrape interval of the active targets (Grafana's default for $__rate_interval), or
        `default` when no target says."""
        targets = self._get("/api/v1/targets", {"state": "active"}).get("activeTargets", [])
        intervals = []
        for t in targets:
            try:
                intervals.append(parse_duration(t.get("scrapeInterval", "")))
            except ValueError:
                continue
        return float(max(intervals)) if intervals else default
