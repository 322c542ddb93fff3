"""The placement core: cluster/request model, framework phases, policies and FGD's fragmentation measure.

Pure Python + numpy; the Kopf operator and the trace simulator are two shells over it."""
from .errors import PlacementInputError
from .fragmentation import FragMeter, TargetWorkload
from .framework import Framework, Unschedulable
from .model import Cluster, NodeSpec, Placement, Request

__all__ = ["Cluster", "FragMeter", "Framework", "NodeSpec", "Placement", "PlacementInputError", "Request",
           "TargetWorkload", "Unschedulable"]
