"""Who may write the hand-off annotations. The device plugin hands a GPU share to whichever pod on its node
carries an assignment for it, so a pod that wrote its own `fgpu.io/assignment` could take a share nobody
gave it. Users therefore never set or change them: on CREATE they are refused from anyone (fgpu's own
components never create pods; the scheduler writes the assignment on the Binding), on UPDATE from anyone
but fgpu's scheduler and device plugin (`AdmissionConfig.trusted_users`). `fgpu.io/request` is a request,
not an allocation: on CREATE it is read as a spelling (forms.canonical); on UPDATE it is frozen like the
rest, since the scheduler places what it says.
"""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

from .config import AdmissionConfig
from .podview import PodView, annotation_field

ALLOCATION_KEYS = tuple(k for k in keys.HANDOFF_KEYS if k != keys.REQUEST)


class HandoffError(InputError):
    """A hand-off annotation set or changed by someone who may not (answered 403, not 400)."""


def check_create(view: PodView) -> None:
    for key in ALLOCATION_KEYS:
        if key in view.annotations:
            raise HandoffError("is written by fgpu's scheduler and device plugin only; remove it (a manifest "
                               "copied from a running pod carries it)", field=annotation_field(key),
                               allowed=["no fgpu.io/assignment, assigned-at, allocated or assignment-signature on a new pod"])


def check_update(old: PodView, new: PodView, username: str, config: AdmissionConfig) -> None:
    if username in config.trusted_users:
        return
    for key in keys.HANDOFF_KEYS:
        if old.annotations.get(key) != new.annotations.get(key):
            raise HandoffError(f"cannot be changed by {username or 'an unnamed user'}: no pod can change its "
                               "own GPU request or allocation", field=annotation_field(key),
                               allowed=config.trusted_users)
