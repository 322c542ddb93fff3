"""Loading and validating trace CSVs (Alibaba openb format) into the placement core's model.

Node lists: `sn,cpu_milli,memory_mib,gpu,model`, optionally `mig,mig_layout` (MIG nodes, `mig_nodes`); a model
is one of the trace's or any of simgpu's catalog (H100, A100-80GB, L4, ...). Pod lists:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli` and optionally `gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time` (see data/openb/NOTICE) and `mig_profile,priority,preemption_policy`.
Every problem is one `PlacementInputError` line naming the file, the column and the offending rows.
"""
from __future__ import annotations

import csv
import gzip
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.gpus import TRACE_GPU_MEMORY_MIB as GPU_MEMORY_MIB
from fgpu_operator.placement.gpus import canonical_model, known_model
from fgpu_operator.placement.model import MILLI, NodeSpec, Request

from .mig_nodes import MIG_MODES, PREEMPTION_POLICIES, check_pod_profile, mig_gpus

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TIME_COLUMNS = ("creation_time", "deletion_time")
QOS_CLASSES = ("LS", "BE", "Burstable", "Guaranteed")
_SHOWN = 5  # rows named in an error message before "..."
#: Largest value each integer column may hold: far above any real node or pod (openb's largest: 128 cores,
#: 1 TiB, 8 GPUs), low enough that sums and per-GPU arrays stay exact and small.
COLUMN_MAX = {"cpu_milli": 10**7, "memory_mib": 2**30, "gpu": 64, "num_gpu": 64, "gpu_milli": 10**6,
              "priority": 10**9, "creation_time": 10**12, "deletion_time": 10**12}


@dataclass(frozen=True)
class PodRecord:
    request: Request
    creation_time: float | None = None
    deletion_time: float | None = None
    preemption_policy: str = ""  # "" = PreemptLowerPriority (kube-scheduler's default)
    #: The pod's PriorityClass value (what preemption and the queue's order read). Not Request.priority,
    #: which is fgpu's runtime class among the shares of one GPU (0 high, 1 low).
    priority: int = 0


@dataclass(frozen=True)
class Trace:
    name: str
    pods: tuple[PodRecord, ...]

    @property
    def requests(self) -> list[Request]:
        return [p.request for p in self.pods]


def bundled_path(filename: str) -> Path:
    """A file of the bundled openb data (GPU node list and default pod trace)."""
    return Path(str(resources.files("fgpu_operator.data.openb").joinpath(filename)))


DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"
#: The openb variants bundled gzipped beside the default (the 16 traces of the FGD paper's figures; NOTICE).
BUNDLED_VARIANTS = ("cpu050", "cpu100", "cpu200", "cpu250", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
                    "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "multigpu20", "multigpu30", "multigpu40",
                    "multigpu50")
BUNDLED_TRACES = ("default", *BUNDLED_VARIANTS)


def pods_path(name_or_path: str | Path | None) -> Path:
    """A --pods value as a file: an existing path as is, else a bundled trace's name (`gpushare40`), else the
    path (for the loader to report as missing)."""
    if name_or_path is None:
        return bundled_path(DEFAULT_PODS)
    path = Path(name_or_path)
    if path.exists() or str(name_or_path) not in BUNDLED_TRACES:
        return path
    name = str(name_or_path)
    return bundled_path(DEFAULT_PODS if name == "default" else f"openb_pod_list_{name}.csv.gz")


def trace_name(path: Path) -> str:
    stem = path.name.removesuffix(".gz").removesuffix(".csv") if path.name.endswith(".csv.gz") else path.stem
    return stem.removeprefix("openb_pod_list_") if stem.startswith("openb_pod_list_") else stem


def _rows(path: Path, required: tuple[str, ...], what: str) -> list[dict[str, str]]:
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", newline="", encoding="utf-8-sig") as f:  # -sig: a spreadsheet's BOM is no column
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise PlacementInputError(f"{path}: missing column(s) {', '.join(missing)}",
                                          field=what, allowed=[", ".join(required)])
            rows = []
            for i, row in enumerate(reader, start=2):
                if None in row:  # DictReader's key for fields past the header's
                    raise PlacementInputError(f"{path}: row {i} has {len(header) + len(row[None])} fields, the "
                                              f"header {len(header)}", field=what)
                rows.append({k: v or "" for k, v in row.items()})  # a short row's missing fields: empty
            return rows
    except OSError as exc:
        raise PlacementInputError(f"cannot read {path}: {exc.strerror or exc}", field=what) from None
    except (UnicodeDecodeError, csv.Error, EOFError, zlib.error) as exc:
        raise PlacementInputError(f"{path} is not a readable CSV file ({exc})", field=what) from None


