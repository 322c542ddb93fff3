"""Running many (trace, policy, seed) replays, on several processes if asked, and averaging them over seeds."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache

from .replay import ReplayResult, replay
from .trace import Trace, load_nodes, load_pods


@dataclass(frozen=True)
class Job:
    nodes: str | None
    pods: str | None
    policy: str
    seed: int
    tune: float
    label: str | None = None  # the trace's name in results (default: from its file name)


@lru_cache(maxsize=8)
def _nodes(path: str | None):
    return load_nodes(path)


@lru_cache(maxsize=32)
def _trace(path: str | None) -> Trace:
    return load_pods(path)


def run_job(job: Job) -> ReplayResult:
    result = replay(_nodes(job.nodes), _trace(job.pods), job.policy, job.seed, job.tune)
    if job.label is not None:
        result.trace = job.label
    return result


def jobs_for(nodes: str | None, pods: Sequence[str | None], policies: Sequence[str], seeds: Sequence[int],
             tune: float, labels: Sequence[str] | None = None) -> list[Job]:
    """One job per (trace, policy, seed); `labels` name the traces in results (see command.trace_labels)."""
    names = list(labels) if labels is not None else [None] * len(pods)
    return [Job(nodes, p, policy, seed, tune, label) for p, label in zip(pods, names, strict=True)
            for policy in policies for seed in seeds]


def run_jobs(jobs: Sequence[Job], workers: int = 1,
             on_done: Callable[[ReplayResult], None] | None = None) -> list[ReplayResult]:
    """Run the jobs (in order of completion), calling `on_done` after each; results come back in job order."""
    results: dict[int, ReplayResult] = {}
    if workers <= 1 or len(jobs) == 1:
        for i, job in enumerate(jobs):
            results[i] = run_job(job)
            if on_done:
                on_done(results[i])
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs), os.cpu_count() or 1)) as pool:
            futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if on_done:
                    on_done(results[futures[future]])
    return [results[i] for i in range(len(jobs))]


@dataclass
class Summary:
    """One (trace, policy) averaged over its seeds."""

    policy: str
    trace: str
    seeds: list[int]
    alloc_ratio: dict[int, float]
    frag_ratio: dict[int, float]
    failed_pods: float
    seconds_per_replay: float

    @property
    def alloc_at_100(self) -> float:
        return self.alloc_ratio.get(100, float("nan"))

    @property
    def unallocated_pct_at_100(self) -> float:
        return round(100.0 - self.alloc_at_100, 2)

    def as_json(self) -> dict:
        return {
            "policy": self.policy, "trace": self.trace, "seeds": self.seeds,
            "alloc_ratio": {str(k): v for k, v in self.alloc_ratio.items()},
            "frag_ratio": {str(k): v for k, v in self.frag_ratio.items()},
            "unallocated_pct_at_100": self.unallocated_pct_at_100,
        }


def summarise(results: Iterable[ReplayResult]) -> list[Summary]:
    groups: dict[tuple[str, str], list[ReplayResult]] = {}
    for r in results:
        groups.setdefault((r.trace, r.policy), []).append(r)
    out = []
    for (trace, policy), runs in groups.items():
        binned = [r.binned() for r in runs]
        out.append(Summary(policy, trace, [r.seed for r in runs], _mean_bins([b[0] for b in binned]),
                           _mean_bins([b[1] for b in binned]), sum(r.failed for r in runs) / len(runs),
                           sum(r.seconds for r in runs) / len(runs)))
    return out


def _mean_bins(per_seed: list[dict[int, float]]) -> dict[int, float]:
    keys = sorted(set().union(*per_seed))
    return {k: round(sum(d[k] for d in per_seed if k in d) / sum(1 for d in per_seed if k in d), 2)
            for k in keys}
