"""Aliyun gpushare: `aliyun.com/gpu-mem: N` on a container, memory on one GPU in GiB (or MiB, the device
plugin's `--memory-unit`). gpushare reserves no compute and isolates nothing; fgpu sizes the share by its
memory."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.quantity import parse_quantity, whole

from ..config import AdmissionConfig
from ..podview import PodView
from .common import Claims

SOURCE = "aliyun"
_UNIT_SHIFT = {"GiB": 30, "MiB": 20}


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    out, shift = Claims(SOURCE), _UNIT_SHIFT[config.aliyun_memory_unit]
    for c in view.containers:
        if (text := c.resource(keys.ALIYUN_MEMORY)) is not None:
            field = c.resource_field(keys.ALIYUN_MEMORY)
            amount = whole(parse_quantity(text, field), text, field, 0, 1 << (60 - shift),
                           f"a number of {config.aliyun_memory_unit}")
            if amount:
                out.add("mem_bytes", amount << shift, text, field, container=c.name)
    return out
