"""LeaderElector on a fake apiserver's Lease store, with short timings (lease 2 s, deadline 1 s, retry 0.2 s)."""
from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
from fakeapi import LEASES, credentials, until
from fgpu_operator.kube import ApiSession, LeaderElector, Limits
from fgpu_operator.objects import parse_time, timestamp

LEASE = f"{LEASES}ns/leases/sched"
FAST = {"lease_s": 2, "renew_deadline_s": 1.0, "retry_s": 0.2}


def elector(api, identity: str = "me", **kw) -> LeaderElector:
    return LeaderElector(api, "sched", "ns", identity, **{**FAST, **kw})


def held_by(fake_api, holder: str, renewed_ago_s: float, transitions: int = 0) -> None:
    stamp = timestamp(micro=True, at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=renewed_ago_s))
    fake_api.leases[LEASE] = {"metadata": {"name": "sched", "namespace": "ns", "resourceVersion": "1"}, "spec": {
        "holderIdentity": holder, "leaseDurationSeconds": 2, "acquireTime": stamp, "renewTime": stamp,
        "leaseTransitions": transitions}}


async def test_first_candidate_creates_the_lease_and_renews_it(fake_api, api):
    started = []
    e = elector(api, on_started_leading=lambda: started.append(1))
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 2)
        assert e.is_leader and started == [1]
        first = fake_api.leases[LEASE]["spec"]
        assert (first["holderIdentity"], first["leaseTransitions"], first["leaseDurationSeconds"]) == ("me", 0, 2)
        await until(lambda: fake_api.leases[LEASE]["spec"]["renewTime"] != first["renewTime"])
        renewed = fake_api.leases[LEASE]["spec"]
        assert (renewed["acquireTime"], renewed["leaseTransitions"]) == (first["acquireTime"], 0)
        assert fake_api.seen("PUT", LEASE)[0].body["metadata"]["resourceVersion"]  # optimistic concurrency


async def test_a_live_lease_is_taken_only_when_it_expires(fake_api, api):
    held_by(fake_api, "other", renewed_ago_s=0, transitions=4)
    expiry = parse_time(fake_api.leases[LEASE]["spec"]["renewTime"]) + dt.timedelta(seconds=2)
    e = elector(api, retry_s=0.9)  # polling alone would be up to 0.9 s late
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 4)
        late = (dt.datetime.now(dt.UTC) - expiry).total_seconds()
        assert 0 <= late < 0.4, f"took over {late:.2f} s after expiry"  # woke at expiry, not on a later poll
        assert (e.holder, e.transitions) == ("me", 5)


async def test_a_long_dead_lease_is_taken_at_once(fake_api, api):
    held_by(fake_api, "gone", renewed_ago_s=60)
    e = elector(api)
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 0.5)
        assert e.transitions == 1


async def test_leader_steps_down_within_the_renew_deadline_when_renews_fail(fake_api, api):
    stopped = []
    e = elector(api, on_stopped_leading=lambda: stopped.append(1))
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 2)
        fake_api.lease_status = 500
        failing = time.monotonic()
        await asyncio.wait_for(e.lost_leadership.wait(), 2)
        assert time.monotonic() - failing < 1.5  # by the renew deadline (1 s), before the lease (2 s) ends
        assert not e.is_leader and not e.became_leader.is_set() and stopped == [1]
        fake_api.lease_status = 0  # the apiserver is back: campaign again
        await asyncio.wait_for(e.became_leader.wait(), 2)


async def test_is_leader_turns_false_on_time_while_a_renew_hangs(fake_api, api):
    e = elector(api)
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 2)
        fake_api.delay_s = 5  # the apiserver stops answering
        hung = time.monotonic()
        await until(lambda: not e.is_leader, timeout=2)
        assert time.monotonic() - hung < 1.2  # the renew deadline, however long the request hangs


async def test_clean_exit_releases_the_lease(fake_api, api):
    e = elector(api)
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 2)
    spec = fake_api.leases[LEASE]["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("", 1, 0)
    assert e.lost_leadership.is_set() and not e.is_leader


async def test_exit_without_release_leaves_the_lease(fake_api, api):
    e = elector(api, release_on_cancel=False)
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 2)
    assert fake_api.leases[LEASE]["spec"]["holderIdentity"] == "me"


async def test_a_released_lease_is_taken_on_the_next_poll(fake_api, api):
    held_by(fake_api, "", renewed_ago_s=0, transitions=2)
    e = elector(api)
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 0.5)
        assert e.transitions == 3


def test_timings_must_nest(api):
    with pytest.raises(ValueError, match="retry_s < renew_deadline_s < lease_s"):
        LeaderElector(api, lease_s=10, renew_deadline_s=10, retry_s=2)


def test_default_identity_is_the_pod_name_and_a_suffix(api, monkeypatch):
    monkeypatch.setenv("POD_NAME", "fgpu-scheduler-7d9f")
    a, b = LeaderElector(api).identity, LeaderElector(api).identity
    assert a.startswith("fgpu-scheduler-7d9f_") and a != b


async def test_a_standby_that_keeps_losing_races_polls_and_does_not_spin(fake_api, api):
    held_by(fake_api, "gone", renewed_ago_s=60)
    fake_api.script("PUT", LEASE, *[409] * 100)  # every takeover attempt loses the race
    async with elector(api).running():
        await asyncio.sleep(1.0)  # a window to count requests in, not a synchronisation
    assert len(fake_api.seen("GET", LEASE)) <= 1.0 / FAST["retry_s"] + 2


async def test_a_failing_callback_does_not_stop_the_election(fake_api, api):
    def boom() -> None:
        raise RuntimeError("caller's bug")

    e = elector(api, on_started_leading=boom)
    async with e.running():
        await asyncio.wait_for(e.became_leader.wait(), 2)
        first = fake_api.leases[LEASE]["spec"]["renewTime"]
        await until(lambda: fake_api.leases[LEASE]["spec"]["renewTime"] != first)  # still renewing
        assert e.is_leader


async def test_lease_requests_do_not_queue_behind_a_rate_limited_burst(fake_api):
    async with ApiSession(credentials(fake_api.url), Limits(qps=0.5, burst=1)) as shared:
        burst = [asyncio.create_task(shared.request("POST", "/api/v1/namespaces/ns/events", body={}))
                 for _ in range(10)]  # 20 s of the bucket
        e = elector(shared)
        async with e.running():
            await asyncio.wait_for(e.became_leader.wait(), 1)
        for task in burst:
            task.cancel()
        await asyncio.gather(*burst, return_exceptions=True)
