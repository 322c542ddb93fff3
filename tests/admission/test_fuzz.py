"""Random annotations, labels and resources (every key fgpu reads, with garbage, huge numbers, NaN, infinities
and unicode among the values): every review is an allow or a one-line 400/403 deny, never an exception, a
500 or a NaN; every patch applies cleanly, and the patched pod is a fixed point."""
from __future__ import annotations

import json
import math

from admission_util import CONFIG, apply_patch, envelope, patch_of
from fgpu_operator.admission import mutate, parse_pod, review
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fgpu_contracts import keys
from fgpu_contracts.request import load_request

REQUEST_JSON = '{"version":"v1","containers":[{"container":"main","milliGpu":300}]}'
#: Every key fgpu reads, with values that are valid for it (drawn often, so that many pods are admitted).
NOTES = {
    keys.FGPU_FRACTION: ["0.5", "0.25", "1", "2"], keys.FGPU_MEMORY: ["8Gi", "1000Mi", "3e9"],
    keys.FGPU_SM: ["30", "100"], keys.FGPU_MODEL: ["A100", "H100, T4"], keys.FGPU_PRIORITY: ["high", "low"],
    keys.FGPU_MIG_PROFILE: ["3g.40gb", "1g.10gb"], keys.FGPU_POLICY: ["fgd", "spread"],
    keys.FGPU_AFFINITY: ["team-a"], keys.FGPU_ANTI_AFFINITY: ["noisy"], keys.FGPU_EXCLUSION: ["t1"],
    keys.FGPU_SLO_SLOWDOWN: ["1.5"], keys.FGPU_CONTAINER: ["main", "side", "init"],
    keys.HAMI_USE_UUID: ["GPU-1,GPU-2"], keys.HAMI_NOUSE_UUID: ["GPU-3"], keys.HAMI_USE_TYPE: ["A100"],
    keys.HAMI_NOUSE_TYPE: ["T4"], keys.HAMI_VGPU_MODE: ["hami-core"], keys.HAMI_NODE_POLICY: ["binpack"],
    keys.HAMI_GPU_POLICY: ["spread"], keys.KAI_FRACTION: ["0.5"], keys.KAI_MEMORY: ["2000"],
    keys.KAI_CONTAINER: ["main"], keys.KAI_NUM_DEVICES: ["2"], keys.REQUEST: [REQUEST_JSON],
    keys.ASSIGNMENT: ["{}"], "unrelated/key": ["x"],
}
LABELS = {
    keys.KUBESHARE_REQUEST: ["0.5", "2"], keys.KUBESHARE_LIMIT: ["1.0", "2"], keys.KUBESHARE_MEMORY: ["1073741824"],
    keys.KUBESHARE_MODEL: ["A10"], keys.KUBESHARE_PRIORITY: ["0", "100", "-1"], keys.KUBESHARE_AFFINITY: ["red"],
    keys.KUBESHARE_EXCLUSION: ["blue"], "app": ["web"],
}
RESOURCES = {
    "cpu": ["1", "500m"], keys.GPU_RESOURCE: ["1", "2"], keys.GPU_MEMORY_RESOURCE: ["3000", "3k"],
    keys.GPU_MEMORY_PCT_RESOURCE: ["50", "100"], keys.GPU_CORES_RESOURCE: ["30", "100"],
    keys.GPU_PRIORITY_RESOURCE: ["0", "1"], keys.ALIYUN_MEMORY: ["3"], "nvidia.com/mig-1g.10gb": ["1", "2"],
    "nvidia.com/mig-3g.40gb": ["1"], "nvidia.com/mig-9g.99gb": ["1"], "nvidia.com/mig-1g.5gb.me": ["1"],
    "nvidia.com/gpu.shared": ["1"], keys.VOLCANO_VGPU_NUMBER: ["1"], keys.TENCENT_VCUDA_CORE: ["50"],
}
NAMES = ["main", "side", "init", "Ünï"]
SCHEDULERS = [None, "fgpu-scheduler", "default-scheduler", "hami-scheduler", "kai-scheduler", "volcano", "x" * 300]

