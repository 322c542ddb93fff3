"""bench/mig_modes.py's static layouts (valid, one per GPU node, in proportion to demand) and
bench/preemption_time.py on a small cluster; bad options are one line and exit 2."""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fgpu_operator.sim.trace import load_pods

from simgpu import mig

REPO = Path(__file__).resolve().parents[2]
# bench/ on sys.path only while its scripts import: left there, its deviceplugin.py would shadow the package
_saved = list(sys.path)
sys.path.insert(0, str(REPO / "bench"))
try:
    import mig_modes  # noqa: E402
    import preemption_time  # noqa: E402
finally:
    sys.path[:] = _saved


def test_static_layouts_are_valid_and_follow_the_demand():
    rows = mig_modes.node_rows()
    layouts = mig_modes.static_layouts(rows, load_pods(None, need_times=True))
    gpus = Counter()
    for row, (mode, layout) in zip(rows, layouts, strict=True):
        assert mode == "static"
        mig.check_layout("H100", [n for part in layout.split("+") for n in mig_modes._expand(part)])
        gpus[layout] += int(row["gpu"])
    assert sum(gpus.values()) == sum(int(r["gpu"]) for r in rows)
    assert gpus.most_common(1)[0][0] == "7g.80gb"  # whole-GPU and >0.5 shares carry most GPU-time on openb


def test_preemption_bench_decides_on_a_small_cluster(capsys):
    assert preemption_time.main(["--nodes", "8", "--repeat", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {label: next(line for line in lines if line.startswith(label)) for label in preemption_time.PREEMPTORS}
    for label in ("0.6 share", "1 whole GPU", "MIG 3g.40gb"):  # every GPU holds low-priority pods to evict
        assert "preemption:" not in rows[label] and " node-" in rows[label]


@pytest.mark.parametrize("script, argv", [("mig_modes.py", ["--load", "0.9"]),
                                          ("preemption_time.py", ["--repeat", "1"])])
def test_bad_options_are_one_line_and_exit_2(script, argv):
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), *argv], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
