"""The allocation recorder: records written in the gaps between Allocates, one patch per pod, and a journal
that survives a plugin crash (records.py)."""
import os
import threading
import time

from deviceplugin.records import AllocationRecorder

A = ("uid-a", "ns", "pod-a")
B = ("uid-b", "ns", "pod-b")


class FakeWriter:
    def __init__(self, ok=True):
        self.ok = ok
        self.calls = []
        self.cond = threading.Condition()

    def __call__(self, key, containers):
        with self.cond:
            self.calls.append((key, set(containers)))
            self.cond.notify_all()
        return self.ok

    def wait(self, n, timeout=5.0):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= n, timeout), self.calls
            return list(self.calls)


def test_waits_for_a_quiet_gap_and_coalesces_a_pods_containers():
    writer = FakeWriter()
    rec = AllocationRecorder(writer, quiet_s=0.3, max_delay_s=30)
    try:
        rec.record(A, "a")
        rec.record(A, "b")
        rec.record(B, "main")
        assert writer.calls == []  # still inside the quiet window: nothing competes with the next Allocate
        calls = writer.wait(2)
        assert calls == [(A, {"a", "b"}), (B, {"main"})]  # oldest pod first, one write each
    finally:
        rec.close()


def test_written_after_max_delay_even_without_a_gap():
    writer = FakeWriter()
    rec = AllocationRecorder(writer, quiet_s=60, max_delay_s=0.1)
    try:
        rec.record(A, "a")
        assert writer.wait(1) == [(A, {"a"})]
    finally:
        rec.close()


def test_close_flushes_what_is_queued():
    writer = FakeWriter()
    rec = AllocationRecorder(writer, quiet_s=60, max_delay_s=60)
    rec.record(A, "a")
    rec.close()
    assert writer.calls == [(A, {"a"})]


def test_journal_replays_unwritten_records_after_a_crash_and_empties_once_written(tmp_path):
    journal = str(tmp_path / "journal")
    down = FakeWriter(ok=False)  # apiserver unreachable: nothing gets written
    rec = AllocationRecorder(down, journal, quiet_s=60, max_delay_s=60, retry_s=60)
    rec.record(A, "a")
    rec.record(B, "main")
    rec.close(timeout=2)  # the process "dies" with both records unwritten
    assert os.path.getsize(journal) > 0

    with open(journal, "a") as fh:
        fh.write('["uid-c", "ns", "po')  # torn last line of a crash mid-write: skipped
    up = FakeWriter()
    rec = AllocationRecorder(up, journal, quiet_s=0.01, max_delay_s=60)
    try:
        assert rec.journaled() == {("uid-a", "a"), ("uid-b", "main")}
        assert sorted(up.wait(2)) == [(A, {"a"}), (B, {"main"})]
        deadline = time.monotonic() + 5
        while os.path.getsize(journal) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.getsize(journal) == 0
    finally:
        rec.close()


def test_failed_write_is_retried():
    writer = FakeWriter(ok=False)
    rec = AllocationRecorder(writer, quiet_s=0.01, max_delay_s=60, retry_s=0.05)
    try:
        rec.record(A, "a")
        calls = writer.wait(2)
        assert calls[:2] == [(A, {"a"}), (A, {"a"})]
    finally:
        writer.ok = True
        rec.close()
