"""The admission webhook's Kopf registrations, served by the operator process through Kopf's webhook server.

The decisions are the pure `fgpu_operator.admission` functions; this module only turns them into Kopf's
terms: a deny is a `kopf.AdmissionError` carrying the one-line reason, a mutation is written into Kopf's
`patch` (which Kopf sends as a JSONPatch).
"""
from __future__ import annotations

import copy
import logging

import jsonpatch
import kopf

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

from ..admission import AdmissionConfig, HandoffError, parse_pod
from ..admission.dra import admit
from ..kube.outcome import Result

log = logging.getLogger("fgpu.webhook")
MUTATE_ID, VALIDATE_ID = "fgpu-request", "fgpu-handoff"  # the ids the handlers below register under
WEBHOOK_IDS = (MUTATE_ID, VALIDATE_ID)


class DenialsAreNotErrors(logging.Filter):
    """Kopf logs any handler's AdmissionError as an ERROR, "Webhook 'fgpu-request' failed permanently: ...",
    though for an admission webhook a denial is the answer working, not a fault (a misspelt pod would page
    whoever watches the operator's errors). fgpu's webhooks log their denials at INFO themselves (`_deny`),
    so Kopf's line for them is dropped; every other ERROR passes."""

    _PREFIXES = tuple(f"Webhook {hid!r} failed permanently: " for hid in WEBHOOK_IDS)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR or not record.getMessage().startswith(self._PREFIXES)


_FILTER = DenialsAreNotErrors()
logging.getLogger("kopf.objects").addFilter(_FILTER)  # Kopf's per-object logger (handlers' outcomes)


def _deny(message: str, code: int, body: kopf.Body, operation: str) -> kopf.AdmissionError:
    meta = body.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "?"
    log.info("denied %s of pod %s/%s (%d): %s", operation, meta.get("namespace") or "", name, code, message)
    return kopf.AdmissionError(message, code=code)


#: Users allowed to write the hand-off annotations on an existing pod: the operator's and the device
#: plugin's service accounts (the admission defaults), and whoever `command.run` adds from `--trusted-user`.
TRUSTED_USERS: set[str] = set(AdmissionConfig().trusted_users)


def _touched(before: dict, after: dict, patch: kopf.Patch) -> None:
    """Copy into Kopf's patch the parts of the pod the mutation changed (fields it may change only)."""
    b_spec, a_spec = before.get("spec") or {}, after.get("spec") or {}
    for key in ("schedulerName", "containers", "initContainers", "resourceClaims"):
        if a_spec.get(key) != b_spec.get(key):
            patch.spec[key] = a_spec.get(key)
    b_ann = (before.get("metadata") or {}).get("annotations") or {}
    a_ann = (after.get("metadata") or {}).get("annotations") or {}
    for key in set(b_ann) | set(a_ann):
        if b_ann.get(key) != a_ann.get(key):
            patch.metadata.setdefault("annotations", {})[key] = a_ann.get(key)  # None removes it


def _count(memo: kopf.Memo | None, webhook: str, outcome: str, source: str = "") -> None:
    metrics = getattr(memo, "metrics", None)  # set at start-up (the webhook may answer before)
    if metrics is not None:
        metrics.admission(webhook, outcome, source)


def cluster_config(config: AdmissionConfig, largest_gpu_mib: int, sizes_mib: frozenset[int] = frozenset()
                   ) -> AdmissionConfig:
    """`config` with the cluster's largest GPU (from the scheduler's model) where no setting gave one, so a
    per-device memory request above it is refused and memory-only shares are sized against it; with DRA on, the
    memory all its GPUs share (a fraction of a GPU's memory is then an amount a claim can ask)."""
    update: dict = {}
    if config.max_gpu_memory_bytes is None and largest_gpu_mib > 0:
        update["max_gpu_memory_bytes"] = largest_gpu_mib << 20
    if config.dra_allocator is not None and config.dra_gpu_memory_bytes is None and len(sizes_mib) == 1:
        update["dra_gpu_memory_bytes"] = next(iter(sizes_mib)) << 20
    return config.model_copy(update=update) if update else config