def _rows_named(rows: list[int]) -> str:
    shown = ", ".join(str(r) for r in rows[:_SHOWN])
    return f"row{'s' if len(rows) > 1 else ''} {shown}{', ...' if len(rows) > _SHOWN else ''}"


def _int_column(rows: list[dict[str, str]], column: str, path: Path, what: str, *, optional=False) -> list:
    """A column of non-negative integers (`12.0` is 12; inf, nan, 1e30 and -1 are not), at most COLUMN_MAX."""
    top = COLUMN_MAX[column]
    values, bad = [], []
    for i, row in enumerate(rows, start=2):  # row numbers as a spreadsheet shows them (header is row 1)
        text = (row.get(column) or "").strip()
        if optional and text == "":
            values.append(None)
            continue
        try:
            value = float(text)
            if not 0 <= value <= top or value != int(value):  # also refuses nan and inf
                raise ValueError
            values.append(int(value))
        except ValueError:
            bad.append(i)
    if bad:
        first = (rows[bad[0] - 2].get(column) or "").strip()
        raise PlacementInputError(f"{path}: column {column} must hold integers 0..{top}; bad value {first[:30]!r} "
                                  f"in {_rows_named(bad)}", field=what)
    return values


def _unique(rows: list[dict[str, str]], column: str, path: Path, what: str) -> None:
    seen: dict[str, int] = {}
    for i, row in enumerate(rows, start=2):
        name = (row.get(column) or "").strip()
        if not name:
            raise PlacementInputError(f"{path}: column {column} is empty in row {i}", field=what)
        if name in seen:
            raise PlacementInputError(f"{path}: {column} {name[:40]!r} appears twice (rows {seen[name]} and {i})",
                                      field=what, allowed=[f"a unique {column} per row"])
        seen[name] = i


def load_nodes(path: str | Path | None = None) -> list[NodeSpec]:
    path = Path(path) if path else bundled_path(DEFAULT_NODES)
    rows = _rows(path, NODE_COLUMNS, "--nodes")
    if not rows:
        raise PlacementInputError(f"{path} has no nodes", field="--nodes")
    _unique(rows, "sn", path, "--nodes")
    cpu = _int_column(rows, "cpu_milli", path, "--nodes")
    mem = _int_column(rows, "memory_mib", path, "--nodes")
    gpus = _int_column(rows, "gpu", path, "--nodes")
    if not sum(gpus):
        raise PlacementInputError(f"{path} has no GPUs (column gpu is 0 on every row)", field="--nodes",
                                  allowed=["a node list with at least one GPU"])
    unknown = [i for i, (row, g) in enumerate(zip(rows, gpus, strict=True), start=2)
               if g > 0 and not known_model(row["model"].strip())]
    if unknown:
        names = sorted({rows[i - 2]["model"].strip() or "<empty>" for i in unknown})
        raise PlacementInputError(f"{path}: unknown GPU model {', '.join(names)} in {_rows_named(unknown)}",
                                  field="--nodes", allowed=known_models())
    out = []
    for i, (row, c, m, g) in enumerate(zip(rows, cpu, mem, gpus, strict=True), start=2):
        model = canonical_model(row["model"].strip()) if g > 0 else ""
        mode = (row.get("mig") or "").strip()
        if mode not in MIG_MODES:
            raise PlacementInputError(f"{path}: unknown mig {mode[:20]!r} in row {i}", field="--nodes",
                                      allowed=[m or "empty" for m in MIG_MODES])
        layout = (row.get("mig_layout") or "").strip()
        if mode in ("", "none"):
            if layout:
                raise PlacementInputError(f"{path}: row {i} has a mig_layout but mig is {mode or 'empty'}",
                                          field="--nodes", allowed=["mig static or dynamic with a layout"])
            out.append(NodeSpec(row["sn"], c, m, g, model))
        else:
            where = f"{path}: row {i}"
            out.append(NodeSpec(row["sn"], c, m, g, model, gpus=mig_gpus(row["sn"], g, model, mode, layout, where)))
    return out


