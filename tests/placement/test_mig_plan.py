"""The dynamic-MIG planner: re-lays only idle instances, into layouts simgpu accepts, and says what blocks it."""
import numpy as np
import pytest
from fgpu_operator.placement import Cluster, Framework, NodeSpec, Request, TargetWorkload, Unschedulable
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.mig_plan import NoRelayout, Relayout, apply_relayout, plan_relayout, room
from fgpu_operator.placement.model import GpuInfo, MigSlot
from fgpu_operator.placement.policies import make_policy
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu import mig

H100_PROFILES = [p.name for p in mig.profiles("H100") if not p.media_extensions]


def sevens(gpu: str) -> tuple[MigSlot, ...]:
    return tuple(MigSlot(f"{gpu}/1g@{s}", "1g.10gb", start=s) for s in range(7))


def node(name: str, *layouts: tuple[MigSlot, ...], dynamic: bool = True) -> NodeSpec:
    gpus = tuple(GpuInfo(f"{name}-gpu{i}", "H100", mig=lay, mig_dynamic=dynamic) for i, lay in enumerate(layouts))
    return NodeSpec(name, 64000, 262144, len(gpus), "H100", gpus=gpus)


def mig_request(name: str, profile: str, count: int = 1) -> Request:
    return Request(name, 1000, 1024, num_gpu=count, mig_profile=profile)


def hold(c: Cluster, name: str, uuid: str) -> None:
    profile = c.mig_slots[uuid][1]
    c.reserve(mig_request(name, profile), c.mig_slots[uuid][0], (), (uuid,))


def test_3g_on_an_all_1g_idle_gpu_gets_a_relayout_keeping_the_idle_instances_it_can():
    c = Cluster([node("a", sevens("a-gpu0"))])
    plan = plan_relayout(c, mig_request("p", "3g.40gb"))
    assert isinstance(plan, Relayout)
    (change,) = plan.changes
    assert [m.profile for m in change.create] == ["3g.40gb"]
    assert mig.placed_layout_problem("H100", [(m.profile, m.start) for m in change.layout]) is None
    assert len(change.destroy) == 3 and len(change.keep) == 4  # 3g at 4 needs slices 4-7; 1g at 0-3 stay
    apply_relayout(c, plan)
    assert c.mig_free["3g.40gb"][0] == 1 and c.mig_free["1g.10gb"][0] == 4


def test_a_busy_instance_is_never_relaid_and_the_reason_names_it():
    c = Cluster([node("a", sevens("a-gpu0"))])
    hold(c, "busy", "a-gpu0/1g@3")
    hold(c, "busy2", "a-gpu0/1g@5")
    plan = plan_relayout(c, mig_request("p", "3g.40gb"))
    assert isinstance(plan, NoRelayout)
    assert str(plan) == "a-gpu0: busy instance 1g.10gb@3 blocks 3g.40gb"


def test_a_gpu_with_a_busy_instance_in_the_way_loses_to_one_without():
    c = Cluster([node("a", sevens("a-gpu0"), sevens("a-gpu1"))])
    hold(c, "busy", "a-gpu0/1g@5")
    plan = plan_relayout(c, mig_request("p", "7g.80gb"))
    assert isinstance(plan, Relayout) and plan.changes[0].gpu == 1
    assert {m.uuid for m in plan.changes[0].destroy} == {m.uuid for m in sevens("a-gpu1")}


def test_a_small_instance_goes_where_it_costs_the_least_room():
    # A GPU already cut (a busy 3g at 4) takes a 1g; breaking up the empty GPU would cost a 7g's room.
    c = Cluster([node("a", (MigSlot("a-gpu0/3g@4", "3g.40gb", start=4),), ())])
    hold(c, "busy", "a-gpu0/3g@4")
    plan = plan_relayout(c, mig_request("p", "1g.10gb"))
    assert isinstance(plan, Relayout) and plan.changes[0].gpu == 0
    # On an empty GPU a 1g goes to slice 6, where it leaves the 4g, 3g and 2g placements open.
    c = Cluster([node("b", ())])
    plan = plan_relayout(c, mig_request("p", "1g.10gb"))
    assert plan.changes[0].create[0].start == 6
    assert room("H100", [("1g.10gb", 6)]) > room("H100", [("1g.10gb", 0)])


