"""Device-memory bookkeeping for one emulated device (a GPU or a MIG instance).

Two quota modes, as the sharing literature does it:
- "hard" (Gaia / HAMi-core default): an allocation that would push a client over its quota, or the
  device over its physical memory, fails with OutOfMemoryError naming quota, used and requested bytes.
- "oversubscribe" (AntMan / HAMi's oversubscription): the part of an allocation that does not fit the
  client's quota or the device's free memory lives in host memory instead; the client then pays PCIe
  transfers for it (see spill_fraction and simgpu.device.sharing). Host memory for spills is finite too.

A quota belongs to a grant, not to a context: contexts opened with the same grant (`group`: one container's
share of one device, as HAMi-core shares one limit among a container's processes) draw on one quota, so a
workload that opens more contexts, or one that got hold of another pod's token, gets no more memory than that
grant gave. Pure bookkeeping: no timing here. Spilled bytes are not migrated back when device memory frees up
(a simplification: UVM would migrate pages on access).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

from simgpu.errors import OutOfMemoryError, SimgpuError

MemoryMode = Literal["hard", "oversubscribe"]
MEMORY_MODES: tuple[str, ...] = ("hard", "oversubscribe")


@dataclass(frozen=True)
class Allocation:
    handle: int
    client: int
    device_bytes: int
    host_bytes: int

    @property
    def nbytes(self) -> int:
        return self.device_bytes + self.host_bytes


@dataclass
class ClientMemory:
    quota: int  # device-resident budget in bytes
    device_bytes: int = 0
    host_bytes: int = 0
    handles: set[int] = field(default_factory=set)
    group: str | None = None  # contexts of one grant share its quota


class MemoryLedger:
    """Who holds which bytes on one device; every byte is owned by exactly one live client."""

    def __init__(self, total_bytes: int, mode: str = "hard", host_bytes: int | None = None):
        if mode not in MEMORY_MODES:
            raise SimgpuError(f"unknown memory mode {mode!r}", field="memoryMode", allowed=MEMORY_MODES)
        if total_bytes <= 0:
            raise SimgpuError("device memory must be positive", field="mem_bytes")
        self.total = total_bytes
        self.mode: MemoryMode = mode  # type: ignore[assignment]
        self.host_total = total_bytes if host_bytes is None else host_bytes
        self._clients: dict[int, ClientMemory] = {}
        self._groups: dict[str, set[int]] = {}  # grant -> its live contexts
        self._allocs: dict[int, Allocation] = {}
        self._next_handle = itertools.count(1)

    # --- clients -------------------------------------------------------------------------------------
    def add_client(self, client: int, quota: int | None, group: str | None = None) -> None:
        """`group`: the grant the context was opened with; contexts of one group share one quota."""
        if quota is not None and quota <= 0:
            raise SimgpuError(f"memory quota must be positive, got {quota}", field="mem_limit_bytes")
        self._clients[client] = ClientMemory(quota=min(quota or self.total, self.total), group=group)
        if group is not None:
            self._groups.setdefault(group, set()).add(client)

    def release_client(self, client: int) -> int:
        """Free everything the client held (its exit); returns the bytes released."""
        mem = self._clients.pop(client, None)
        if mem is None:
            return 0
        if mem.group is not None:
            members = self._groups.get(mem.group, set())
            members.discard(client)
            if not members:
                self._groups.pop(mem.group, None)
        for handle in mem.handles:
            del self._allocs[handle]
        return mem.device_bytes + mem.host_bytes

    # --- allocation ----------------------------------------------------------------------------------
    def malloc(self, client: int, nbytes: int, who: str = "client") -> Allocation:
        mem = self._client(client)
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
            raise SimgpuError(f"allocation size must be a positive integer, got {nbytes!r}", field="bytes")
        used = self.quota_used(client)
        room_quota = mem.quota - used
        room_device = self.total - self.device_used
        if self.mode == "hard":
            if nbytes > room_quota:
                raise OutOfMemoryError(quota=mem.quota, used=used, requested=nbytes, who=who)
            if nbytes > room_device:
                raise OutOfMemoryError(quota=self.total, used=self.device_used, requested=nbytes,
                                       who="device (physical memory)")
            on_device, on_host = nbytes, 0
        else:
            on_device = max(0, min(nbytes, room_quota, room_device))
            on_host = nbytes - on_device
            if on_host > self.host_total - self.host_used:
                raise OutOfMemoryError(quota=self.host_total, used=self.host_used, requested=on_host,
                                       who="host spill pool")
        alloc = Allocation(next(self._next_handle), client, on_device, on_host)
        self._allocs[alloc.handle] = alloc
        mem.handles.add(alloc.handle)
        mem.device_bytes += on_device
        mem.host_bytes += on_host
        return alloc

    def free(self, client: int, handle: int) -> Allocation:
        """Free one allocation; a handle the client does not own is an error (never another's memory)."""
        mem = self._client(client)
        if handle not in mem.handles:
            raise SimgpuError(f"no allocation {handle!r} in this context", field="handle")
        alloc = self._allocs.pop(handle)
        mem.handles.discard(handle)
        mem.device_bytes -= alloc.device_bytes
        mem.host_bytes -= alloc.host_bytes
        return alloc

    # --- views ---------------------------------------------------------------------------------------
    def _client(self, client: int) -> ClientMemory:
        try:
            return self._clients[client]
        except KeyError:
            raise SimgpuError(f"no such context {client}", field="context") from None

    def usage(self, client: int) -> ClientMemory:
        return self._client(client)

    def quota_used(self, client: int) -> int:
        """Device bytes counted against the client's quota: its own, plus its grant's other contexts'."""
        mem = self._client(client)
        if mem.group is None:
            return mem.device_bytes
        return sum(self._clients[c].device_bytes for c in self._groups[mem.group])

    def spill_fraction(self, client: int) -> float:
        """Share of the client's data that lives in host memory (0 when nothing spilled)."""
        mem = self._clients.get(client)
        if mem is None or mem.host_bytes == 0:
            return 0.0
        return mem.host_bytes / (mem.device_bytes + mem.host_bytes)

    @property
    def device_used(self) -> int:
        return sum(m.device_bytes for m in self._clients.values())

    @property
    def host_used(self) -> int:
        return sum(m.host_bytes for m in self._clients.values())

    def allocations(self) -> list[Allocation]:
        return list(self._allocs.values())
