"""Reading a node config file: YAML -> validated NodeConfig, with pydantic's errors turned into one SimgpuError
naming the field (``gpus[0].model``) and the allowed values."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pydantic
import yaml

from simgpu.errors import SimgpuError

from .resolve import NodeConfig


def _loc(parts: tuple) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(config)"


def _first_error(err: pydantic.ValidationError) -> SimgpuError:
    e = err.errors()[0]
    loc = _loc(tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-"))))
    cause = e.get("ctx", {}).get("error")
    if isinstance(cause, SimgpuError):
        if loc == "(config)":  # raised by a cross-field check, which names its own field
            return cause
        msg = str(cause)
        prefix = f"{cause.field}: " if cause.field else ""
        msg = msg.removeprefix(prefix).split(" (allowed: ")[0]
        return SimgpuError(msg, field=loc, allowed=cause.allowed)
    msg = e["msg"].removeprefix("Value error, ")
    allowed = None
    if e["type"] in ("literal_error", "enum") and "expected" in e.get("ctx", {}):
        allowed = [a.strip().strip("'") for a in str(e["ctx"]["expected"]).replace(" or ", ",").split(",")]
        msg = f"{e.get('input')!r} is not allowed"
    elif e["type"] == "extra_forbidden":
        msg = "unknown field"
    return SimgpuError(msg, field=loc, allowed=allowed)


def parse_node_config(doc: object) -> NodeConfig:
    """Validate an already-parsed YAML document."""
    if not isinstance(doc, dict):
        raise SimgpuError("the node config must be a YAML mapping", field="(config)")
    if "version" not in doc:
        raise SimgpuError("missing", field="version", allowed=["v1"])
    try:
        return NodeConfig.model_validate(doc)
    except pydantic.ValidationError as err:
        raise _first_error(err) from None


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SimgpuError(f"cannot read {path}: {err.strerror}", field="--config") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SimgpuError(f"{path} is not valid YAML: {err}", field="--config") from None
    return parse_node_config(doc)


def resolve_node_name(cfg: NodeConfig, explicit: str | None = None) -> str:
    """The node name used for UUIDs: --node-name, else the config's nodeName, else $NODE_NAME, else hostname.
    The device plugin and the daemon must agree, so both call this."""
    return explicit or cfg.node_name or os.environ.get("NODE_NAME") or socket.gethostname()

