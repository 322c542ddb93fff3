"""A denied admission review is the webhook working, not a fault: through Kopf's own admission path it is
answered 400 with the one-line reason and logged once at INFO by fgpu.webhook, with no Kopf ERROR
"failed permanently" line; any other ERROR of Kopf's object logger still gets through."""
import asyncio
import logging

import kopf
from fgpu_operator.controller import webhook
from kopf._cogs.structs import references
from kopf._core.engines.admission import serve_admission_request


class _Memories:
    async def recall_memo(self, raw_body, *, memobase=None, ephemeral=False):
        return kopf.Memo()


def _review(pod: dict, operation: str, hook: str, old: dict | None = None) -> dict:
    insights = references.Insights()
    insights.webhook_resources.add(references.Resource(group="", version="v1", plural="pods", kind="Pod",
                                                       singular="pod", namespaced=True, verbs=["create"]))
    request = {"uid": "u1", "operation": operation, "resource": {"group": "", "version": "v1", "resource": "pods"},
               "userInfo": {"username": "alice"}, "object": pod}
    if old is not None:
        request["oldObject"] = old
    return asyncio.run(serve_admission_request(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}, webhook=hook,
        settings=kopf.OperatorSettings(), memories=_Memories(), memobase=kopf.Memo(),
        registry=kopf.get_default_registry(), insights=insights, indices={}))["response"]


def _pod(annotations: dict) -> dict:
    return {"metadata": {"name": "p", "namespace": "team", "annotations": annotations},
            "spec": {"containers": [{"name": "main"}]}}


def test_a_denial_is_one_info_line_and_no_error(caplog):
    caplog.set_level(logging.INFO)
    answer = _review(_pod({"fgpu.io/gpu-memroy": "8Gi"}), "CREATE", webhook.MUTATE_ID)
    assert not answer["allowed"] and answer["status"]["code"] == 400
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    [line] = [r for r in caplog.records if r.name == "fgpu.webhook"]
    assert line.levelno == logging.INFO
    assert line.getMessage() == ("denied CREATE of pod team/p (400): metadata.annotations[fgpu.io/gpu-memroy]: "
                                 "unknown annotation fgpu.io/gpu-memroy; did you mean fgpu.io/gpu-memory?")


def test_a_forbidden_handoff_edit_is_info_too(caplog):
    caplog.set_level(logging.INFO)
    answer = _review(_pod({"fgpu.io/assignment": "{}"}), "UPDATE", webhook.VALIDATE_ID, old=_pod({}))
    assert not answer["allowed"] and answer["status"]["code"] == 403
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.levelno for r in caplog.records if r.name == "fgpu.webhook"] == [logging.INFO]


def test_other_errors_of_kopfs_object_logger_still_pass(caplog):
    caplog.set_level(logging.INFO)
    logging.getLogger("kopf.objects").error("Handler 'something-else' failed permanently: boom")
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "Handler 'something-else' failed permanently: boom"]