def test_count_limits_and_frozen_gpus_and_static_gpus_are_respected():
    c = Cluster([node("a", (MigSlot("a-gpu0/4g@0", "4g.40gb", start=0),))])
    hold(c, "busy", "a-gpu0/4g@0")
    refusal = plan_relayout(c, mig_request("p", "4g.40gb"))
    assert isinstance(refusal, NoRelayout) and "busy instance 4g.40gb@0 blocks 4g.40gb" in str(refusal)
    c = Cluster([node("a", sevens("a-gpu0"))])
    assert "reconfiguration is in progress" in str(plan_relayout(c, mig_request("p", "3g.40gb"),
                                                                 frozen=frozenset({(0, 0)})))
    c = Cluster([node("a", sevens("a-gpu0"), dynamic=False)])
    assert isinstance(plan_relayout(c, mig_request("p", "3g.40gb")), NoRelayout)


def test_a_pod_naming_gpu_models_is_relaid_only_onto_those():
    # One node: a dynamic H100 and a dynamic A100-80GB, both seven idle 1g.10gb; a 3g.40gb fits either.
    gpus = (GpuInfo("m-gpu0", "A100-80GB", mig=sevens("m-gpu0"), mig_dynamic=True),
            GpuInfo("m-gpu1", "H100", mig=sevens("m-gpu1"), mig_dynamic=True))
    c = Cluster([NodeSpec("m", 64000, 262144, 2, "H100", gpus=gpus)])
    for model, gpu in (("H100", 1), ("A100-80GB", 0)):
        plan = plan_relayout(c, Request("p", 1000, 1024, num_gpu=1, mig_profile="3g.40gb", gpu_models=(model,)))
        assert isinstance(plan, Relayout) and [ch.gpu for ch in plan.changes] == [gpu], model
    assert isinstance(plan_relayout(c, Request("p", 1000, 1024, num_gpu=1, mig_profile="3g.40gb",
                                               gpu_models=("L4",))), NoRelayout)


def test_two_instances_on_one_node_may_take_two_gpu_changes():
    c = Cluster([node("a", sevens("a-gpu0"), sevens("a-gpu1"))])
    plan = plan_relayout(c, mig_request("p", "4g.40gb", 2))
    assert isinstance(plan, Relayout) and len(plan.instances) == 2
    assert sorted(ch.gpu for ch in plan.changes) == [0, 1]


def test_a_held_instance_cannot_be_taken_away_by_a_layout():
    c = Cluster([node("a", sevens("a-gpu0"))])
    hold(c, "busy", "a-gpu0/1g@0")
    with pytest.raises(PlacementInputError, match="held by busy"):
        c.set_mig_layout(0, 0, ())


# --- property: random MIG pod streams -----------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(H100_PROFILES), st.integers(1, 2), st.booleans()), max_size=40),
       st.integers(0, 2**16))