def known_models() -> list[str]:
    """Every GPU model a file may name: the trace's own, then simgpu's catalog (short names)."""
    from simgpu.catalog import all_gpus

    return sorted(GPU_MEMORY_MIB) + [g.short_name for g in all_gpus() if g.short_name not in GPU_MEMORY_MIB]


def load_pods(path: str | Path | None = None, *, need_times: bool = False) -> Trace:
    """A pod list: a CSV (or .csv.gz) path, or a bundled trace's name (BUNDLED_TRACES); None: the default."""
    path = pods_path(path)
    required = POD_COLUMNS + (TIME_COLUMNS if need_times else ())
    rows = _rows(path, required, "--pods")
    _unique(rows, "name", path, "--pods")
    cpu = _int_column(rows, "cpu_milli", path, "--pods")
    mem = _int_column(rows, "memory_mib", path, "--pods")
    num = _int_column(rows, "num_gpu", path, "--pods")
    milli = _int_column(rows, "gpu_milli", path, "--pods")
    created = _int_column(rows, "creation_time", path, "--pods", optional=True) if need_times else None
    deleted = _int_column(rows, "deletion_time", path, "--pods", optional=True) if need_times else None
    over = [i for i, m in enumerate(milli, start=2) if m > MILLI]
    if over:
        raise PlacementInputError(f"{path}: gpu_milli is per GPU, at most 1000; bad value in {_rows_named(over)}",
                                  field="--pods", allowed=["0..1000 (num_gpu GPUs, each with gpu_milli of it)"])
    models = [tuple(canonical_model(m.strip()) for m in (row.get("gpu_spec") or "").split("|") if m.strip())
              for row in rows]
    unknown = [i for i, spec in enumerate(models, start=2) if any(not known_model(m) for m in spec)]
    if unknown:
        names = sorted({m for spec in models for m in spec if not known_model(m)})
        raise PlacementInputError(f"{path}: unknown GPU model {', '.join(names)} in column gpu_spec, "
                                  f"{_rows_named(unknown)}", field="--pods", allowed=known_models())
    priority = _int_column(rows, "priority", path, "--pods", optional=True) if rows and "priority" in rows[0] else None
    profiles = [check_pod_profile(p, f"{path}: row {i}") if (p := (row.get("mig_profile") or "").strip()) else ""
                for i, row in enumerate(rows, start=2)]
    no_count = [i for i, (p, n) in enumerate(zip(profiles, num, strict=True), start=2) if p and n == 0]
    if no_count:
        raise PlacementInputError(f"{path}: a mig_profile needs num_gpu >= 1 (instances) in {_rows_named(no_count)}",
                                  field="--pods")
    policies = [(row.get("preemption_policy") or "").strip() for row in rows]
    odd = [i for i, p in enumerate(policies, start=2) if p not in ("", *PREEMPTION_POLICIES)]
    if odd:
        raise PlacementInputError(f"{path}: unknown preemption_policy {policies[odd[0] - 2][:30]!r} in "
                                  f"{_rows_named(odd)}", field="--pods", allowed=list(PREEMPTION_POLICIES))
    odd = [i for i, row in enumerate(rows, start=2) if (row.get("qos") or "").strip() not in ("", *QOS_CLASSES)]
    if odd:
        names = sorted({(rows[i - 2].get("qos") or "").strip()[:20] for i in odd})
        raise PlacementInputError(f"{path}: unknown qos {', '.join(map(repr, names))} in {_rows_named(odd)}",
                                  field="--pods", allowed=[*QOS_CLASSES, "empty"])
    if need_times:
        missing = [i for i, t in enumerate(created, start=2) if t is None]
        if missing:
            raise PlacementInputError(f"{path}: creation_time is empty in {_rows_named(missing)}", field="--pods")
    pods = []
    for i, row in enumerate(rows):
        request = Request(name=row["name"], cpu_milli=cpu[i], memory_mib=mem[i], num_gpu=num[i],
                          gpu_milli=milli[i], gpu_models=models[i], qos=(row.get("qos") or "").strip(),
                          mig_profile=profiles[i])
        pods.append(PodRecord(request, created[i] if created else None, deleted[i] if deleted else None,
                              policies[i], (priority[i] or 0) if priority else 0))
    if not any(p.request.wants_gpu or p.request.is_mig for p in pods):
        raise PlacementInputError(f"{path} has no GPU pods (every row has num_gpu or gpu_milli 0)", field="--pods")
    return Trace(trace_name(path), tuple(pods))
