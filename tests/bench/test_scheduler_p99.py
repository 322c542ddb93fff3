"""bench/scheduler_p99.py: offered-rate runs summed up per commit and scheduler, and bad files refused in one line."""
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "scheduler_p99.py"


def run_file(tmp_path: Path, name: str, git: str, p99s: dict[str, list[float]], burner: float | None = None) -> Path:
    """A --repeat file: repeat i holds each scheduler's i-th offered-rate run, and a fast run that is not counted."""
    runs = []
    for repeat in range(len(next(iter(p99s.values())))):
        for scheduler, values in p99s.items():
            base = {"scheduler": scheduler, "setting": "500/1000", "repeat": repeat, "pods_per_s": 99.5,
                    "rate_offered": 100.0, "p50": values[repeat] / 4,
                    "cpu_ms_per_pod": {"scheduler": 4.0 if scheduler == "fgpu" else 5.0, "kube-apiserver": 10.0}}
            if burner:
                base.update(cpu_burner_share=burner, cpu_burner_took=0.19)
            runs += [dict(base, mode="fast", p99=9.0), dict(base, mode="rate", p99=values[repeat])]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"machine": {"git": git}, "args": {"cpu_burner": burner}, "runs": runs}))
    return path


def summarise(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_counts_median_and_highest_per_commit_and_scheduler_and_a_summary_reads_back_the_same(tmp_path):
    before = run_file(tmp_path, "before", "aaa", {"fgpu": [0.4, 1.2, 0.6], "kube-scheduler": [0.9, 1.5, 0.7]})
    after = run_file(tmp_path, "after", "bbb", {"kube-scheduler": [0.8, 1.1], "fgpu": [0.5, 1.0]})
    loaded = run_file(tmp_path, "loaded", "bbb", {"fgpu": [0.9], "kube-scheduler": [1.4]}, burner=0.2)
    first = summarise(before, after, loaded, "--out-json", tmp_path / "s.json", "--plot", tmp_path / "s.png")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    # each miss to the millisecond: a p99 of 1.003 s would read "1.00 s" beside the runs that met the target
    assert "aaa fgpu: 3 runs, p99 within 1 s in 2 of 3 (misses: 1.200 s), median 0.60 s, lowest 0.40 s, highest 1.20 s" in out
    assert "aaa kube-scheduler: 3 runs, p99 within 1 s in 2 of 3 (misses: 1.500 s), median 0.90 s" in out
    assert "bbb fgpu: 2 runs, p99 within 1 s in 2 of 2" in out  # the target is p99 <= 1 s: 1.00 s meets it
    assert "bbb kube-scheduler: 2 runs, p99 within 1 s in 1 of 2 (misses: 1.100 s)" in out
    # the same commit with a noisy neighbour is a series of its own, with the share the neighbour took
    assert "bbb+burner0.2 fgpu: 1 runs, p99 within 1 s in 1 of 1" in out and "took 19%-19% of a core" in out
    assert "bbb+burner0.2 kube-scheduler: 1 runs, p99 within 1 s in 0 of 1 (misses: 1.400 s)" in out
    rows = [line for line in out.splitlines() if line.startswith("| after")]
    assert [r.split(" | ")[:3] for r in rows] == [["| after#1", "bbb", "kube-scheduler"], ["| after#1", "bbb", "fgpu"],
                                                   ["| after#2", "bbb", "kube-scheduler"], ["| after#2", "bbb", "fgpu"]]
    assert (tmp_path / "s.png").stat().st_size > 0
    again = summarise(tmp_path / "s.json")
    assert again.returncode == 0 and again.stdout.strip() == out.strip().rsplit("\n", 1)[0].strip()


def test_the_committed_series_is_what_the_readme_reports():
    """The p99 verdict (docs/benchmarks.md's table and sentences, the README's count) rests on docs/scheduler_p99.json:
    the counts and seconds they quote are the script's."""
    out = summarise()
    assert out.returncode == 0, out.stderr
    found = {}
    for line in out.stdout.splitlines():
        m = re.match(r"(\S+) (\S+): (\d+) runs, p99 within 1 s in (\d+) of \d+(?: \(misses: [^)]*\))?, median ([\d.]+) s, "
                     r"lowest ([\d.]+) s, highest ([\d.]+) s", line)
        if m:
            found[m[1], m[2]] = m.groups()[2:]
    record = " ".join((REPO / "docs" / "benchmarks.md").read_text().split())  # prose wraps anywhere
    fgpu = found["3bade75", "fgpu"]
    assert f"{fgpu[1]} of {fgpu[0]} at 3bade75 in one 67-minute window" in record
    # quiet; beside a noisy neighbour timed by the clock (it took 7-8% of a core), then by its CPU (20%); quiet again
    for commit in ("3bade75", "18635b2+burner0.2", "897c058+burner0.2", "74cbf28+burner0.2", "c481937"):
        fgpu, kube = found[commit, "fgpu"], found[commit, "kube-scheduler"]
        assert (f"| **{fgpu[1]} of {fgpu[0]}** | **{fgpu[2]} s ({fgpu[3]}-{fgpu[4]} s)** | {kube[1]} of {kube[0]} | "
                f"{kube[2]} s ({kube[3]}-{kube[4]} s) |") in record, commit
    quiet = [found[commit, "fgpu"] for commit in ("3bade75", "c481937")]  # the runs with no neighbour
    within, runs = sum(int(f[1]) for f in quiet), sum(int(f[0]) for f in quiet)
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"p99 at 100 pods/s stayed within 1 s in {within} of {runs} quiet runs" in readme


def test_a_file_that_is_not_a_bench_result_gets_one_line_and_exit_1(tmp_path):
    for text in ("not json", json.dumps({"x": 1}), json.dumps({"machine": {}, "runs": [{"mode": "fast"}]}),
                 json.dumps({"machine": {"git": "a", "python_build": "b"}, "runs": [{"mode": "rate", "setting": "500/1000"}]}), json.dumps({"machine": {}, "runs": []})):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        out = summarise(bad)
        assert out.returncode == 1 and out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1 and str(bad) in out.stderr and "Traceback" not in out.stderr