def normalise_pod(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_) -> dict | None:
    """Parse any accepted spelling into `fgpu.io/request`, route the pod to fgpu's scheduler, make its
    resources what a real kubelet will admit; deny a bad request with one line. With DRA on, the
    ResourceClaimTemplate the pod now names is returned, for the caller to write before the pod is admitted."""
    pod = copy.deepcopy(dict(body))
    scheduler = getattr(memo, "scheduler", None)  # set at start-up; absent while the model is being listed
    base = getattr(memo, "admission", None) or AdmissionConfig()  # the cluster's SchedulingPolicy shapes it
    config = cluster_config(base, scheduler.live.largest_gpu_mib() if scheduler is not None else 0,
                            scheduler.live.gpu_memory_sizes_mib() if scheduler is not None else frozenset())
    try:
        request = parse_pod(pod, config)
        if request is None:
            _count(memo, "mutate", "passed")
            return None
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        ops, template = admit(pod, request, namespace, config)
    except HandoffError as err:  # an allocation written by hand: forbidden, as the pure `review` answers
        _count(memo, "mutate", "denied")
        raise _deny(str(err), 403, body, "CREATE") from None
    except InputError as err:
        _count(memo, "mutate", "denied")
        raise _deny(str(err), 400, body, "CREATE") from None
    _count(memo, "mutate", "mutated" if ops else "allowed", request.source)
    _touched(dict(body), jsonpatch.apply_patch(pod, ops, in_place=True), patch)  # `pod` is our own copy
    return template


#: ResourceClaimTemplates written (or found) by this process: named by their content, so never changed after.
_WRITTEN: set[tuple[str, str]] = set()


async def write_template(api, template: dict, body: kopf.Body) -> None:
    """The claim template a rewritten pod names, created before the pod is admitted (AlreadyExists: another
    pod asked alike first). A template deleted later is written again by the next pod once this process
    restarts; until then the controller-manager reports the missing template on the pod."""
    meta = template["metadata"]
    key = (meta["namespace"], meta["name"])
    if key in _WRITTEN:
        return
    out = await api.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{key[0]}/resourceclaimtemplates",
                            body=template)
    if not out.ok and out.result is not Result.CONFLICT:
        raise _deny(f"ResourceClaimTemplate {key[0]}/{key[1]} for the pod's GPU claim could not be written ({out})",
                    500, body, "CREATE")
    _WRITTEN.add(key)


def protect_handoff(body: kopf.Body, old: kopf.BodyEssence | None, userinfo: dict, memo: kopf.Memo | None = None,
                    **_) -> None:
    """No pod can change its own allocation: only fgpu's components may edit the hand-off annotations."""
    if (userinfo or {}).get("username") in TRUSTED_USERS:
        _count(memo, "validate", "allowed")
        return
    before = ((old or {}).get("metadata") or {}).get("annotations") or {}
    after = (body.get("metadata") or {}).get("annotations") or {}
    changed = sorted(k for k in keys.HANDOFF_KEYS if before.get(k) != after.get(k))
    _count(memo, "validate", "denied" if changed else "allowed")
    if changed:
        raise _deny(f"metadata.annotations[{changed[0]}]: set by fgpu's scheduler and device plugin only; a pod "
                    "cannot change its own GPU allocation", 403, body, "UPDATE")


# Kopf runs a plain function in its thread pool: a hand-off to a thread and back for every admission call, for work
# that is brief and CPU-bound anyway. Registered as coroutines, the two run on the operator's loop.
@kopf.on.mutate("", "v1", "pods", id=MUTATE_ID, operations=["CREATE"], side_effects=True)
async def _normalise_on_loop(dryrun: bool = False, **kwargs) -> None:
    template = normalise_pod(**kwargs)
    if template is not None and not dryrun:  # sideEffects NoneOnDryRun: a dry run writes nothing
        await write_template(kwargs["memo"].api, template, kwargs["body"])


@kopf.on.validate("", "v1", "pods", id=VALIDATE_ID, operations=["UPDATE"], side_effects=False)
async def _protect_on_loop(**kwargs) -> None:
    protect_handoff(**kwargs)
