"""What keeping SLOs costs in packing: `fgpu simulate --mode timeline --protected-share S --slo B`, and the FGD
protocol's version of it (`replay_qos`, which bench/simulate_qos.py sweeps).

A share S of the trace's GPU-sharing pods (drawn per seed) is protected: high priority with slowdown bound B;
the rest are best-effort (whole-GPU pods have no co-runners, so none is marked). Each policy replays the
trace (timeline: its arrivals and departures; replay: the FGD protocol, pods arriving until 100% of GPU
capacity and never leaving, one arrival counting as one unit of time); the watcher follows every GPU's shares
and, between two events on a GPU, prices each protected pod's slowdown s there with simgpu's co-location model
(`placement.slo`) *perturbed by the model's own measured error* e: for each pod and set of co-runners, one
residual (predicted / measured rate - 1) drawn from the time-slicing and MPS co-location checks simgpu was not
fitted on (bench/data/colocation_residuals.json, from bench/simgpu_fidelity.py), so a filter that trusts the
model blindly is not graded by it. A residual is the error of a co-located rate, so it scales what
co-location adds: the pod is within its SLO while 1 + (s - 1)(1 + e) <= B (`attainment`); the harsher
s (1 + e) <= B, which also charges the error to a pod whose co-runners are idle, is kept beside it
(`attainment_total`). Attainment = protected pods' time within bound / their time running, pooled.

Policies: the trace policies as they are, `fgpu+qos` (fgpu with the QoS filter as the operator runs it: it
refuses at the bound and takes GPUs where the bound holds with the model's known error first,
`placement.slo_filter.margin_first`), `fgpu+qos@M` (refuses at the bound 1 + M (B - 1) and trusts the model:
no preference; M = 1 is the bare filter), `fgpu+qos~A` (the live filter allowing an error A, for the
cross-check) and `naive` (fgpu allowing at most one protected pod per GPU, no model).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from fgpu_operator.placement.model import Cluster, Placement
from fgpu_operator.placement.slo import SloModel, Tenant, default_model, tenant_of

from .trace import Trace

RESIDUALS = Path(__file__).resolve().parents[2] / "bench" / "data" / "colocation_residuals.json"


def residuals(path: Path = RESIDUALS, gpu: str = "") -> np.ndarray:
    """The co-location residuals, of the datasets whose name starts with `gpu` (H100, H200; "": all)."""
    data = json.loads(path.read_text())
    return np.array([e for name, errors in data["datasets"].items() if name.startswith(gpu) for e in errors],
                    dtype=float)


class OneProtectedPerGpu(SloModel):
    """The naive rule as a model: a second protected pod on a GPU 'breaks' every bound, nothing else does."""

    def slowdowns(self, gpu_model: str, sharing: str, tenants) -> tuple[float, ...]:
        crowded = sum(t.high for t in tenants) > 1
        return tuple(float("inf") if crowded and t.high else 1.0 for t in tenants)


def mark(trace: Trace, share: float, bound: float, seed: int, guard: bool, margin: float = 1.0) -> Trace:
    """The trace with `share` of its sharing pods protected (filter bound 1 + margin (bound - 1))."""
    rng = np.random.default_rng(seed)
    filter_bound = 1.0 + margin * (bound - 1.0)
    pods = []
    for p in trace.pods:
        r = p.request
        high = r.is_share and rng.random() < share
        pods.append(replace(p, request=replace(r, priority=0 if high else 1, slo=filter_bound if high else 0.0,
                                               guard_slo=guard)))
    return replace(trace, pods=tuple(pods))


@dataclass
class Attainment:
    """Follows every share's stay; time within bound and time running of the protected ones."""

    bound: float
    errors: np.ndarray
    seed: int
    override: SloModel | None = None
    within: float = 0.0  # the residual scales what co-location adds: 1 + (s - 1)(1 + e)
    within_total: float = 0.0  # the residual scales the whole slowdown: s (1 + e), harsher near s = 1
    running: float = 0.0

    def attach(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.capacity = cluster.total_gpus * 1000
        self.points: list[dict] = []
        self.truth = default_model()
        if self.override is not None:
            cluster.plugin_state["slo_model"] = self.override
        self.residents: dict[tuple[int, int], dict[str, Tenant]] = {}
        self.since: dict[tuple[int, int], float] = {}

    def _flush(self, gpu: tuple[int, int], now: float) -> None:
        pods = self.residents.get(gpu, {})
        dt = now - self.since.get(gpu, now)
        self.since[gpu] = now
        if dt <= 0 or not any(t.high for t in pods.values()):
            return
        names = sorted(pods)
        tenants = [pods[n] for n in names]
        n, g = gpu
        model = self.cluster.models[self.cluster.gpu_model_idx[n, g]]
        predicted = self.truth.slowdowns(model, str(self.cluster.gpu_mode[n, g]), tenants)
        state = ",".join(names)
        for name, t, s in zip(names, tenants, predicted, strict=True):
            if not t.high:
                continue
            e = self.errors[self._draw(name, state)] if len(tenants) > 1 else 0.0
            self.running += dt
            if max(1.0, 1.0 + (s - 1.0) * (1.0 + e)) <= self.bound + 1e-9:
                self.within += dt
            if max(1.0, s * (1.0 + e)) <= self.bound + 1e-9:
                self.within_total += dt

    def _draw(self, name: str, state: str) -> int:
        """One residual per (pod, co-runner set, seed): the same stay is graded with the same error."""
        digest = hashlib.blake2b(f"{self.seed}|{name}|{state}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % self.errors.size

    def join(self, p: Placement, now: float) -> None:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents.setdefault(gpu, {})[p.request.name] = tenant_of(p.request)

    def leave(self, p: Placement, now: float) -> None:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents.get(gpu, {}).pop(p.request.name, None)

    def checkpoint(self, step: float, arrived: int, used: int, last: bool = False) -> None:
        """Replay mode: at each tenth of capacity arrived from 50%, the allocation and attainment so far;
        `last`: the end of the replay counts as 100% (the tuned workload stops a share short of it)."""
        pct = 100 if last else int(100 * arrived // self.capacity)
        if pct < 50 or pct % 10 or any(p["arrived_pct"] == pct for p in self.points):
            return
        for gpu in list(self.residents):
            self._flush(gpu, step)
        self.points.append({"arrived_pct": pct, "alloc_pct": 100 * used / self.capacity, "attainment": self.ratio,
                            "attainment_total": self.within_total / self.running if self.running > 0 else 1.0})

    @property
    def ratio(self) -> float:
        return self.within / self.running if self.running > 0 else 1.0


def policy_setup(name: str) -> tuple[str, bool, float, SloModel | None]:
    """(trace policy, guard, margin, model override) of a QoS-simulation policy name: `fgpu+qos` is the live
    filter (the bound refuses, GPUs with the model's error allowed are taken first); `fgpu+qos@M` refuses at
    1 + M (B - 1) and trusts the model (no error allowance); `fgpu+qos~A` the live filter allowing error A."""
    if name == "naive":
        return "fgpu", True, 1.0, OneProtectedPerGpu(error=0.0)
    if name.startswith("fgpu+qos@"):
        return "fgpu", True, float(name.split("@", 1)[1]), SloModel(error=0.0)
    if name.startswith("fgpu+qos~"):
        return "fgpu", True, 1.0, SloModel(error=float(name.split("~", 1)[1]))
    if name == "fgpu+qos":
        return "fgpu", True, 1.0, None
    return name, False, 1.0, None


def replay_qos(nodes, trace: Trace, name: str, share: float, bound: float, seed: int, errors: np.ndarray) -> dict:
    """The FGD protocol (pods arrive until 100% of GPU capacity, never leave), arrivals counting as time:
    allocation and attainment at each tenth of capacity arrived from 50% to 100%."""
    from .replay import replay

    policy, guard, margin, override = policy_setup(name)
    marked = mark(trace, share, bound, seed, guard, margin)
    watch = Attainment(bound, errors, seed, override)
    result = replay(nodes, marked, policy, seed, tune=1.0, watch=watch)
    watch.checkpoint(result.pods, int(result.arrived[-1]), int(result.used[-1]), last=True)
    return {"policy": name, "seed": seed, "points": watch.points}


def run_qos(nodes, trace: Trace, name: str, share: float, bound: float, seed: int, load: float | None,
            errors: np.ndarray, **cluster) -> dict:
    """One policy, one seed: allocation (time-weighted % of GPUs over the busy period) and attainment.
    `cluster`: run_timeline's preemption / reconfig_s, as the plain timeline takes them."""
    from .timeline import run_timeline

    policy, guard, margin, override = policy_setup(name)
    marked = mark(trace, share, bound, seed, guard, margin)
    watch = Attainment(bound, errors, seed, override)
    result = run_timeline(nodes, marked, policy, seed, load=load, watch=watch, **cluster)
    return {"policy": name, "seed": seed, "load": load, "alloc_pct": result.alloc_stats()["mean"],
            "requested_pct": result.requested_stats()["mean"], "attainment": watch.ratio,
            "protected_hours": watch.running / 3600, "preempted": result.preempted}


#: What `--protected-share` compares when no --policy is given: the issue's six.
QOS_POLICIES: tuple[str, ...] = ("random", "bestfit", "fgd", "fgpu", "fgpu+qos", "naive")


def parse_qos_policies(names: list[str] | None) -> list[str]:
    """Trace policies plus `fgpu+qos[@margin]` (0 < margin <= 1), `fgpu+qos~error` (0 <= error <= 1) and
    `naive`; `all`: QOS_POLICIES."""
    from fgpu_operator.placement.errors import PlacementInputError
    from fgpu_operator.placement.policies import POLICY_NAMES

    out: list[str] = []
    for part in (p.strip() for name in names or ["all"] for p in name.split(",")):
        for p in QOS_POLICIES if part == "all" else (part,):
            ok = p in POLICY_NAMES or p in ("fgpu+qos", "naive")
            for sep, low in (("@", 0.0), ("~", -1.0)):  # margin in (0, 1]; error in [0, 1]
                if p.startswith("fgpu+qos" + sep):
                    try:
                        ok = low < float(p.split(sep, 1)[1]) <= 1
                    except ValueError:
                        ok = False
                    ok = ok and float(p.split(sep, 1)[1]) >= 0
            if not ok:
                raise PlacementInputError(f"unknown policy {p!r}", field="--policy",
                                          allowed=[*POLICY_NAMES, "fgpu+qos", "fgpu+qos@M (0 < M <= 1)",
                                                   "fgpu+qos~E (0 <= E <= 1)", "naive", "all"])
            if p not in out:
                out.append(p)
    return out


def report_qos(args, nodes, traces, policies: list[str], seed: int, load: float | None) -> int:
    """The CLI's table (one seed; bench/simulate_qos.py sweeps seeds and loads): allocation and attainment
    per policy, and the trade-off plot with --plot."""
    from .timeline import DEFAULT_RECONFIG_S

    errors = residuals()
    cluster = {"preemption": getattr(args, "preemption", False),
               "reconfig_s": getattr(args, "mig_reconfig_s", DEFAULT_RECONFIG_S)}
    rows = [run_qos(nodes, trace, p, args.protected_share, args.slo, seed, load, errors, **cluster)
            | {"trace": trace.name} for trace in traces for p in policies]
    if args.json:
        print(json.dumps({"results": rows}))
        return 0
    print(f"{args.protected_share:.0%} of sharing pods protected, bound {args.slo:g}x; attainment graded against "
          f"slowdowns perturbed by simgpu's co-location residuals ({RESIDUALS.name}, {errors.size} cases)")
    print(f"{'trace':<10} {'policy':<14} {'alloc %':>8} {'requested %':>12} {'SLO attainment':>15}")
    for r in rows:
        print(f"{r['trace']:<10} {r['policy']:<14} {r['alloc_pct']:>8.2f} {r['requested_pct']:>12.2f} "
              f"{100 * r['attainment']:>14.2f}%")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in rows:
            ax.scatter(r["alloc_pct"], 100 * r["attainment"], label=f"{r['policy']} ({r['trace']})")
        ax.set(xlabel="allocated GPUs (%)", ylabel="SLO attainment of protected pods (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        plt.close(fig)
        print(f"plot: {args.plot}")
    return 0
