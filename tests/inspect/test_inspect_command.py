"""`fgpu inspect`'s shell without a cluster: every failure before or instead of an answer is one line on
stderr and exit code 2, never a traceback (the e2e test covers the answers)."""
from __future__ import annotations

import pytest
from fgpu_operator.cli import main

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team}}]
current-context: x
"""


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def unreachable(tmp_path, monkeypatch):
    """A kubeconfig whose apiserver port nothing listens on (port 1 needs root to bind)."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("{port}", "1"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


@pytest.mark.parametrize("argv", [["inspect"], ["inspect", "-o", "json", "node", "n1"],
                                  ["inspect", "pod", "x", "-o", "yaml"], ["inspect", "check"]])
def test_an_unreachable_api_is_one_line_naming_the_server(unreachable, capsys, argv):
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(
        "fgpu inspect: error: cannot reach the Kubernetes API at https://127.0.0.1:1: ")


def test_a_bad_output_format_is_refused_before_anything_is_read(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", "pod", "x", "-o", "xml"])
    assert exit_.value.code == 2
    assert "argument -o/--output: invalid choice: 'xml'" in one_error_line(capsys)


def test_a_missing_kubeconfig_is_one_line(tmp_path, capsys):
    assert main(["inspect", "--kubeconfig", str(tmp_path / "nope")]) == 2
    assert one_error_line(capsys).startswith(f"fgpu inspect: error: kubeconfig: cannot use kubeconfig {tmp_path}")


def test_options_work_on_either_side_of_the_subcommand():
    from fgpu_operator.cli import build_parser

    parser = build_parser()
    before = parser.parse_args(["inspect", "-o", "json", "--context", "x", "pod", "p", "-n", "ns"])
    after = parser.parse_args(["inspect", "pod", "p", "-o", "json", "--context", "x"])
    plain = parser.parse_args(["inspect"])
    assert (before.output, before.context, before.namespace, after.output, after.context) == \
        ("json", "x", "ns", "json", "x")
    assert (plain.output, plain.inspect_what, plain.kubeconfig) == ("table", None, None)


def test_the_context_namespace_is_the_default_for_pods(unreachable):
    from fgpu_operator.inspect.command import _connect

    api, namespace = _connect(None, None)
    assert namespace == "team" and api.server == "https://127.0.0.1:1"
