"""`fgpu simulate`: output formats, and one-line errors with exit code 2 for bad input."""
import json

import pytest
from fgpu_operator.cli import main
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.sim.command import parse_seeds
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_rows import PODS_HEADER, pod_rows


def run(capsys, *argv):
    code = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_issue_schema(capsys, small_trace):
    nodes, pods = small_trace
    code, out, _ = run(capsys, "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2",
                       "--policy", "fgd", "--policy", "random", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["policy"], r["trace"], r["seeds"]) for r in results] == [("fgd", "small", [1, 2]),
                                                                        ("random", "small", [1, 2])]
    for r in results:
        assert set(r) == {"policy", "trace", "seeds", "alloc_ratio", "frag_ratio", "unallocated_pct_at_100"}
        assert "0" in r["alloc_ratio"] and "100" in r["alloc_ratio"]
        assert r["unallocated_pct_at_100"] == pytest.approx(100 - r["alloc_ratio"]["100"])
        assert all(0 <= v <= 100 for v in r["alloc_ratio"].values())


def test_table_and_plot(capsys, small_trace, tmp_path):
    nodes, pods = small_trace
    png = tmp_path / "out" / "sim.png"
    code, out, _ = run(capsys, "--nodes", str(nodes), "--pods", str(pods), "--seed", "3", "--policy", "all",
                       "--plot", str(png))
    assert code == 0 and png.stat().st_size > 10_000
    assert out.splitlines()[0].split()[:3] == ["trace", "policy", "seeds"]
    assert {line.split()[1] for line in out.splitlines()[2:-1]} == {
        "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "fgpu"}


def bad(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_unknown_policy_lists_allowed(capsys):
    assert "allowed: random, dotprod, clustering, packing, bestfit, fgd, fgpu, all" in bad(capsys, "--policy", "tetris")


def test_seeds_out_of_order(capsys):
    assert "out of order" in bad(capsys, "--seeds", "51-42")


def test_missing_column(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,num_gpu\np0,1000,1\n")
    err = bad(capsys, "--nodes", str(nodes), "--pods", str(pods))
    assert "missing column(s) memory_mib, gpu_milli" in err


def test_malformed_value_names_the_rows(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    pods = tmp_path / "p.csv"
    rows = pod_rows(5)
    rows[2] = rows[2].replace(",4096,", ",lots,")
    pods.write_text(PODS_HEADER + "".join(rows))
    assert "column memory_mib" in (err := bad(capsys, "--nodes", str(nodes), "--pods", str(pods))) and "row 4" in err


def test_unknown_gpu_model_names_the_rows(capsys, small_trace, tmp_path):
    _, pods = small_trace
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\na,1000,1000,1,T4\nb,1000,1000,2,H800\nc,1000,1000,2,H800\n")
    err = bad(capsys, "--nodes", str(nodes), "--pods", str(pods))
    assert "unknown GPU model H800 in rows 3, 4" in err and "allowed:" in err


def test_trace_without_gpu_pods(capsys, small_trace, tmp_path):
    nodes, _ = small_trace
    pods = tmp_path / "p.csv"
    pods.write_text(PODS_HEADER + "p0,1000,100,0,0,,LS,Running,0,1,0\n")
    assert "no GPU pods" in bad(capsys, "--nodes", str(nodes), "--pods", str(pods))


def test_missing_file(capsys):
    assert "cannot read" in bad(capsys, "--pods", "/nonexistent/pods.csv")


@settings(max_examples=200)
@given(st.text(max_size=12))
def test_seed_parser_accepts_or_explains(text):
    try:
        seeds = parse_seeds(text)
    except PlacementInputError as exc:
        assert str(exc).startswith("--seeds:")
    else:
        assert seeds == sorted(set(seeds)) and seeds


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["1", "0", "-3", "x", "", "1000", "2.5", "T4", "V100M16|A10"]),
                         min_size=5, max_size=6), max_size=6))
def test_pod_loader_never_crashes(tmp_path_factory, rows):
    from fgpu_operator.sim.trace import load_pods

    path = tmp_path_factory.mktemp("fuzz") / "p.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(",".join(r) + "\n" for r in rows))
    try:
        trace = load_pods(path)
    except PlacementInputError:
        return
    assert any(p.request.wants_gpu for p in trace.pods)


def test_ceiling_in_json_table_and_plot(capsys, small_trace, tmp_path):
    nodes, pods = small_trace
    base = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--policy", "fgd", "--workers", "1"]
    code, out, _ = run(capsys, *base, "--ceiling", "--json")
    assert code == 0
    doc = json.loads(out)
    [c] = doc["ceilings"]
    assert c["trace"] == "small" and c["seeds"] == [1, 2] and c["refused_pods"] >= 0
    assert 0 < c["alloc_all_placed_pct"] <= c["alloc_any_subset_pct"] <= 100
    code, out, _ = run(capsys, *base, "--ceiling", "--plot", str(tmp_path / "c.png"))
    assert code == 0 and "ceiling at 100% arrival" in out and f"{c['alloc_all_placed_pct']:.2f}%" in out
    assert (tmp_path / "c.png").stat().st_size > 10_000
    code, out, _ = run(capsys, *base, "--json")
    assert "ceilings" not in json.loads(out)  # the issue's schema is unchanged without the flag


def test_ceiling_is_replay_only(capsys):
    assert "--ceiling: applies only to --mode replay" in bad(capsys, "--mode", "timeline", "--ceiling")
