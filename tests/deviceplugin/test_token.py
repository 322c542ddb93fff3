"""Context tokens: round trip, forgery and garbage are rejected with field="token", never a crash."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simgpu.errors import SimgpuError
from simgpu.token import Grant, issue_token, load_or_create_secret, verify_token

SECRET = b"0123456789abcdef0123456789abcdef"


def grant(**kw):
    base = dict(device_uuid="GPU-1", mem_limit_bytes=8 << 30, sm_limit_pct=30, priority=0,
                pod_namespace="ns", pod_name="p", container="c")
    base.update(kw)
    return Grant(**base)


def test_round_trip():
    g = grant()
    assert verify_token(SECRET, issue_token(SECRET, g)) == g


def test_other_secret_rejected():
    token = issue_token(SECRET, grant())
    with pytest.raises(SimgpuError) as err:
        verify_token(b"x" * 32, token)
    assert err.value.field == "token"


def test_widened_quota_rejected():
    """A container that edits its payload to a bigger quota keeps the old signature: rejected."""
    token = issue_token(SECRET, grant(mem_limit_bytes=1 << 30))
    forged_payload = issue_token(b"y" * 32, grant(mem_limit_bytes=80 << 30)).split(".")[0]
    with pytest.raises(SimgpuError, match="signature"):
        verify_token(SECRET, forged_payload + "." + token.split(".")[1])


@given(st.text(max_size=200))
def test_garbage_never_crashes(text):
    with pytest.raises(SimgpuError) as err:
        verify_token(SECRET, text)
    assert err.value.field == "token"


def test_short_secret_rejected():
    with pytest.raises(SimgpuError) as err:
        issue_token(b"short", grant())
    assert err.value.field == "tokenSecretFile"


def test_secret_created_once_and_shared(tmp_path):
    path = tmp_path / "sub" / "secret"
    first = load_or_create_secret(path)
    assert load_or_create_secret(path) == first
    assert (path.stat().st_mode & 0o777) == 0o600
    assert len(first) >= 32
