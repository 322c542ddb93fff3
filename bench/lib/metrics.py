"""What the bench reads from /metrics: the scheduler scraped during a run as Prometheus would, the operator's word
that a run's deletions were taken in, and the apiserver's count of the writes each bound pod cost."""
from __future__ import annotations

import contextlib
import threading
import time

from lib.common import log


class Scraper:
    """While in its `with`, a thread GETs `url` every `every` s (none: never), gzip accepted, as Prometheus does;
    `took` is each scrape's wall time, `errors` the scrapes that failed."""

    def __init__(self, url: str, every: float | None):
        self.url, self.every = url, every
        self.took: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Scraper:
        if self.every:
            self._thread = threading.Thread(target=self._loop, name="bench-scraper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        import urllib.request

        from devcluster.kubeplane import probe_context

        unverified = probe_context()  # kube-scheduler's self-signed serving certificate
        headers = {"Accept-Encoding": "gzip"}
        while not self._stop.wait(self.every):
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url, headers=headers), timeout=30,
                                            context=unverified if self.url.startswith("https") else None) as answer:
                    answer.read()
                self.took.append(time.perf_counter() - start)
            except OSError as err:
                if not self.errors:
                    log(f"  scraping {self.url}: {err}")
                self.errors += 1


def operator_value(port: int, name: str) -> float | None:
    """One unlabelled sample from the operator's /metrics; None when it cannot be read or has no such sample."""
    import urllib.request

    with contextlib.suppress(OSError):
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[-1])
    return None


def released(port: int, limit: float = 600.0) -> None:
    """Wait until the operator's /metrics shows no GPU allocated (it has seen every deletion): a CPU-starved
    operator still working through a backlog of deletions can look idle to `settle`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if operator_value(port, "fgpu_cluster_gpu_allocation_ratio") == 0:
            return
        time.sleep(1.0)
    log(f"  the operator still showed GPUs allocated {limit:.0f} s after the deletions")


def deletes_settled(plane, expect: float, quiet: float = 2.0, give_up: float = 60.0, step: float = 1.0,
                    limit: float = 300.0) -> tuple[float, float]:
    """Wait until the apiserver's count of pod DELETEs it served reaches `expect` and then stays still for `quiet`
    s (or stays still for `give_up` s short of it, or `limit` s pass); (the seconds until the last DELETE seen, how
    many of those expected never came). KWOK's pod-delete stage answers every pod the bench deletes with a DELETE of
    its own (a 404 by then: the bench deleted it with grace 0), and a CPU-starved KWOK sends them late: 4,000 for a
    4,000-pod run (apiserver audit log, 2026-11-27). Waiting only for a quiet spell let a KWOK that had not started
    yet go unnoticed: on 2026-11-28 up to 1.0 of them per bound pod fell inside the next run, taking the apiserver's
    and KWOK's CPU from that run's scheduler; so the wait counts them in."""
    start = last_change = time.perf_counter()
    count = apiserver_writes(plane).get("DELETE pods", 0.0)
    while time.perf_counter() - start < limit:
        time.sleep(step)
        now = apiserver_writes(plane).get("DELETE pods", 0.0)
        if now != count:
            count, last_change = now, time.perf_counter()
        still = time.perf_counter() - last_change
        if (count >= expect and still >= quiet) or still >= give_up:
            break
    return max(0.0, last_change - start), max(0.0, expect - count)


WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def apiserver_writes(plane) -> dict[str, float]:
    """The apiserver's own count of write requests it served, by `VERB resource[/subresource]`
    (apiserver_request_total), so a run can say what each bound pod cost the apiserver. Only that counter's lines
    are parsed: the whole exposition (1.4 MB) takes 0.7 s of CPU to parse, and `deletes_settled` reads it every
    second."""
    from prometheus_client.parser import text_string_to_metric_families

    text = "\n".join(line for line in plane.metrics_text().splitlines()
                     if line.startswith("apiserver_request_total{"))
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("verb") not in WRITE_VERBS:
                continue
            what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            key = f"{labels['verb']} {what}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def writes_per_pod(before: dict[str, float], after: dict[str, float], bound: int) -> dict[str, float]:
    """Writes per bound pod during a run, leaving out the bench's own pod creations (`POST pods`)."""
    diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return {k: v / bound for k, v in sorted(diff.items()) if v > 0 and k != "POST pods" and bound}