numbers = st.one_of(
    st.integers(-5, 200).map(str),
    st.sampled_from(["0", "0.5", "1", "2", "0.0001", "1e-400", "1e400", "9" * 80, "NaN", "-inf", "Infinity",
                     "3k", "8Gi", "500m", "1.5", "+1", "1E", ".5", "5.", "1e", "٣", "0x10", "", " 1 "]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
words = st.sampled_from(["high", "low", "binpack", "spread", "fgd", "topology-aware", "hami-core", "mps", "mig",
                         "A100", "H100,T4", "RTX", "GPU-1,GPU-2", "3g.40gb", "main", "team-a", "{}",
                         '{"version":"v1","containers":[{"container":"main","milliGpu":300}]}'])
text = st.one_of(numbers, words, st.text(max_size=30))
raw_values = st.one_of(text, text, st.integers(-(10**30), 10**30), st.floats(), st.none(), st.booleans(),
                       st.lists(st.integers(), max_size=2))


def mapping(draw, table: dict[str, list[str]], max_size: int) -> dict:
    """A few of the table's keys, each with a value valid for it, or one time in eight anything at all.
    (Rare branches are the largest draw: hypothesis favours small ones.)"""
    chosen = draw(st.lists(st.sampled_from(sorted(table)), unique=True, max_size=max_size))
    return {k: draw(st.one_of(text, raw_values) if draw(st.integers(0, 7)) == 7 else st.sampled_from(table[k]))
            for k in chosen}


@st.composite
def pods(draw) -> object:
    if draw(st.integers(0, 40)) == 40:
        return draw(raw_values)  # not a pod at all
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    if draw(st.integers(0, 30)) == 30:
        names[0] = draw(st.sampled_from(["", names[-1]]))  # nameless, or a name used twice

    def container(name: str) -> dict:
        c: dict = {"name": name}
        for section in ("limits", "requests"):
            if draw(st.booleans()):
                c.setdefault("resources", {})[section] = mapping(draw, RESOURCES, 3)
        if draw(st.integers(0, 9)) == 9:
            c["securityContext"] = {"privileged": True}
        return c

    spec: dict = {"containers": [container(n) for n in names[:2]]}
    if len(names) > 2:
        spec["initContainers"] = [container(names[2])]
    if (scheduler := draw(st.sampled_from(SCHEDULERS))) is not None:
        spec["schedulerName"] = scheduler
    if draw(st.integers(0, 9)) == 9:
        spec["nodeName"] = "node-1"
    meta = {"name": "p", "annotations": mapping(draw, NOTES, 4), "labels": mapping(draw, LABELS, 3)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@settings(max_examples=2500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods(), st.sampled_from(["CREATE", "UPDATE"]), st.sampled_from([True, False]))
def test_every_input_gets_an_allow_or_a_one_line_deny(obj, operation, mutating):
    old = {"metadata": {"annotations": {}}, "spec": {"containers": [{"name": "main"}]}}
    out = review(envelope(obj, operation, old=old), CONFIG, mutating=mutating)
    json.dumps(out, allow_nan=False)  # no NaN or infinity anywhere
    r = out["response"]
    assert r["uid"] == "7d1c-uid" and isinstance(r["allowed"], bool)
    event("allowed with a patch" if "patch" in r else "allowed untouched" if r["allowed"] else
          f"denied {r['status']['code']}")
    if not r["allowed"]:
        status = r["status"]
        assert status["code"] in (400, 403), status  # 500 would be a bug in fgpu
        message = status["message"]
        assert message and message == " ".join(message.splitlines()) and "\r" not in message
        return
    if operation != "CREATE" or not mutating:
        assert "patch" not in r
        return
    request = parse_pod(obj, CONFIG)
    if request is None:
        assert "patch" not in r
        return
    for c in request.containers:
        assert c.mem_bytes is None or math.isfinite(c.mem_bytes)
    patched = apply_patch(obj, patch_of(out))
    assert load_request(patched["metadata"]["annotations"][keys.REQUEST]) == request
    assert parse_pod(patched, CONFIG) == request
    assert mutate(patched, request, CONFIG) == []
