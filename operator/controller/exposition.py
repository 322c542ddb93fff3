"""The operator's /metrics: the text exposition (format 0.0.4) of its registry and of the model's gauges.

prometheus_client writes each sample on its own (every label name validated and escaped, every value formatted),
~22 µs a line. The model's gauges are a series per GPU and per container: at 1,000 nodes x 8 GPUs and 5,000 pods,
82k lines, which took ~1.9 s of a core a scrape, holding the GIL that the scheduler's loop needs. `GaugeWriter`
writes the same bytes (a test compares them with prometheus_client's) keeping each series' `name{labels}` from
one scrape to the next and formatting each distinct value once a scrape. The counters and the histogram stay
prometheus_client's.
"""
from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, ThreadingWSGIServer, gzip_accepted
from prometheus_client.utils import floatToGoString

#: gzip level of a compressed answer: prometheus_client's 9 took 7-8x the CPU of 1 on this text for a 15% smaller answer
#: (bench/operator_scrape.py: 284 against 34 ms at 1,000 nodes x 8 GPUs)
GZIP_LEVEL = 1

Samples = dict[str, dict[tuple[str, ...], float]]


class GaugeWriter:
    """Gauge families (name -> help, label names) written as text, in the order given; safe to call from
    concurrent scrape threads (each builds its own cache and the last one kept wins)."""

    def __init__(self, families: Iterable[tuple[str, str, tuple[str, ...]]]):
        self._families = [(name, _header(name, help_text), labels) for name, help_text, labels in families]
        self._heads: dict[str, dict[tuple[str, ...], str]] = {}  # family -> label values -> 'name{...} '

    def write(self, samples: Samples) -> str:
        out: list[str] = []
        values: dict[float, str] = {}
        for name, header, labels in self._families:
            out.append(header)
            kept, heads = self._heads.get(name, {}), {}
            for key, value in samples.get(name, {}).items():
                head = kept.get(key)
                if head is None:
                    head = _head(name, labels, key)
                heads[key] = head
                text = values.get(value)
                if text is None:
                    text = values[value] = floatToGoString(value)
                out.append(head + text + "\n")
            self._heads[name] = heads  # only the series of this scrape: a gone pod's are dropped
        return "".join(out)


def _header(name: str, help_text: str) -> str:
    escaped = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} gauge\n"


def _head(name: str, labels: tuple[str, ...], values: tuple[str, ...]) -> str:
    """`name{a="x",b="y"} ` with the labels sorted by name and the values escaped, as prometheus_client writes."""
    if not labels:
        return name + " "
    pairs = sorted(zip(labels, values, strict=True))
    return name + "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs) + "} "


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the base class's name)
        pass


def serve(exposition: Callable[[], bytes], port: int, addr: str = "0.0.0.0") -> ThreadingWSGIServer:
    """Serve `exposition()` on every GET from a daemon thread (gzip when asked); returns the server
    (`shutdown()` it). OSError if the port is taken."""

    def app(environ, start_response):
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        body = exposition()
        headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    server = make_server(addr, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="fgpu-metrics", daemon=True).start()
    return server
