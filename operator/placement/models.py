"""GPU-model filters, each matched by the rule of the spelling that asked for it, so a pod spec copied from a
peer's docs lands where it landed there (docs/requests.md, "GPU models"):

- `fgpu`: fgpu's own `fgpu.io/gpu-model` / `fgpu.io/gpu-model-exclude`. An entry names a GPU when it is one
  of the GPU's names (catalog name, short name, NVML name, aliases; case-insensitive, spaces and underscores
  as hyphens) or the leading hyphen-separated words of one: `A100` is every A100, `A100-80GB` one of them,
  `A10` only the A10. The allow-list and the deny-list both apply.
- `hami`: HAMi's `nvidia.com/use-gputype` / `nouse-gputype`: a case-insensitive substring of the device's
  HAMi type name, `NVIDIA-` + its NVML name (`NVIDIA-NVIDIA A100-SXM4-80GB`), so `A10` matches A100s too;
  when the allow-list is given the deny-list is ignored, as in HAMi.
- `kubeshare`: KubeShare's `sharedgpu/gpu_model`: one name, equal to one of the GPU's names (KubeShare
  compares its model string for equality; its own names are the NVML name with hyphens, e.g.
  `NVIDIA-A100-SXM4-80GB`, which is one of them).

A name no GPU has matches nothing: an allow-list of only such names leaves the pod Pending (a node with that
GPU may join later), a deny-list of them excludes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .gpus import gpu_names, hami_type_name, name_key

Rule = Literal["fgpu", "hami", "kubeshare"]
RULES: tuple[str, ...] = ("fgpu", "hami", "kubeshare")


@dataclass(frozen=True, slots=True)
class ModelFilter:
    """One spelling's model constraint: GPUs it allows (empty: any) and GPUs it excludes."""

    rule: Rule
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def admits(self, model: str) -> bool:
        """Whether a GPU of `model` (the name its node's inventory gives) passes this filter."""
        if not model:
            return False
        if self.allow and not any(_matches(self.rule, token, model) for token in self.allow):
            return False
        if self.rule == "hami" and self.allow:
            return True  # HAMi: use-gputype wins, nouse-gputype is not read
        return not any(_matches(self.rule, token, model) for token in self.deny)

    def describe(self) -> str:
        """The filter in a Pending reason's words: `not in [A100]`, `in excluded [T4]`."""
        parts = [f"not in [{', '.join(self.allow)}]"] if self.allow else []
        if self.deny and not (self.rule == "hami" and self.allow):
            parts.append(f"in excluded [{', '.join(self.deny)}]")
        return " or ".join(parts)


def _matches(rule: str, token: str, model: str) -> bool:
    if rule == "hami":
        return token.upper() in hami_type_name(model).upper()
    key, names = name_key(token), gpu_names(model)
    if rule == "kubeshare":
        return key in names
    return any(n == key or n.startswith(key + "-") for n in names)


def admits_all(filters: tuple[ModelFilter, ...], model: str) -> bool:
    """Every filter of the pod passes (several spellings on one pod all hold)."""
    return all(f.admits(model) for f in filters)


def reason(filters: tuple[ModelFilter, ...]) -> str:
    """kube-scheduler-style reason for nodes none of whose GPUs pass: "GPU model not in [A100]"."""
    return "GPU model " + "; ".join(dict.fromkeys(f.describe() for f in filters if f.describe()))
