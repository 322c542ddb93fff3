"""`fgpu simulate` under bad input (issue 14, part A): every mistake is one line on stderr naming the option,
the value and what is allowed, exit code 2, nothing on stdout and no file written; and the newcomer paths
(labels, progress in CI logs, timeline hints) say what happened."""
import json

import pytest
from fgpu_operator.cli import main
from fgpu_operator.sim.report import finite, seeds_label
from trace_rows import NODES, PODS_HEADER, pod_rows


def run(capsys, *argv):
    try:
        code = main(["simulate", *argv])
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def bad(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.fixture
def base(small_trace):
    nodes, pods = small_trace
    return ["--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd", "--workers", "1"]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "10.5", "1e400", "x"])
def test_tune_refuses_nan_inf_negative_and_out_of_range(capsys, base, value):
    err = bad(capsys, *base, f"--tune={value}")
    assert f"argument --tune: {value!r} is not allowed (allowed: a finite number, 0 <= N <= 10)" in err


@pytest.mark.parametrize(("option", "value"), [("--seed", "-1"), ("--seed", "4294967296"), ("--workers", "0"),
                                               ("--workers", "nan"), ("--load", "inf")])
def test_numeric_options_name_themselves(capsys, base, option, value):
    assert f"argument {option}: {value!r}" in bad(capsys, *base, option, value)


def test_too_many_seeds(capsys, base):
    assert bad(capsys, *base, "--seeds", "0-99999999").startswith("fgpu simulate: error: --seeds: ")


