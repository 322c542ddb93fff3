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


def _type_tag(part: object) -> bool:
    """pydantic's location parts that name a validator or a union member (`function-after[...]`, `list[str]`,
    `int`), not a field."""
    return isinstance(part, str) and (part.startswith("function-") or "[" in part or part in ("str", "int", "float",
                                                                                                 "bool"))


def _first_error(err: pydantic.ValidationError) -> SimgpuError:
    e = err.errors()[0]
    loc = _loc(tuple(p for p in e["loc"] if not _type_tag(p)))
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
    value = e.get("input")
    ctx = e.get("ctx", {})
    if e["type"] in ("literal_error", "enum") and "expected" in ctx:
        allowed = [a.strip().strip("'") for a in str(ctx["expected"]).replace(" or ", ",").split(",")]
        msg = f"{_shown(value)} is not allowed"
    elif e["type"] == "extra_forbidden":
        msg = "unknown field"
    elif e["type"] == "missing":
        msg = "missing"
    elif isinstance(value, str | int | float | bool | type(None)):
        msg = f"got {_shown(value)}: {msg[0].lower()}{msg[1:]}"  # the value, then what pydantic wanted
    else:
        msg = f"got a {type(value).__name__}: {msg[0].lower()}{msg[1:]}"
    return SimgpuError(msg, field=loc, allowed=allowed)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where installed
    """PyYAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last one
    silently, so `gpus:` written twice would drop the first list)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice (first on line {seen[key] + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark.line
            except TypeError:  # an unhashable key (a list as key): let PyYAML report it
                pass
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, source: str) -> object:
    """One YAML document -> Python objects; any YAML error is one line naming `source`, line and column."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}: line {mark.line + 1} column {mark.column + 1}" if mark else source
        what = " ".join(str(p) for p in (err.context, err.problem) if p)
        raise SimgpuError(f"{where}: not valid YAML: {what}", field="--config") from None
    except yaml.YAMLError as err:
        raise SimgpuError(f"{source}: not valid YAML: {err}", field="--config") from None
    except RecursionError:
        raise SimgpuError(f"{source}: nested too deeply", field="--config") from None


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise SimgpuError(f"cannot read {path}: {err.strerror}", field="--config") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SimgpuError(f"{path}: byte {err.start} is not UTF-8 ({data[err.start:err.start + 1]!r})",
                          field="--config", allowed=["a UTF-8 text file"]) from None
    return parse_node_config(parse_yaml(text, str(path)))


def resolve_node_name(cfg: NodeConfig, explicit: str | None = None) -> str:
    """The node name used for UUIDs: --node-name, else the config's nodeName, else $NODE_NAME, else hostname.
    The device plugin and the daemon must agree, so both call this."""
    return explicit or cfg.node_name or os.environ.get("NODE_NAME") or socket.gethostname()

