"""The GPU catalog: per-GPU hardware facts loaded from `simgpu/data/gpus.yaml` and validated.

Peaks are derived, not stored: peak = SMs x FLOP/clk/SM x clock, so the performance model can scale a
GPU it was not fitted on (and a MIG instance, see simgpu.mig) from the same few per-SM rates. The
datasheet figures stay in the data only so tests can check the derivation against NVIDIA's numbers.
"""
from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

import pydantic
import yaml

from simgpu.errors import SimgpuError

TENSOR_DTYPES = ("fp16", "bf16", "tf32", "int8", "fp8")
MIB = 1 << 20


class GPUSpec(pydantic.BaseModel, frozen=True):
    """One GPU model (or a MIG instance seen as a smaller GPU). All rates are dense, per direction."""

    model_config = pydantic.ConfigDict(extra="forbid")

    name: str
    short_name: str
    #: What NVML's nvmlDeviceGetName (and nvidia-smi) says: HAMi registers `NVIDIA-` + it as the device's
    #: type, and GFD's `nvidia.com/gpu.product` is it with spaces as hyphens. "" for a derived spec (MIG).
    nvml_name: str = ""
    aliases: list[str] = []
    arch: Literal["pascal", "volta", "turing", "ampere", "ada", "hopper"]
    sms: int = pydantic.Field(gt=0)
    tensor_flops_per_clk_per_sm: dict[Literal["fp16", "bf16", "tf32", "int8", "fp8"], pydantic.PositiveInt]
    fp32_flops_per_clk_per_sm: int = pydantic.Field(gt=0)
    boost_mhz: float = pydantic.Field(gt=0)
    peak_mhz: float = pydantic.Field(gt=0)
    mem_bytes: int = pydantic.Field(gt=0)
    mem_bw_bytes_per_s: float = pydantic.Field(gt=0)
    l2_bytes: int = pydantic.Field(gt=0)
    power_w: float = pydantic.Field(gt=0)
    pcie_bytes_per_s: float = pydantic.Field(gt=0)
    mig: bool
    sources: list[str] = pydantic.Field(min_length=1)
    # NVIDIA's published dense peaks in TFLOPS/TOPS, kept to check the derived peaks against.
    datasheet_tflops: dict[str, float] = {}

    def __hash__(self) -> int:
        # Frozen, but dict/list fields make pydantic's field hash fail; hash the identifying scalars so
        # specs can key caches (equal specs still hash equal).
        return hash((self.name, self.sms, self.mem_bytes, self.boost_mhz, self.peak_mhz, self.mem_bw_bytes_per_s))

    @pydantic.model_validator(mode="after")
    def _clocks_consistent(self) -> GPUSpec:
        if self.peak_mhz > self.boost_mhz:
            raise ValueError(f"peak_mhz {self.peak_mhz} is above boost_mhz {self.boost_mhz}")
        return self

    def supported_dtypes(self) -> list[str]:
        """"fp32" (CUDA cores) plus the tensor-core dtypes this GPU has, in a fixed order."""
        return ["fp32", *[d for d in TENSOR_DTYPES if d in self.tensor_flops_per_clk_per_sm]]

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s as NVIDIA quotes it: tensor dtypes at peak_mhz; "fp32" (CUDA cores) at
        boost_mhz, because NVIDIA quotes FP32 at the max clock (on Hopper the two clocks differ)."""
        key = dtype.lower() if isinstance(dtype, str) else dtype
        if key == "fp32":
            return self.sms * self.fp32_flops_per_clk_per_sm * self.boost_mhz * 1e6
        if key not in self.tensor_flops_per_clk_per_sm:
            raise SimgpuError(f"{dtype!r} is not supported on {self.name}", field="dtype",
                              allowed=self.supported_dtypes())
        return self.sms * self.tensor_flops_per_clk_per_sm[key] * self.peak_mhz * 1e6


class _GpuRecord(pydantic.BaseModel):
    """A GPU as written in gpus.yaml (human units); converted to GPUSpec."""

    model_config = pydantic.ConfigDict(extra="forbid")

    name: str
    short_name: str
    nvml_name: str = pydantic.Field(min_length=1)
    aliases: list[str] = []
    arch: str
    sms: int
    tensor_flops_per_clk_per_sm: dict[str, int]
    fp32_flops_per_clk_per_sm: int
    boost_mhz: float
    peak_mhz: float
    mem_mib: float = pydantic.Field(gt=0)
    mem_bw_gbs: float = pydantic.Field(gt=0)
    l2_mib: float = pydantic.Field(gt=0)
    power_w: float
    pcie_gbs: float = pydantic.Field(gt=0)
    mig: bool
    datasheet_tflops: dict[str, float] = {}
    sources: list[str]

    def to_spec(self) -> GPUSpec:
        return GPUSpec(
            name=self.name, short_name=self.short_name, nvml_name=self.nvml_name, aliases=self.aliases,
            arch=self.arch, sms=self.sms,
            tensor_flops_per_clk_per_sm=self.tensor_flops_per_clk_per_sm,
            fp32_flops_per_clk_per_sm=self.fp32_flops_per_clk_per_sm,
            boost_mhz=self.boost_mhz, peak_mhz=self.peak_mhz,
            mem_bytes=round(self.mem_mib * MIB), mem_bw_bytes_per_s=self.mem_bw_gbs * 1e9,
            l2_bytes=round(self.l2_mib * MIB), power_w=self.power_w, pcie_bytes_per_s=self.pcie_gbs * 1e9,
            mig=self.mig, sources=self.sources, datasheet_tflops=self.datasheet_tflops,
        )


def _describe(err: pydantic.ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(record)"
        parts.append(f"field {loc}: {e['msg']}")
    return "; ".join(parts)


def parse_catalog(doc: object, origin: str = "gpus.yaml") -> list[GPUSpec]:
    """Validate a parsed catalog document; bad data raises SimgpuError naming the GPU and the field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise SimgpuError(f"{origin}: expected a mapping with a 'gpus' list", field="gpus")
    specs: list[GPUSpec] = []
    for i, raw in enumerate(doc["gpus"]):
        label = raw.get("name", f"#{i}") if isinstance(raw, dict) else f"#{i}"
        try:
            specs.append(_GpuRecord.model_validate(raw).to_spec())
        except pydantic.ValidationError as err:
            raise SimgpuError(f"{origin}: GPU {label}: {_describe(err)}", field="gpus") from None
    seen: dict[str, str] = {}
    for spec in specs:
        for key in names_of(spec):
            if key in seen and seen[key] != spec.name:
                raise SimgpuError(f"{origin}: GPU {spec.name}: name {key!r} is also used by {seen[key]}",
                                  field="aliases")
            seen[key] = spec.name
    return specs


