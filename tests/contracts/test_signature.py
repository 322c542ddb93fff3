"""The scheduler's signature on a hand-off: it verifies for exactly the pod, node, turn and assignment it was
made for, with the key it was made with; a key file too weak to sign with is refused in one line."""
import pytest

from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import ASSIGNED_AT, ASSIGNMENT, ASSIGNMENT_SIGNATURE, HANDOFF_KEYS
from fgpu_contracts.signature import KEY_MIN_BYTES, load_key, problem, sign

KEY = b"k" * 32
TEXT = '{"version":"v1","node":"n1","containers":[{"name":"main","devices":[{"uuid":"GPU-0","milliGpu":300}]}]}'
AT = "2026-01-01T00:00:00.000001Z"


def signed(uid="uid-a", node="n1", at=AT, text=TEXT, key=KEY):
    return {ASSIGNMENT: text, ASSIGNED_AT: at, ASSIGNMENT_SIGNATURE: sign(key, uid, node, at, text)}


def test_the_signature_is_a_protected_handoff_key():
    assert ASSIGNMENT_SIGNATURE in HANDOFF_KEYS  # the webhook and the guard keep users off it like the rest


def test_verifies_for_what_it_was_made_for():
    assert problem(KEY, "uid-a", "n1", signed()) is None
    assert sign(KEY, "uid-a", "n1", AT, TEXT).startswith("v1:")


@pytest.mark.parametrize("uid,node,edit", [
    ("uid-b", "n1", {}),  # another pod wearing uid-a's signed assignment
    ("uid-a", "n2", {}),  # on another node
    ("uid-a", "n1", {ASSIGNMENT: TEXT.replace("300", "1000")}),  # a larger share
    ("uid-a", "n1", {ASSIGNED_AT: "2000-01-01T00:00:00Z"}),  # jumping the queue at Allocate
])
def test_anything_else_does_not_verify(uid, node, edit):
    why = problem(KEY, uid, node, {**signed(), **edit})
    assert why.startswith(f"{ASSIGNMENT_SIGNATURE} does not match")


def test_missing_signature_or_wrong_key():
    unsigned = {ASSIGNMENT: TEXT, ASSIGNED_AT: AT}
    assert problem(KEY, "uid-a", "n1", unsigned) == f"no {ASSIGNMENT_SIGNATURE} (not written by fgpu's scheduler)"
    assert problem(KEY, "uid-a", "n1", {**unsigned, ASSIGNMENT_SIGNATURE: ""}).startswith("no ")
    assert problem(b"x" * 32, "uid-a", "n1", signed()).startswith(f"{ASSIGNMENT_SIGNATURE} does not match")
    assert problem(KEY, "uid-a", "n1", {**signed(), ASSIGNMENT_SIGNATURE: "garbage"}) is not None
    assert problem(KEY, "uid-a", "n1", {}) == f"no {ASSIGNMENT}"


def test_key_file_loaded_stripped(tmp_path):
    path = tmp_path / "key"
    path.write_bytes(b"a" * 40 + b"\n")
    assert load_key(str(path)) == b"a" * 40


@pytest.mark.parametrize("content,said", [(None, "No such file"), (b"", "is empty"), (b"\n  \n", "is empty"),
                                          (b"short\n", "holds 5 bytes")])
def test_missing_empty_or_short_key_file_refused_in_one_line(tmp_path, content, said):
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as err:
        load_key(str(path), "--handoff-key-file")
    text = str(err.value)
    assert text.startswith(f"--handoff-key-file: {path}") and said in text
    assert f"at least {KEY_MIN_BYTES} random bytes" in text and "\n" not in text