def test_random_streams_never_overallocate_nor_relay_a_running_instance(stream, seed):
    c = Cluster([node("a", sevens("a-gpu0"), ()), node("b", (), ())])
    fw = Framework(c, make_policy("bestfit", TargetWorkload.from_requests([Request("x", 1)])),
                   np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    running: dict[str, tuple] = {}  # name -> (placement, {uuid: (profile, start, gpu)})
    for i, (profile, count, leave) in enumerate(stream):
        if leave and running:
            name = sorted(running)[int(rng.integers(len(running)))]
            fw.release(running.pop(name)[0])
        req = mig_request(f"p{i}", profile, count)
        outcome = fw.schedule(req, explained=False)
        if isinstance(outcome, Unschedulable):
            plan = plan_relayout(c, req, node_rank=fw.node_rank)
            if isinstance(plan, NoRelayout):
                continue
            apply_relayout(c, plan)
            outcome = c.reserve(req, plan.node, (), plan.instances)
        running[req.name] = (outcome, {})
        for _, (placement, where) in running.items():
            where.update({u: _position(c, u) for u in placement.mig if u not in where})
        for _, (placement, where) in running.items():  # a running pod's instances never moved nor changed
            for u in placement.mig:
                assert _position(c, u) == where[u]
        holders = [u for p, _ in running.values() for u in p.mig]
        assert len(holders) == len(set(holders))  # no instance held twice
        for n, spec in enumerate(c.nodes):
            for g in spec.gpus:
                assert mig.placed_layout_problem("H100", [(m.profile, m.start) for m in g.mig]) is None
            for p in c.mig_profiles:
                free = sum(1 for u, (nn, pp, ok) in c.mig_slots.items()
                           if nn == n and pp == p and ok and u not in c.mig_taken)
                assert c.mig_free[p][n] == free >= 0


def _position(c: Cluster, uuid: str) -> tuple:
    n, profile, _ = c.mig_slots[uuid]
    g = c.mig_gpu[uuid]
    start = next(m.start for m in c.nodes[n].gpus[g].mig if m.uuid == uuid)
    return n, g, profile, start


# --- property: shares, whole GPUs and MIG pods with priorities, re-layouts and preemption together ----------
pods = st.one_of(
    st.tuples(st.just("share"), st.integers(1, 999), st.integers(0, 2)),
    st.tuples(st.just("whole"), st.sampled_from([1, 2]), st.integers(0, 2)),
    st.tuples(st.just("mig"), st.sampled_from(H100_PROFILES), st.integers(0, 2)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(pods, st.booleans()), max_size=40), st.integers(0, 2**16))
def test_streams_with_priorities_never_overallocate_nor_relay_a_running_instance(stream, seed):
    from fgpu_operator.placement.preemption import Candidate, Running, plan_preemption

    plain = NodeSpec("f", 64000, 262144, 2, "H100")
    c = Cluster([plain, node("a", sevens("a-gpu0"), ())])
    fw = Framework(c, make_policy("bestfit", TargetWorkload.from_requests([Request("x", 1)])),
                   np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    running: dict[str, Running] = {}
    seen: dict[str, tuple] = {}
    for i, ((kind, size, level), leave) in enumerate(stream):
        if leave and running:
            fw.release(running.pop(sorted(running)[int(rng.integers(len(running)))]).placement)
        req = (Request(f"p{i}", 1000, 1024, 1, size) if kind == "share" else
               Request(f"p{i}", 1000, 1024, size, 1000) if kind == "whole" else mig_request(f"p{i}", size))
        outcome = fw.schedule(req, explained=False)
        if isinstance(outcome, Unschedulable) and req.is_mig:
            plan = plan_relayout(c, req, node_rank=fw.node_rank)
            if isinstance(plan, Relayout):
                apply_relayout(c, plan)
                outcome = c.reserve(req, plan.node, (), plan.instances)
        if isinstance(outcome, Unschedulable):
            cand = plan_preemption(c, req, level * 100, running.values(), node_rank=fw.node_rank)
            if not isinstance(cand, Candidate):
                continue
            assert all(v.priority < level * 100 for v in cand.victims)
            for v in cand.victims:
                fw.release(running.pop(v.key).placement)
            gpus = cand.gpus or (fw.choose_gpus(req, cand.node) if req.wants_gpu else ())
            outcome = c.reserve(req, cand.node, gpus, cand.mig)
        running[req.name] = Running(req.name, outcome, level * 100, float(i))
        for r in running.values():
            for u in r.placement.mig:
                assert seen.setdefault(u + r.key, _position(c, u)) == _position(c, u)  # never moved while held
        assert (c.gpu_left[c.gpu_slots] >= 0).all() and (c.gpu_mem_left[c.gpu_slots] >= 0).all()
        assert (c.cpu_left >= 0).all() and (c.mem_left >= 0).all()
        holders = [u for r in running.values() for u in r.placement.mig]
        assert len(holders) == len(set(holders)) and set(holders) == set(c.mig_taken)
        for spec in c.nodes:
            for g in spec.gpus:
                assert mig.placed_layout_problem("H100", [(m.profile, m.start) for m in g.mig]) is None