def lookup_key(name: str) -> str:
    """Case-insensitive key; spaces and underscores count as hyphens ("NVIDIA H100 80GB HBM3")."""
    return re.sub(r"[\s_]+", "-", name.strip()).lower()


def names_of(spec: GPUSpec) -> frozenset[str]:
    """Every name a GPU answers to (canonical, short, aliases), as lookup keys (see `lookup_key`)."""
    return frozenset(lookup_key(n) for n in (spec.name, spec.short_name, spec.nvml_name, *spec.aliases) if n)


@cache
def _catalog() -> tuple[tuple[GPUSpec, ...], dict[str, GPUSpec]]:
    text = resources.files("simgpu").joinpath("data", "gpus.yaml").read_text()
    specs = parse_catalog(yaml.safe_load(text))
    index = {key: spec for spec in specs for key in names_of(spec)}
    return tuple(specs), index


def all_gpus() -> list[GPUSpec]:
    """Every catalogued GPU, in the data file's order."""
    return list(_catalog()[0])


def short_names() -> list[str]:
    return [spec.short_name for spec in _catalog()[0]]


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by canonical name, short name or alias, case-insensitively."""
    spec = _catalog()[1].get(lookup_key(name)) if isinstance(name, str) else None
    if spec is None:
        raise SimgpuError(f"unknown GPU {name!r}", field="gpu", allowed=short_names())
    return spec
