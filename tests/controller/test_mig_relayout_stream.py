"""Property test of dynamic MIG through the scheduler and its change state (not the planner alone): random
streams of MIG pods (profiles, kube priorities), departures, and a node that applies, fails or delays the
changes it is asked for. After every step: no over-allocated GPU or instance (`LiveCluster.violations`), no
instance bound to two running pods, never more than one change in flight per GPU, and no change ever drops
or moves an instance a bound pod runs on (checked when the node applies it)."""
import asyncio
import json

from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.placement.live import LiveCluster
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scheduler_fakes import FakeApi, FakeEvents
from test_mig_relayout import ALL_1G, gpunode_obj, layout_gpu, mig_pod, node_obj

from fgpu_contracts import keys

NODES = ("p", "q")
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
STEP = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(PROFILES), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("node"), st.sampled_from(("done", "done", "failed", "wait")), st.integers(0, 1)),
)


class Node:
    """The node side: each node's one dynamic GPU, the reports it made, what each bound pod runs on."""

    def __init__(self, s: Scheduler):
        self.s = s
        self.layouts = {n: list(ALL_1G) for n in NODES}
        self.reports: dict[str, dict] = {}

    def publish(self, node: str) -> None:
        report = self.reports.get(node)
        self.s.on_gpunode("MODIFIED", gpunode_obj(node, [layout_gpu(node, 0, self.layouts[node], report)],
                                                  {"migChanges": self.s.mig.status_rows(node)}))

    def answer(self, node: str, outcome: str, running: dict[str, tuple[str, str]]) -> None:
        pending = [c for c in self.s.mig.in_flight() if c.node == node]
        if not pending or outcome == "wait":
            return
        (change,) = pending  # one GPU per node: never two changes in flight on it
        if outcome == "failed":
            self.reports[node] = {"id": change.id, "phase": "Failed", "message": "refused"}
        else:
            kept = set(change.layout)
            for uid, (n, uuid) in running.items():  # never under a running pod
                if n == node:
                    _, _, _, p, s = uuid.rsplit("-", 4)
                    assert (p, int(s)) in kept, f"change {change.id} drops {uuid}, which pod {uid} runs on"
            self.layouts[node] = sorted(change.layout, key=lambda x: x[1])
            self.reports[node] = {"id": change.id, "phase": "Done"}
        self.publish(node)


async def settle(s: Scheduler) -> None:
    """`Scheduler.settle`: every queued pod decided, every write ended. Not `drain()`: with no write in flight it
    returns without suspending, before the run loop has popped the step's pod (the test then checked nothing),
    and a loop of it spins without ever letting the run loop in. A scheduler that never settles fails the test,
    naming what is stuck."""
    try:
        await asyncio.wait_for(s.settle(), 10)
    except TimeoutError:
        raise AssertionError(f"not settled after 10 s: {[t.get_coro() for t in s._tasks]}, queue {len(s.queue)}, "
                             f"held for changes {list(s.mig.waiting)}") from None


def bindings(api: FakeApi) -> dict[str, tuple[str, str]]:
    out = {}
    for _, path, body in api.calls:
        if path.endswith("/binding"):
            device = json.loads(body["metadata"]["annotations"][keys.ASSIGNMENT])["containers"][0]["devices"][0]
            out[path.split("/")[-2]] = (body["target"]["name"], device["uuid"])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=5, max_size=40))
# a pod whose re-layout failed on one node, re-laid on the other: it must not keep the failed one's instance
@example([("delete", 0, 0), ("pod", "2g.20gb", 0), ("pod", "2g.20gb", 0), ("node", "failed", 1), ("node", "failed", 0)])
def test_random_streams_never_over_allocate_or_re_lay_a_running_instance(steps):
    async def scenario():
        api = FakeApi()
        s = Scheduler(LiveCluster(policy="binpack"), api, FakeEvents())
        loop = asyncio.create_task(s.run())
        node = Node(s)
        for n in NODES:
            s.on_gpunode("ADDED", gpunode_obj(n, [layout_gpu(n, 0, ALL_1G)]))
            s.on_node("ADDED", node_obj(n))
        made, gone = [], set()
        for k, (kind, a, b) in enumerate(steps):
            if kind == "pod":
                pod = mig_pod(f"m{k}", a)
                pod["spec"]["priority"] = b * 1000
                made.append(pod)
                s.on_pod("ADDED", pod)
            elif kind == "delete" and made:
                pod = made[a % len(made)]
                gone.add(pod["metadata"]["uid"])
                s.on_pod("DELETED", pod)
            elif kind == "node":
                node.answer(NODES[b], a, {u: v for u, v in bindings(api).items() if u not in gone})
            await settle(s)
            running = {u: v for u, v in bindings(api).items() if u not in gone}
            assert s.live.violations() == [], s.live.violations()
            held = [v for v in running.values()]
            assert len(held) == len(set(held)), f"an instance bound twice: {held}"
            for uid, (n, uuid) in running.items():  # every running pod's instance exists on its GPU as is
                _, _, _, p, st_ = uuid.rsplit("-", 4)
                assert (p, int(st_)) in node.layouts[n], (uid, uuid, node.layouts[n])
            for n in NODES:
                assert len([c for c in s.mig.in_flight() if c.node == n]) <= 1
            for pod in made:  # every pod was decided: bound, held for a change in flight, or parked with a reason
                uid = pod["metadata"]["uid"]
                if uid in gone or uid in running:
                    continue
                if uid in s.mig.waiting:
                    assert s.mig.pod_changes(uid), f"pod {uid} held for changes none of which is in flight"
                else:
                    assert uid in s.parked and s.parked[uid].reason, (uid, s.parked.get(uid))
        loop.cancel()

    asyncio.run(scenario())
