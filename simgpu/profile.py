"""Fitted GPU profiles: a YAML file written by `simgpu calibrate` that describes one real GPU (its spec
as measured, plus the performance model's constants fitted on it). `load_gpu` accepts either a catalog
name or a profile path, so every command that takes a GPU name also takes `--profile FILE`."""
from __future__ import annotations

import json
from pathlib import Path

import pydantic
import yaml

from simgpu.catalog import GPUSpec, get_gpu
from simgpu.errors import SimgpuError
from simgpu.perf.params import PerfParams

PROFILE_VERSION = "v1"


class FittedGPU(GPUSpec, frozen=True):
    """A GPUSpec that carries its own fitted performance constants (simgpu.perf uses them)."""

    perf_params: PerfParams
    profile_source: str = ""


def with_params(gpu: GPUSpec, params: PerfParams) -> FittedGPU:
    """The same GPU with other constants (fast, unvalidated: both inputs are already validated)."""
    data = {name: getattr(gpu, name) for name in GPUSpec.model_fields}
    return FittedGPU.model_construct(**data, perf_params=params,
                                     profile_source=getattr(gpu, "profile_source", ""))


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or Path(name).is_file()


def load_profile(path: str | Path) -> FittedGPU:
    """Read and validate a profile; errors name the file and the field."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as err:
        raise SimgpuError(f"cannot read {p}: {err.strerror}", field="profile",
                          allowed=["a YAML file written by `simgpu calibrate`"]) from None
    except yaml.YAMLError as err:
        raise SimgpuError(f"{p} is not valid YAML: {str(err).splitlines()[0]}", field="profile") from None
    if not isinstance(doc, dict) or doc.get("version") != PROFILE_VERSION:
        raise SimgpuError(f"{p}: expected a mapping with version: {PROFILE_VERSION}", field="profile.version",
                          allowed=[PROFILE_VERSION])
    for key in ("gpu", "perf_params"):
        if not isinstance(doc.get(key), dict):
            raise SimgpuError(f"{p}: missing mapping {key!r}", field=f"profile.{key}")
    try:
        return FittedGPU.model_validate({**doc["gpu"], "perf_params": doc["perf_params"],
                                         "profile_source": str(p)})
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise SimgpuError(f"{p}: {first['msg']}", field=f"profile.{loc}") from None


def load_gpu(name_or_path: str) -> GPUSpec:
    """A catalog GPU by name (case-insensitive, short names and aliases too) or a fitted profile file."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise SimgpuError("empty GPU name", field="gpu")
    if _looks_like_path(name_or_path):
        return load_profile(name_or_path)
    return get_gpu(name_or_path)


def profile_document(gpu: GPUSpec, params: PerfParams, **extra: object) -> dict:
    """The YAML document for a profile (the inverse of load_profile)."""
    spec = GPUSpec.model_validate({name: getattr(gpu, name) for name in GPUSpec.model_fields})
    plain = json.loads(json.dumps(extra, default=str))  # e.g. torch's version object -> str
    return {"version": PROFILE_VERSION, "gpu": spec.model_dump(mode="json"),
            "perf_params": params.model_dump(mode="json"), **plain}


# --- the host's part (`simgpu calibrate --host`) -------------------------------------------------------------
HOST_KEYS = ("host_floor_s", "host_latency_s", "host_dispatch_s")


def host_params(measured: dict) -> dict:
    """The model's host constants from simgpu.calibrate_host.measure_host()'s output: the floor and the
    latency of an event-timed GEMM ("default": the median over the dtype paths, which differ by no more
    than the host's own drift -- H100 host 24-34 us, H200 host 21-23 us for the floor) and of an
    elementwise op ("copy": a lighter framework path, ~10 us less), and the CPU time to issue one op back
    to back. Each path's own numbers stay in the measurements."""
    return {"host_floor_s": {k: float(measured["host_floor_s"][k]) for k in ("default", "copy")},
            "host_latency_s": {k: float(measured["host_latency_s"][k]) for k in ("default", "copy")},
            "host_dispatch_s": float(measured["host_dispatch_s"])}


def host_document(measured: dict) -> dict:
    """The YAML document `simgpu calibrate --host` writes (load_host reads it back)."""
    plain = json.loads(json.dumps({k: measured[k] for k in ("info", "probe") if k in measured}, default=str))
    return {"version": PROFILE_VERSION, "kind": "host", "host": host_params(measured),
            "measured_on": plain.get("info", {}), "probe": plain.get("probe", "")}


def load_host(path: str | Path) -> dict:
    """A host file's constants ({host_floor_s: {...}, host_latency_s: {...}, host_dispatch_s})."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as err:
        raise SimgpuError(f"cannot read {p}: {err.strerror}", field="host",
                          allowed=["a YAML file written by `simgpu calibrate --host`"]) from None
    except yaml.YAMLError as err:
        raise SimgpuError(f"{p} is not valid YAML: {str(err).splitlines()[0]}", field="host") from None
    host = doc.get("host") if isinstance(doc, dict) else None
    if not isinstance(host, dict) or set(host) != set(HOST_KEYS):
        raise SimgpuError(f"{p}: expected a mapping `host` with {', '.join(HOST_KEYS)}", field="host")
    for key in ("host_floor_s", "host_latency_s"):
        value = host[key]
        if (not isinstance(value, dict) or "default" not in value
                or not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1 for v in value.values())):
            raise SimgpuError(f"{p}: {key} must map 'default' (and dtypes, 'copy') to seconds in [0, 1)",
                              field=f"host.{key}")
    dispatch = host["host_dispatch_s"]
    if isinstance(dispatch, bool) or not isinstance(dispatch, int | float) or not 0 <= dispatch < 1:
        raise SimgpuError(f"{p}: host_dispatch_s must be seconds in [0, 1)", field="host.host_dispatch_s")
    return {**{key: {str(k): float(v) for k, v in host[key].items()} for key in ("host_floor_s", "host_latency_s")},
            "host_dispatch_s": float(dispatch)}


def with_host(gpu: GPUSpec, host: dict) -> FittedGPU:
    """The same GPU (its own constants, or its architecture's) on a host with these host constants."""
    from simgpu.perf.params import params_for

    return with_params(gpu, params_for(gpu).model_copy(update={k: host[k] for k in HOST_KEYS}))
