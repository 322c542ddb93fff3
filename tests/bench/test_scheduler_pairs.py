"""bench/scheduler_pairs.py: a series of bench runs summed up from their JSON, and bad files refused in one line."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "scheduler_pairs.py"


def run_file(tmp_path: Path, name: str, first: str, fgpu: float, kube: float, cpu: tuple[float, float]) -> Path:
    def run(scheduler, mode, rate, ms, p99):
        return {"scheduler": scheduler, "mode": mode, "setting": "500/1000", "pods_per_s": rate, "p99": p99,
                "cpu_ms_per_pod": {"scheduler": ms, "kube-apiserver": 5.0}}
    runs = [run("fgpu", "fast", fgpu, cpu[0], 5.0), run("fgpu", "rate", 99.9, 4.0, 0.5),
            run("kube-scheduler", "fast", kube, cpu[1], 6.0), run("kube-scheduler", "rate", 99.8, 5.0, 1.2)]
    if first != "fgpu":
        runs = runs[2:] + runs[:2]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"machine": {"python_build": "no PGO/LTO"}, "runs": runs}))
    return path


def summarise(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_median_lowest_and_counts_come_from_the_pairs_and_a_summary_reads_back_the_same(tmp_path):
    files = [run_file(tmp_path, "a", "fgpu", 180.0, 200.0, (3.0, 3.5)), run_file(tmp_path, "b", "kube", 220.0, 200.0, (2.5, 4.0)),
             run_file(tmp_path, "c", "fgpu", 210.0, 200.0, (3.6, 3.4))]
    first = summarise(*files, "--out-json", tmp_path / "s.json", "--plot", tmp_path / "s.png")
    assert first.returncode == 0, first.stderr
    line = first.stdout.strip().splitlines()[-2]  # the last line names the plot
    assert "3 pairs, fgpu / kube median 1.05x, lowest 0.90x, highest 1.10x, at or above 1.0x in 2" in line
    # (0.9 * 1.1 * 1.05) ** (1/3); the interval's ends are the geometric means of resamples, so within the pairs
    assert "geometric mean 1.01x (95% bootstrap interval 0.9" in line
    assert "fgpu's CPU per pod lower in 2 of 3, all processes' in 2 of 3; fgpu p99 under 1 s in 3 of 3" in line
    assert (tmp_path / "s.png").stat().st_size > 0
    again = summarise(tmp_path / "s.json")
    assert again.returncode == 0 and again.stdout.strip() == first.stdout.strip().rsplit("\n", 1)[0].strip()


def test_the_committed_series_is_what_the_readme_reports():
    """The QPS 500 verdict (docs/benchmarks.md's table, the README's sentence) rests on docs/scheduler_pairs.json:
    the numbers they quote are the script's."""
    out = summarise()
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert "28 pairs, fgpu / kube median 1.22x, lowest 0.95x, highest 1.57x, at or above 1.0x in 27" in line
    assert "geometric mean 1.24x (95% bootstrap interval 1.18x-1.30x)" in line
    record = (REPO / "docs" / "benchmarks.md").read_text()
    assert "| **all (28)** | **1.22x** (0.95x-1.57x) | **27 of 28** | **1.24x (1.18x-1.30x)** |" in record
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "Over 28 alternated pairs at QPS 500 fgpu's rate was 1.24x kube-scheduler's (95% interval 1.18x-1.30x)" in readme


def test_a_file_that_is_not_a_bench_result_gets_one_line_and_exit_1(tmp_path):
    for text in ("not json", json.dumps({"x": 1}), json.dumps({"machine": {}, "runs": [{"mode": "fast"}]}),
                 json.dumps({"machine": {"git": "a", "python_build": "b"}, "runs": [{"mode": "rate", "setting": "500/1000"}]})):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        out = summarise(bad)
        assert out.returncode == 1 and out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1 and str(bad) in out.stderr and "Traceback" not in out.stderr


def test_a_file_of_repeats_gives_one_pair_per_repeat_in_the_order_they_ran(tmp_path):
    def run(scheduler, rate, repeat):
        return {"scheduler": scheduler, "mode": "fast", "setting": "500/1000", "pods_per_s": rate, "p99": 5.0,
                "cpu_ms_per_pod": {"scheduler": 3.0}, "repeat": repeat}
    runs = [run("kube-scheduler", 100.0, 0), run("fgpu", 120.0, 0), run("kube-scheduler", 100.0, 1),
            run("fgpu", 80.0, 1), run("kube-scheduler", 100.0, 2)]  # the third repeat lacks fgpu: no pair
    path = tmp_path / "kube-first.json"
    path.write_text(json.dumps({"machine": {"python_build": "PGO+LTO"}, "runs": runs}))
    out = summarise(path)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| kube-first")]
    assert [r.split(" | ")[:3] for r in rows] == [["| kube-first#1", "PGO+LTO", "kube-scheduler"],
                                                   ["| kube-first#2", "PGO+LTO", "kube-scheduler"]]
    assert "1.20x" in rows[0] and "0.80x" in rows[1]
    assert "2 pairs, fgpu / kube median 1.00x, lowest 0.80x, highest 1.20x, at or above 1.0x in 1" in out.stdout
