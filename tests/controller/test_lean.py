"""The operator's processes run without the official Kubernetes client: Kopf still imports and logs in
through its own code, and `fgpu inspect` (which needs the client) is untouched in other processes."""
import subprocess
import sys

from fgpu_operator.kube import offload

PROBE = ("import sys, kopf; from fgpu_operator.controller import handlers; "
         "from kopf._core.intents import piggybacking; "
         "print(sorted({m.split('.')[0] for m, v in list(sys.modules.items()) if v is not None and m.split('.')[0] == 'kubernetes'}), "
         "piggybacking.has_client())")


def probe(prelude: str) -> str:
    done = subprocess.run([sys.executable, "-c", prelude + PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_hidden_client_is_not_imported_and_kopf_logs_in_without_it():
    assert probe("from fgpu_operator.lean import hide_official_client; hide_official_client(); ") == "[] False"


def test_without_the_call_kopf_would_import_it():
    assert probe("") == "['kubernetes'] True"  # the check above can fail: Kopf does import it when it may


def test_the_writer_child_hides_it_before_importing_kopf():
    prelude, _, entry = offload._CHILD_MAIN.rpartition("from fgpu_operator.kube.offload import main")
    assert entry == "; main()" and "hide_official_client()" in prelude
    assert probe(prelude) == "[] False"
