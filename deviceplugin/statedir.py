"""Where the plugin keeps node state that must outlive it (today: the allocation journal, records.py).

Chosen in this order: `--state-dir`, the config's `stateDir`, `$FGPU_STATE_DIR`; with none of them set, the
directory of `tokenSecretFile` if it is writable (where the journal lived before `--state-dir` existed, so
existing setups keep their journal), else /var/lib/fgpu. The directory is created if missing. One that cannot
be written is an error naming `--state-dir`, never a silent loss of crash safety: a Secret mounted read-only
at the token's directory used to disable the journal with only a warning.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

from simgpu.errors import SimgpuError

DEFAULT_STATE_DIR = "/var/lib/fgpu"
STATE_DIR_ENV = "FGPU_STATE_DIR"
FLAG = "--state-dir"


def explicit_state_dir(flag: str | None, config_value: str | None,
                       env: Mapping[str, str]) -> tuple[str, str] | None:
    """(directory, where it was set) from the flag, the config or the environment; None when none is set."""
    sources = ((flag, FLAG), (config_value, "the config's stateDir"), (env.get(STATE_DIR_ENV), f"${STATE_DIR_ENV}"))
    for value, source in sources:
        if value:
            return value, source
    return None


def writable_problem(path: str) -> str | None:
    """Why `path` cannot hold state (created if missing), or None if a file can be created in it."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".fgpu-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return err.strerror or str(err)
    return None


def prepare_state_dir(flag: str | None, config_value: str | None, env: Mapping[str, str],
                      token_secret_file: str, default: str = DEFAULT_STATE_DIR) -> str:
    """The state directory, created and known to be writable; SimgpuError(field='--state-dir') otherwise."""
    chosen = explicit_state_dir(flag, config_value, env)
    if chosen is not None:
        path, source = chosen
        problem = writable_problem(path)
        if problem:
            hint = "" if source == FLAG else f" (set by {source})"
            raise SimgpuError(f"{path} is not a writable directory: {problem}{hint}", field=FLAG)
        return os.path.abspath(path)
    tried = []
    for path in (os.path.dirname(os.path.abspath(token_secret_file)), default):
        problem = writable_problem(path)
        if problem is None:
            return path
        tried.append(f"{path} ({problem})")
    raise SimgpuError(f"no writable directory for the allocation journal: tried {' and '.join(tried)};"
                      " pass a writable one", field=FLAG)
