"""One error type for bad input: each component's own error is an InputError, worded exactly as before, so a
shell that catches InputError reports any of them the same way, and old callers catching the old names still
work."""
import pytest
from fgpu_operator.placement.errors import PlacementInputError

from deviceplugin.allocate import AllocateError
from fgpu_contracts.errors import InputError
from simgpu.client import DaemonError, RemoteOutOfMemoryError
from simgpu.errors import OutOfMemoryError, SimgpuError


@pytest.mark.parametrize("cls", [SimgpuError, PlacementInputError, AllocateError])
def test_component_errors_are_input_errors_with_the_same_wording(cls):
    err = cls("no such GPU", field="gpus[0].model", allowed=["H100", "L4"])
    assert isinstance(err, InputError) and isinstance(err, ValueError)
    assert str(err) == err.message == "gpus[0].model: no such GPU (allowed: H100, L4)"
    assert (err.field, err.allowed) == ("gpus[0].model", ["H100", "L4"])
    assert str(cls("plain")) == "plain" and cls("plain").field is None


def test_out_of_memory_keeps_its_message():
    err = OutOfMemoryError(quota=10, used=8, requested=4)
    assert isinstance(err, InputError)
    assert err.message == "out of memory: client asked for 4 bytes with 8 of its 10-byte quota in use"


def test_daemon_errors_carry_the_daemons_message_as_is():
    """The daemon already formatted it (field included): not prefixed a second time."""
    err = DaemonError("INVALID_ARGUMENT", "bytes: must be positive", field="bytes")
    oom = RemoteOutOfMemoryError("out of memory: ...", quota=1, used=1, requested=1)
    assert str(err) == err.message == "bytes: must be positive" and err.field == "bytes"
    assert isinstance(oom, InputError) and str(oom) == oom.message == "out of memory: ..."
