"""The operator's /metrics: the text exposition (format 0.0.4) of its registry and of the model's gauges.

prometheus_client writes each sample on its own (every label name validated and escaped, every value formatted),
~22 µs a line. The model's gauges are a series per GPU and per container: at 1,000 nodes x 8 GPUs and 5,000 pods,
82k lines, which took ~1.9 s of a core a scrape, holding the GIL that the scheduler's loop needs. `GaugeWriter`
writes the same bytes (a test compares them with prometheus_client's): it keeps each node's lines from one
scrape to the next while the node and what its pods hold are the same objects, each series' `name{labels}`
while it exists, and formats each distinct value once a scrape. The counters and the histogram stay
prometheus_client's.

The answer is never joined whole (12 MB at that size): each node's lines are kept as bytes, and /metrics sends
them, or gzips them, in pieces of about `CHUNK_BYTES`. Joined whole and then encoded, the answer held the
operator's RSS 61 MB over the model's from the first scrape on; in pieces 36 MB, the text and heads kept for the
next scrape (bench/operator_scrape.py --memory, 1,000 nodes x 8 GPUs, 5,000 pods).
"""
from __future__ import annotations

import socket
import threading
import zlib
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import NamedTuple
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, ThreadingWSGIServer, gzip_accepted
from prometheus_client.utils import floatToGoString

#: gzip level of a compressed answer: prometheus_client's 9 took 7-8x the CPU of 1 on this text for a 15% smaller answer
#: (bench/operator_scrape.py: 284 against 34 ms at 1,000 nodes x 8 GPUs)
GZIP_LEVEL = 1
#: Bytes per piece of an answer: small enough that no scrape allocates the whole text at once, large enough that
#: a 12 MB answer is ~50 socket writes, not one per node.
CHUNK_BYTES = 1 << 18

Samples = dict[str, dict[tuple[str, ...], float]]


class GaugeWriter:
    """Gauge families (name, help, label names) written as text, in the order given; safe to call from
    concurrent scrape threads (each builds its own caches and the last one kept wins).

    `chunks` takes the cluster's samples and, apart, its parts (a node's series): a part whose token holds the
    same objects as at the last scrape is written from the text kept for it, so a scrape costs what changed
    since the last one, not a line per series."""

    def __init__(self, families: Iterable[tuple[str, str, tuple[str, ...]]]):
        self._families = [(name, _header(name, help_text), labels) for name, help_text, labels in families]
        self._heads: dict[str, dict[tuple[str, ...], str]] = {}  # family -> label values -> 'name{...} '
        self._parts: dict[Hashable, _Part] = {}

    def chunks(self, samples: Samples, parts: Iterable[tuple[Hashable, tuple, Callable[[], Samples]]] = ()
               ) -> list[bytes]:
        """`samples`, then each family's series of every part (key, token, a function giving its samples), in
        pieces: a family's header and cluster lines, then each part's lines as kept (not copied)."""
        values: dict[float, str] = {}
        kept, fresh, texts = self._parts, {}, []
        for key, token, compute in parts:
            part = kept.get(key)
            if part is None or not _same(part.token, token):
                part = self._part(token, compute(), part.heads if part is not None else {}, values)
            fresh[key] = part
            texts.append(part.text)
        self._parts = fresh  # only this scrape's parts: a gone node's text and heads are dropped
        out: list[bytes] = []
        heads: dict[str, dict[tuple[str, ...], str]] = {}
        for name, header, labels in self._families:
            heads[name] = {}
            lines = _lines(name, labels, samples.get(name, {}), self._heads.get(name, {}), heads[name], values)
            out.append((header + lines).encode())
            out.extend(text[name] for text in texts if name in text)
        self._heads = heads  # only this scrape's series: a gone pod's are dropped
        return out

    def _part(self, token: tuple, samples: Samples, kept: dict, values: dict[float, str]) -> _Part:
        part = _Part(token, {}, {})
        for name, _, labels in self._families:
            series = samples.get(name)
            if series:
                part.heads[name] = {}
                part.text[name] = _lines(name, labels, series, kept.get(name, {}), part.heads[name], values).encode()
        return part


class _Part(NamedTuple):
    token: tuple  # what the text was written from (compared item by item, by identity)
    heads: dict[str, dict[tuple[str, ...], str]]
    text: dict[str, bytes]  # family -> its lines


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _lines(name: str, labels: tuple[str, ...], series: dict[tuple[str, ...], float], kept: dict, heads: dict,
           values: dict[float, str]) -> str:
    """`series` as lines; each head taken from `kept` where there, and put in `heads`; each distinct value
    formatted once (`values`)."""
    out = []
    for key, value in series.items():
        head = kept.get(key)
        if head is None:
            head = _head(name, labels, key)
        heads[key] = head
        text = values.get(value)
        if text is None:
            text = values[value] = floatToGoString(value)
        out.append(head + text + "\n")
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


def regroup(chunks: Iterable[bytes], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """`chunks` in order, joined into pieces of at least `size` bytes (the last one may be shorter)."""
    group: list[bytes] = []
    held = 0
    for chunk in chunks:
        group.append(chunk)
        held += len(chunk)
        if held >= size:
            yield b"".join(group)
            group, held = [], 0
    if group:
        yield b"".join(group)


def gzipped(chunks: Iterable[bytes], level: int = GZIP_LEVEL) -> list[bytes]:
    """One gzip member of `chunks`, compressed piece by piece (the whole text is never held at once)."""
    z = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16+: gzip's header and trailer
    out = [z.compress(piece) for piece in regroup(chunks)]
    out.append(z.flush())
    return [piece for piece in out if piece]


def serve(exposition: Callable[[], list[bytes]], port: int, addr: str = "0.0.0.0") -> ThreadingWSGIServer:
    """Serve the pieces `exposition()` gives on every GET (HEAD: its headers only) from a daemon thread, gzipped
    when asked; returns the server (`shutdown()` it). OSError if the port is taken."""

    def app(environ, start_response):
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        chunks = exposition()
        headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzipped(chunks)  # small: held whole, to know its length
            length = sum(map(len, body))
            headers.append(("Content-Encoding", "gzip"))
        else:
            body, length = regroup(chunks), sum(map(len, chunks))
        headers.append(("Content-Length", str(length)))
        start_response("200 OK", headers)
        return [] if environ["REQUEST_METHOD"] == "HEAD" else body  # HEAD: GET's headers, no body (RFC 9110 9.3.2)

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    server = make_server(addr, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="fgpu-metrics", daemon=True).start()
    return server
