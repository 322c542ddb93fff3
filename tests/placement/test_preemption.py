"""The preemption planner: strictly lower-priority victims only, kube-scheduler's candidate order, PDBs best
effort, preemptionPolicy Never, and the cluster left as it was found."""
import numpy as np
from fgpu_operator.placement import Cluster, NodeSpec, Request
from fgpu_operator.placement.model import GpuInfo, MigSlot
from fgpu_operator.placement.preemption import Candidate, NoPreemption, Running, plan_preemption

LOW, HIGH = 0, 1000


def share(name: str, milli: int) -> Request:
    return Request(name, 1000, 1024, num_gpu=1, gpu_milli=milli)


def place(c: Cluster, request: Request, node: int, gpus=(), mig=(), priority=LOW, start=0.0, pdb="") -> Running:
    return Running(request.name, c.reserve(request, node, gpus, mig), priority, start, pdb)


def snapshot(c: Cluster):
    return (c.cpu_left.copy(), c.mem_left.copy(), c.gpu_left.copy(), c.gpu_mem_left.copy(), dict(c.mig_taken),
            {p: f.copy() for p, f in c.mig_free.items()})


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4], strict=True)) and a[4] == b[4] and \
        all(np.array_equal(a[5][p], b[5][p]) for p in a[5])


def gpu_pair() -> tuple[Cluster, list[Running]]:
    """One node, two GPUs: GPU 0 holds a low 0.5 beside a high 0.4 (0.1 free); GPU 1 two low 0.3 (started
    first) beside a high 0.4 (nothing free). Evicting the 0.5, or both 0.3, frees 0.6."""
    c = Cluster([NodeSpec("n", 64000, 262144, 2, "H100")])
    running = [place(c, share("low-0.3-a", 300), 0, (1,), start=1.0), place(c, share("low-0.3-b", 300), 0, (1,), start=2.0),
               place(c, share("high-0.4-1", 400), 0, (1,), priority=HIGH), place(c, share("low-0.5", 500), 0, (0,), start=3.0),
               place(c, share("high-0.4-0", 400), 0, (0,), priority=HIGH)]
    return c, running


def test_a_high_06_share_evicts_one_low_05_share_rather_than_two_low_03_shares():
    c, running = gpu_pair()
    before = snapshot(c)
    plan = plan_preemption(c, share("preemptor", 600), HIGH, running)
    assert isinstance(plan, Candidate)
    assert [v.key for v in plan.victims] == ["low-0.5"] and plan.gpus == (0,)
    assert same(before, snapshot(c))  # planning changed nothing


def test_a_same_priority_pod_is_never_a_victim():
    c, running = gpu_pair()
    plan = plan_preemption(c, share("peer", 600), LOW, running)
    assert isinstance(plan, NoPreemption) and "no pod of lower priority" in str(plan)
    plan = plan_preemption(c, share("too-big", 700), HIGH, running)  # the high 0.4s stay: 0.6 at most
    assert isinstance(plan, NoPreemption)


def test_pdb_violations_count_first_and_are_only_best_effort():
    c, running = gpu_pair()
    guarded = [Running(r.key, r.placement, r.priority, r.start, "db" if r.key == "low-0.5" else "") for r in running]
    plan = plan_preemption(c, share("preemptor", 600), HIGH, guarded, budgets={"db": 0})
    assert isinstance(plan, Candidate) and plan.pdb_violations == 0
    assert sorted(v.key for v in plan.victims) == ["low-0.3-a", "low-0.3-b"]
    # When every candidate breaks a budget, preemption still happens (best effort), and says so.
    guarded = [Running(r.key, r.placement, r.priority, r.start, "db") for r in running]
    plan = plan_preemption(c, share("preemptor", 600), HIGH, guarded, budgets={"db": 0})
    assert isinstance(plan, Candidate) and plan.pdb_violations == 1 and [v.key for v in plan.victims] == ["low-0.5"]


def test_preemption_policy_never_preempts_nobody():
    c, running = gpu_pair()
    plan = plan_preemption(c, share("polite", 600), HIGH, running, policy="Never")
    assert isinstance(plan, NoPreemption) and "preemptionPolicy is Never" in str(plan)


def test_the_lowest_highest_victim_priority_wins_then_the_latest_start():
    c = Cluster([NodeSpec("a", 64000, 262144, 1, "H100"), NodeSpec("b", 64000, 262144, 1, "H100"),
                 NodeSpec("c", 64000, 262144, 1, "H100")])
    running = [place(c, Request("w-a", 1000, num_gpu=1, gpu_milli=1000), 0, (0,), priority=10, start=5.0),
               place(c, Request("w-b", 1000, num_gpu=1, gpu_milli=1000), 1, (0,), priority=5, start=1.0),
               place(c, Request("w-c", 1000, num_gpu=1, gpu_milli=1000), 2, (0,), priority=5, start=9.0)]
    plan = plan_preemption(c, Request("whole", 1000, num_gpu=1, gpu_milli=1000), HIGH, running)
    assert [v.key for v in plan.victims] == ["w-c"]  # priority 5 beats 10; of the two, the later start


def test_whole_gpus_and_mig_instances_are_victims_alike():
    c = Cluster([NodeSpec("a", 64000, 262144, 2, "H100")])
    running = [place(c, Request("w0", 1000, num_gpu=1, gpu_milli=1000), 0, (0,)),
               place(c, share("s1", 200), 0, (1,))]
    plan = plan_preemption(c, Request("two", 1000, num_gpu=2, gpu_milli=1000), HIGH, running)
    assert sorted(v.key for v in plan.victims) == ["s1", "w0"]
    gpus = (GpuInfo("g0", "H100", mig=(MigSlot("g0/3g@0", "3g.40gb", start=0), MigSlot("g0/3g@4", "3g.40gb", start=4))),)
    c = Cluster([NodeSpec("m", 64000, 262144, 1, "H100", gpus=gpus)])
    running = [place(c, Request("m0", 1000, num_gpu=1, mig_profile="3g.40gb"), 0, mig=("g0/3g@0",), start=1.0),
               place(c, Request("m1", 1000, num_gpu=1, mig_profile="3g.40gb"), 0, mig=("g0/3g@4",), start=2.0,
                     priority=HIGH)]
    plan = plan_preemption(c, Request("mig", 1000, num_gpu=1, mig_profile="3g.40gb"), HIGH, running)
    assert isinstance(plan, Candidate) and plan.mig == ("g0/3g@0",) and [v.key for v in plan.victims] == ["m0"]


def test_cpu_short_nodes_add_other_lower_priority_pods_to_the_pool():
    c = Cluster([NodeSpec("a", 4000, 262144, 1, "H100")])
    running = [place(c, Request("cpu-hog", 3500), 0), place(c, share("s", 500), 0, (0,), priority=HIGH)]
    plan = plan_preemption(c, Request("p", 1000, 1024, num_gpu=1, gpu_milli=500), HIGH, running)
    assert isinstance(plan, Candidate) and [v.key for v in plan.victims] == ["cpu-hog"] and plan.gpus == (0,)
