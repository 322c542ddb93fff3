"""Trace CSVs fuzzed (issue 14, part D): every node list and pod list either loads and replays (FGD protocol
and timeline), or is refused with one PlacementInputError line naming the option, file, column and rows."""
import math

from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.sim.replay import replay
from fgpu_operator.sim.timeline import run_timeline
from fgpu_operator.sim.trace import NODE_COLUMNS, POD_COLUMNS, TIME_COLUMNS, load_nodes, load_pods
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

BAD = st.sampled_from(["-1", "inf", "nan", "1e30", "2.5", "65", "", " 3 ", "x", "0x10", "1_000", "Gold", "P100",
                       "\u00e9", '"a,b"', "\"", "T4|", "|"]) | st.text(max_size=4)


def table(columns: tuple[str, ...], good: dict, prefix: str) -> st.SearchStrategy[str]:
    """A CSV of up to 6 good rows (unique names, values the loader accepts), then 0-2 corruptions: a cell
    replaced by a bad token, a header name replaced, a row cut short or made too long, a name repeated."""
    def build(rows_drawn, fixes):
        head = list(columns)
        rows = [[f"{prefix}{i}" if c in ("name", "sn") else r[c] for c in head] for i, r in enumerate(rows_drawn)]
        for kind, a, b, token in fixes:
            if kind == "cell" and rows and rows[a % len(rows)]:
                rows[a % len(rows)][b % len(rows[a % len(rows)])] = token
            elif kind == "header":
                head[b % len(head)] = token
            elif kind == "short" and rows:
                rows[a % len(rows)] = rows[a % len(rows)][: b % len(head)]
            elif kind == "long" and rows:
                rows[a % len(rows)].append(token)
            elif kind == "dup" and len(rows) > 1 and rows[a % len(rows)] and rows[(a + 1) % len(rows)]:
                rows[a % len(rows)][0] = rows[(a + 1) % len(rows)][0]
        return "\n".join(",".join(r) for r in [head, *rows]) + "\n"

    row = st.fixed_dictionaries({c: good[c] for c in columns if c in good})
    fix = st.tuples(st.sampled_from(["cell"] * 4 + ["header", "short", "long", "dup"]), st.integers(0, 9),
                    st.integers(0, 9), BAD)
    fixes = st.integers(0, 2).flatmap(lambda n: st.just([]) if n == 0 else st.lists(fix, min_size=1, max_size=n))
    return st.builds(build, st.lists(row, min_size=1, max_size=6), fixes)


node_csv = table(NODE_COLUMNS, {"gpu": st.sampled_from(["0", "1", "2", "4", "8"]),
                                "model": st.sampled_from(["T4", "G2", "V100M16", "A10"]),
                                "cpu_milli": st.sampled_from(["64000", "96000", "0"]),
                                "memory_mib": st.sampled_from(["262144", "0"])}, "n")
pod_csv = table((*POD_COLUMNS, "gpu_spec", "qos", *TIME_COLUMNS),
                {"num_gpu": st.sampled_from(["0", "1", "1", "1", "1", "2"]),
                 "gpu_milli": st.sampled_from(["250", "500", "1000", "1000", "810"]),
                 "cpu_milli": st.sampled_from(["1000", "8000"]), "memory_mib": st.sampled_from(["4096", "0"]),
                 "gpu_spec": st.sampled_from(["", "", "T4", "G2|T4"]), "qos": st.sampled_from(["LS", "BE", ""]),
                 "creation_time": st.sampled_from(["0", "10", "86400", "1e12"]),
                 "deletion_time": st.sampled_from(["100", "20", "", "86500", "5"])}, "p")
encodings = st.sampled_from(["utf-8"] * 8 + ["utf-8-sig", "latin-1", "utf-16"])


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_csv, pod_csv, encodings, st.booleans(), st.sampled_from(["fgd", "bestfit", "random"]),
       st.sampled_from([0.0, 1.3]))
def test_fuzzed_traces_replay_or_name_the_problem(tmp_path_factory, nodes_text, pods_text, encoding, timed, policy,
                                                  tune):
    folder = tmp_path_factory.mktemp("csv", numbered=True)
    nodes_path, pods_path = folder / "nodes.csv", folder / "pods.csv"
    nodes_path.write_bytes(nodes_text.encode(encoding, errors="replace"))
    pods_path.write_bytes(pods_text.encode(encoding, errors="replace"))
    try:
        nodes = load_nodes(nodes_path)
        trace = load_pods(pods_path, need_times=timed)
    except PlacementInputError as err:
        assert "\n" not in str(err) and str(err).startswith(("--nodes: ", "--pods: ")), str(err)
        event("refused")
        return
    event("loaded")
    result = replay(nodes, trace, policy, 1, tune)
    assert result.total_gpus > 0 and (result.used <= result.arrived).all()
    alloc, frag = result.binned()
    assert all(math.isfinite(v) for v in [*alloc.values(), *frag.values()])
    if timed:
        assert math.isfinite(run_timeline(nodes, trace, policy, 1).offered)