def nodes_file(tmp_path, text, name="nodes.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("mode", [[], ["--ceiling"], ["--mode", "timeline"]])
def test_nodes_without_gpus_are_refused_in_every_mode(capsys, small_trace, tmp_path, mode):
    _, pods = small_trace
    nodes = nodes_file(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,0,\nn1,64000,262144,0,T4\n")
    err = bad(capsys, "--nodes", nodes, "--pods", str(pods), "--seed", "1", *mode)
    assert "--nodes:" in err and "has no GPUs" in err


@pytest.mark.parametrize("value", ["inf", "nan", "1e30", "-1", "2.5", "65"])
def test_integer_columns_refuse_inf_huge_and_fractions(capsys, small_trace, tmp_path, value):
    _, pods = small_trace
    nodes = nodes_file(tmp_path, f"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,{value},T4\n")
    err = bad(capsys, "--nodes", nodes, "--pods", str(pods), "--seed", "1")
    assert f"column gpu must hold integers 0..64; bad value {value!r} in row 2" in err


def test_pod_columns_refuse_1e30(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    pods = nodes_file(tmp_path, PODS_HEADER + "p0,1e30,4096,1,1000,,LS,Running,0,10,0\n", "pods.csv")
    assert "column cpu_milli must hold integers 0..10000000; bad value '1e30'" in bad(
        capsys, "--nodes", str(nodes), "--pods", pods, "--seed", "1")


def test_a_utf8_bom_is_not_part_of_the_first_column(capsys, small_trace, tmp_path):
    _, pods = small_trace
    nodes = tmp_path / "bom.csv"
    nodes.write_bytes(b"\xef\xbb\xbf" + NODES.encode())
    code, out, _ = run(capsys, "--nodes", str(nodes), "--pods", str(pods), "--seed", "1", "--policy", "fgd")
    assert code == 0 and "small" in out


@pytest.mark.parametrize(("rows", "message"), [
    ("p0,1000,4096,1,500,,LS,Running,0,10,0\np0,1000,4096,1,500,,LS,Running,0,10,0\n", "name 'p0' appears twice"),
    ("p0,1000,4096,1,500,,Gold,Running,0,10,0\n", "unknown qos 'Gold' in row 2"),
    ("p0,1000,4096,1,500,,LS,Running,0,10,0,extra,more\n", "row 2 has 13 fields, the header 11"),
    (",1000,4096,1,500,,LS,Running,0,10,0\n", "column name is empty in row 2"),
])
def test_duplicate_names_unknown_qos_and_ragged_rows(capsys, small_trace, tmp_path, rows, message):
    nodes, _ = small_trace
    pods = nodes_file(tmp_path, PODS_HEADER + rows, "pods.csv")
    assert message in bad(capsys, "--nodes", str(nodes), "--pods", pods, "--seed", "1")


def test_a_short_row_reads_as_empty_fields_not_a_crash(capsys, small_trace, tmp_path):
    _, pods = small_trace
    nodes = nodes_file(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\nn1,64000\n")
    code, _, err = run(capsys, "--nodes", nodes, "--pods", str(pods), "--seed", "1")
    assert code == 2 and "column memory_mib must hold integers 0..1073741824; bad value '' in row 3" in err


def test_two_pod_files_with_one_name_are_labelled_apart(capsys, small_trace, tmp_path):
    nodes, pods = small_trace
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / pods.name).write_text(pods.read_text())
    (tmp_path / "b" / pods.name).write_text(PODS_HEADER + "".join(pod_rows(20)))
    code, out, _ = run(capsys, "--nodes", str(nodes), "--pods", str(tmp_path / "a" / pods.name),
                       "--pods", str(tmp_path / "b" / pods.name), "--seed", "1", "--policy", "fgd", "--json")
    assert code == 0
    assert [r["trace"] for r in json.loads(out)["results"]] == ["a/small", "b/small"]


def test_the_same_pod_file_twice_is_refused(capsys, small_trace):
    nodes, pods = small_trace
    err = bad(capsys, "--nodes", str(nodes), "--pods", str(pods), "--pods", str(pods), "--seed", "1")
    assert "--pods:" in err and "given twice" in err


@pytest.mark.parametrize("where", ["/proc/fgpu-test/sim.png", "file"])
def test_an_unwritable_plot_is_refused_before_any_replay(capsys, base, tmp_path, where):
    if where == "file":  # a folder that is a file: no one can create sim.png under it
        (tmp_path / "f").write_text("")
        where = str(tmp_path / "f" / "sim.png")
    err = bad(capsys, *base, "--seed", "1", "--plot", where)
    assert err.startswith("fgpu simulate: error: --plot: ") and "replaying" not in err


def test_a_plot_path_that_is_a_directory_is_refused(capsys, base, tmp_path):
    (tmp_path / "d.png").mkdir()
    assert "is a directory" in bad(capsys, *base, "--plot", str(tmp_path / "d.png"))


def test_seeds_label_never_claims_seeds_that_did_not_run(capsys, base):
    assert seeds_label([42, 44]) == "42,44" and seeds_label([42, 43, 44]) == "42-44" and seeds_label([7]) == "7"
    code, out, _ = run(capsys, *base, "--seeds", "42,44")
    assert code == 0 and "42,44" in out.splitlines()[2] and "42-44" not in out


@pytest.mark.parametrize(("option", "value"), [("--tune", "1.3"), ("--seeds", "1-3")])
def test_timeline_refuses_what_it_would_ignore(capsys, base, option, value):
    err = bad(capsys, *base, "--mode", "timeline", option, value)
    assert err.startswith(f"fgpu simulate: error: {option}: ")


def test_timeline_at_a_low_own_load_says_how_to_raise_it(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    # one short pod a day for 40 days on 24 GPUs: far below 5% of capacity
    rows = "".join(f"p{i},1000,4096,1,500,,LS,Running,{i * 86400},{i * 86400 + 60},0\n" for i in range(40))
    pods = nodes_file(tmp_path, PODS_HEADER + rows, "pods.csv")
    code, _, err = run(capsys, "--nodes", str(nodes), "--pods", pods, "--mode", "timeline", "--policy", "fgd")
    assert code == 0 and "--load 0.4" in err


def test_progress_reaches_a_log_that_is_not_a_terminal(capsys, base):
    code, _, err = run(capsys, *base, "--seeds", "1-2", "--ceiling")
    assert code == 0
    lines = err.splitlines()
    assert lines[0] == "replaying 2 runs ..." and lines[1].startswith("replaying 2 runs: 2/2 done in ")
    assert "bounding the ceiling (2 exact packings) ..." in lines
    assert any(line.startswith("bounding the ceiling (2 exact packings): 2/2 done") for line in lines)


def test_json_never_holds_a_bare_nan():
    assert finite({"a": [float("nan"), 1.0, {"b": float("inf")}]}) == {"a": [None, 1.0, {"b": None}]}


def test_every_bundled_trace_loads_by_name():
    from fgpu_operator.sim.trace import BUNDLED_TRACES, load_pods

    for name in BUNDLED_TRACES:
        trace = load_pods(name)
        assert trace.name == name and len(trace.pods) > 4000


def test_a_bundled_name_on_the_command_line(capsys, small_trace):
    nodes, _ = small_trace
    code, out, _ = run(capsys, "--nodes", str(nodes), "--pods", "multigpu20", "--seed", "1", "--policy", "fgd",
                       "--tune", "0", "--json")
    assert code == 0 and json.loads(out)["results"][0]["trace"] == "multigpu20"


def test_a_broken_gzip_is_one_line(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    broken = tmp_path / "openb_pod_list_x.csv.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00not really gzip")
    err = bad(capsys, "--nodes", str(nodes), "--pods", str(broken), "--seed", "1")
    assert err.startswith("fgpu simulate: error: --pods: ")
