"""The cluster and request model: plain data + numpy arrays, so policies can score every node at once.

A node has CPU (milli-cores), host memory (MiB), a GPU model and per-GPU free capacity in milli-GPU (1000 = a
whole GPU) and in GPU memory (MiB). A request asks for `num_gpu` GPUs with `gpu_milli` of each (below 1000 only
for a single shared GPU), optionally GPU memory per GPU, a GPU-model constraint, CPU and host memory.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import PlacementInputError

MILLI = 1000
#: Per-model GPU memory in MiB. Public models: the FGD simulator's `MapGpuTypeMemoryMiB`
#: (kubernetes-scheduler-simulator, pkg/type/open-gpu-share/utils/const.go). G1-G3 are undisclosed Alibaba
#: models; the placeholder sizes follow the openb data README.
GPU_MEMORY_MIB: dict[str, int] = {
    "P4": 7611, "2080": 11019, "1080": 11178, "M40": 11448, "T4": 15109, "V100M16": 16160, "P100": 16280,
    "A10": 22731, "3090": 24268, "V100M32": 32510, "A100": 81251, "G1": 10000, "G2": 20000, "G3": 30000,
}
#: Affinity tags used by the GPU-clustering policy: 0 = shares one GPU, k = k whole GPUs.
SHARE_TAG = 0
MAX_TAGS = 9


@dataclass(frozen=True, slots=True)
class Request:
    """What one pod asks for. `gpu_models` empty means any GPU model is fine."""

    name: str
    cpu_milli: int
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    gpu_mem_mib: int = 0
    sm_pct: int = 0
    priority: int = 0
    qos: str = ""

    @property
    def is_share(self) -> bool:
        """A fraction of one GPU: the only case that may share a device with other pods."""
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def wants_gpu(self) -> bool:
        return self.num_gpu > 0 and self.gpu_milli > 0

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli if self.wants_gpu else 0

    @property
    def affinity_tag(self) -> int | None:
        if not self.wants_gpu:
            return None
        return SHARE_TAG if self.is_share else min(self.num_gpu, MAX_TAGS - 1)

    @property
    def spec(self) -> tuple[int, int, int, tuple[str, ...]]:
        """The shape that placement depends on (FGD's "pod resource"): CPU, GPU fraction, GPU count, models.

        CPU-less requests count as 100 milli-cores, as kube-scheduler's non-zero defaults do for scoring."""
        return (self.cpu_milli or 100, self.gpu_milli if self.wants_gpu else 0,
                self.num_gpu if self.wants_gpu else 0, self.gpu_models)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    model: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request went: the node index and the GPU indices it uses (empty for CPU-only requests)."""

    request: Request
    node: int
    gpus: tuple[int, ...]


@dataclass
class Cluster:
    """Mutable cluster state as arrays over nodes (N) and GPU slots (N x G, padded slots have capacity 0)."""

    nodes: list[NodeSpec]
    models: list[str] = field(init=False)
    model_idx: np.ndarray = field(init=False)
    gpu_count: np.ndarray = field(init=False)
    cpu_cap: np.ndarray = field(init=False)
    mem_cap: np.ndarray = field(init=False)
    cpu_left: np.ndarray = field(init=False)
    mem_left: np.ndarray = field(init=False)
    gpu_left: np.ndarray = field(init=False)
    gpu_mem_cap: np.ndarray = field(init=False)
    gpu_mem_left: np.ndarray = field(init=False)
    gpu_left_total: np.ndarray = field(init=False)
    affinity: np.ndarray = field(init=False)
    version: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise PlacementInputError("the node list is empty", field="nodes")
        self.models = sorted({n.model for n in self.nodes})
        index = {m: i for i, m in enumerate(self.models)}
        n = len(self.nodes)
        width = max(1, max(node.num_gpu for node in self.nodes))
        self.model_idx = np.array([index[node.model] for node in self.nodes], dtype=np.int32)
        self.gpu_count = np.array([node.num_gpu for node in self.nodes], dtype=np.int32)
        self.cpu_cap = np.array([node.cpu_milli for node in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([node.memory_mib for node in self.nodes], dtype=np.int64)
        slots = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.gpu_left = np.where(slots, MILLI, 0).astype(np.int32)
        per_gpu_mem = np.array([GPU_MEMORY_MIB.get(node.model, 0) for node in self.nodes], dtype=np.int64)
        self.gpu_mem_cap = np.where(slots, per_gpu_mem[:, None], 0)
        self.affinity = np.zeros((n, MAX_TAGS), dtype=np.int32)
        self.version = np.zeros(n, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Empty the cluster (every node back to full capacity)."""
        self.cpu_left = self.cpu_cap.copy()
        self.mem_left = self.mem_cap.copy()
        slots = np.arange(self.gpu_left.shape[1])[None, :] < self.gpu_count[:, None]
        self.gpu_left = np.where(slots, MILLI, 0).astype(np.int32)
        self.gpu_mem_left = self.gpu_mem_cap.copy()
        self.gpu_left_total = self.gpu_left.sum(axis=1).astype(np.int64)
        self.affinity[:] = 0
        self.version += 1

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    def model_mask(self, gpu_models: Sequence[str]) -> np.ndarray:
        """Nodes whose GPU model satisfies a request's constraint (no constraint: every node)."""
        if not gpu_models:
            return np.ones(self.size, dtype=bool)
        allowed = np.array([m in gpu_models and m != "" for m in self.models])
        return allowed[self.model_idx]

    # --- reserve / release: the only two mutations --------------------------------------------------
    def reserve(self, request: Request, node: int, gpus: Sequence[int]) -> Placement:
        """Take the request's resources on `node` and the given GPUs (the framework checked they fit)."""
        self.cpu_left[node] -= request.cpu_milli
        self.mem_left[node] -= request.memory_mib
        if request.wants_gpu:
            for g in gpus:
                self.gpu_left[node, g] -= request.gpu_milli
                self.gpu_mem_left[node, g] -= self._gpu_mem(request, node)
            self.gpu_left_total[node] -= request.gpu_milli * len(gpus)
            self.affinity[node, request.affinity_tag] += 1
        self.version[node] += 1
        return Placement(request, node, tuple(int(g) for g in gpus))

    def release(self, placement: Placement) -> None:
        """Give a placement's resources back (pods departing in timeline mode)."""
        request, node = placement.request, placement.node
        self.cpu_left[node] += request.cpu_milli
        self.mem_left[node] += request.memory_mib
        if request.wants_gpu:
            for g in placement.gpus:
                self.gpu_left[node, g] += request.gpu_milli
                self.gpu_mem_left[node, g] += self._gpu_mem(request, node)
            self.gpu_left_total[node] += request.gpu_milli * len(placement.gpus)
            self.affinity[node, request.affinity_tag] -= 1
        self.version[node] += 1

    def _gpu_mem(self, request: Request, node: int) -> int:
        """GPU memory a request holds per GPU: its own figure, or its GPU fraction of the device's memory."""
        if request.gpu_mem_mib:
            return request.gpu_mem_mib
        cap = int(self.gpu_mem_cap[node, 0])
        return cap * request.gpu_milli // MILLI
