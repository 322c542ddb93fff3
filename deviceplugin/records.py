"""Writing `fgpu.io/allocated` off Allocate's critical path, without losing it.

A pod patch costs the plugin ~1 ms of CPU (the Kubernetes client) plus the apiserver's own work and the watch
event that echoes it back; done while the kubelet sends the next Allocate, it competes for the GIL and the CPU
and sets Allocate's tail latency. So the recorder queues records (one patch per pod, coalescing its
containers) and writes them in the gaps between Allocates: once none has come for `quiet_s`, or once a record
has waited `max_delay_s`, whichever is first.

Crash safety: before Allocate replies, each record is appended to a journal file (one write(2), no fsync:
the failure to survive is the plugin process dying, not the node, whose pods die with it). A restarted plugin
replays the journal: records are queued again and reported by `journaled()` so Allocate treats them as taken
until the patches land. The journal is emptied whenever every queued record has been written. The journal is
locked (flock) while open: two plugins sharing one would truncate each other's records, so the second refuses.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("fgpu.deviceplugin.records")

PodKey = tuple[str, str, str]  # (uid, namespace, name)
# write(pod key, containers to add to the record) -> True once written, False to retry later
Writer = Callable[[PodKey, frozenset[str]], bool]


class JournalBusy(Exception):
    """Another live process holds the journal."""


class AllocationRecorder:
    def __init__(self, write: Writer, journal_path: str | None = None, quiet_s: float = 0.005,
                 max_delay_s: float = 1.0, retry_s: float = 1.0) -> None:
        self._write = write
        self.quiet_s, self.max_delay_s, self.retry_s = quiet_s, max_delay_s, retry_s
        self._cond = threading.Condition()
        self._queue: dict[PodKey, tuple[set[str], float]] = {}  # insertion order = oldest first
        self._last_record = 0.0
        self._closing = False
        self._fd: int | None = None
        self._replayed: set[tuple[str, str]] = set()
        if journal_path:
            try:
                self._fd = os.open(journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError as err:  # the CLI checks the state directory first: this is a race or odd mount
                log.warning("no allocation journal (%s): a plugin crash may lose unwritten records", err)
            if self._fd is not None:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(self._fd)
                    raise JournalBusy(f"{journal_path} is in use by another running plugin") from None
            self._replay(journal_path)
        self._thread = threading.Thread(target=self._loop, name="pod-record", daemon=True)
        self._thread.start()

    def _replay(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    uid, namespace, name, container = json.loads(line)
                except (ValueError, TypeError):
                    continue  # a torn last line from a crash mid-write
                key = (str(uid), str(namespace), str(name))
                self._queue.setdefault(key, (set(), time.monotonic()))[0].add(str(container))
                self._replayed.add((key[0], str(container)))
        if self._replayed:
            log.info("replaying %d unwritten allocation records from %s", len(self._replayed), path)

    def journaled(self) -> set[tuple[str, str]]:
        """(pod uid, container) pairs found in the journal at start: allocated, maybe not yet on the pod."""
        return set(self._replayed)

    def record(self, key: PodKey, container: str) -> None:
        line = (json.dumps([*key, container]) + "\n").encode()
        with self._cond:
            if self._fd is not None:
                os.write(self._fd, line)
            now = time.monotonic()
            self._last_record = now
            was_empty = not self._queue
            self._queue.setdefault(key, (set(), now))[0].add(container)
            if was_empty:
                self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def _next(self) -> tuple[PodKey, frozenset[str]] | None:
        with self._cond:
            while True:
                if not self._queue:
                    if self._fd is not None:
                        os.ftruncate(self._fd, 0)  # everything written: nothing to replay
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                key, (containers, since) = next(iter(self._queue.items()))
                now = time.monotonic()
                wait = min(self._last_record + self.quiet_s - now, since + self.max_delay_s - now)
                if self._closing or wait <= 0:
                    del self._queue[key]
                    return key, frozenset(containers)
                self._cond.wait(wait)

    def _loop(self) -> None:
        while (item := self._next()) is not None:
            key, containers = item
            try:
                ok = self._write(key, containers)
            except Exception as err:  # the writer logs its own errors; never let the thread die
                log.warning("cannot record allocation on %s/%s: %s", key[1], key[2], err)
                ok = False
            if not ok:
                with self._cond:
                    entry = self._queue.setdefault(key, (set(), time.monotonic() + self.retry_s))
                    entry[0].update(containers)
                    if self._closing:
                        return  # the journal keeps it for the next start
                    self._cond.wait(self.retry_s)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (the journal keeps whatever could not be written), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
