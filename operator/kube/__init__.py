"""The operator's Kubernetes I/O for the scheduler's hot path: asyncio + aiohttp on raw JSON dicts.

Kopf does the watching; this package does the writes (Binding, PodScheduled=False, Events) and leader
election, each returning an `Outcome` instead of raising on API errors. See docs/architecture.md ("Decisions") for why
the bind path is not the official client.

Credentials wrap a `kopf.ConnectionInfo`, so `Credentials(kopf.login_with_kubeconfig())` reuses Kopf's
login; `load()` is preferred in a pod, as it also re-reads the rotating service-account token.
"""
from .config import ConfigError, Credentials, TokenFile, in_cluster, load, load_kubeconfig
from .events import EventRecorder
from .leader import LeaderElector, default_identity
from .outcome import Outcome, Result, classify
from .pods import bind, set_unschedulable
from .ratelimit import TokenBucket
from .session import ApiSession, Limits

__all__ = [
    "ApiSession", "ConfigError", "Credentials", "EventRecorder", "LeaderElector", "Limits", "Outcome",
    "Result", "TokenBucket", "TokenFile", "bind", "classify", "default_identity", "in_cluster", "load",
    "load_kubeconfig", "set_unschedulable",
]
