"""The ways to fill one GPU with sharing pods: the columns of both placement bounds' integer programs
(ceiling.py, online_bound.py), in a module of their own so neither bound imports the other."""
from __future__ import annotations

from collections.abc import Sequence

from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.model import MILLI

MAX_FILLINGS = 200_000


def maximal_fillings(sizes: Sequence[int], limits: Sequence[int], room: int = MILLI) -> list[tuple[int, ...]]:
    """Every count vector k (k[i] <= limits[i]) with sum(k * sizes) <= room to which no size with spare
    count can be added. Sizes in milli-GPU, positive."""
    fillings: list[tuple[int, ...]] = []
    counts = [0] * len(sizes)

    def extend(i: int, left: int) -> None:
        if i == len(sizes):
            if all(sizes[j] > left or counts[j] >= limits[j] for j in range(len(sizes))):
                fillings.append(tuple(counts))
                if len(fillings) > MAX_FILLINGS:
                    raise PlacementInputError(f"more than {MAX_FILLINGS} ways to fill one GPU", field="pods",
                                              allowed=[f"at most {MAX_FILLINGS} maximal GPU fillings"])
            return
        for k in range(min(left // sizes[i], limits[i]), -1, -1):
            counts[i] = k
            extend(i + 1, left - k * sizes[i])
        counts[i] = 0

    extend(0, room)
    return fillings
