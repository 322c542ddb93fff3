"""What the webhook admits, the scheduler can place: pods drawn across every spelling fgpu reads (fgpu's
annotations, HAMi's resources and annotations, KAI's, KubeShare's labels, Aliyun's, NVIDIA's whole GPUs and
MIG resources, several containers, mixed) are put through admission; for each one admitted, a node is built
from simgpu's catalog as big as the request could want (8 GPUs or as many as it asks, of the allowed model
with the most memory, the UUIDs and MIG profile it names) and the scheduler's core must place it there under
its node policy, giving a valid hand-off with every device asked for.

The node is built from the catalog and the request's own words, not from admission's checks, so a shape the
webhook lets through and no catalogued node could take fails here."""
from __future__ import annotations

from admission_util import CONFIG, apply_patch
from fgpu_operator.admission import AdmissionConfig, classify_pod, mutate
from fgpu_operator.admission.gpus import mig_profiles
from fgpu_operator.controller.translate import assignment_for, core_request
from fgpu_operator.placement.live import Allocation, LiveCluster
from fgpu_operator.placement.model import GpuInfo, MigSlot, NodeSpec
from fgpu_operator.placement.models import ModelFilter, admits_all
from fgpu_operator.placement.policies import LIVE_POLICIES
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fgpu_contracts import keys
from fgpu_contracts.assignment import dump_assignment, parse_assignment
from fgpu_contracts.errors import InputError
from fgpu_contracts.request import GpuRequest, dump_request
from simgpu import mig
from simgpu.catalog import all_gpus, short_names

MIB = 1 << 20
SPLIT = 10  # fractional slots a node advertises per GPU (the node config's default splitCount)

fractions = st.sampled_from(["0.001", "0.1", "0.25", "0.333", "0.5", "0.75", "1", "2", "3", "8"])
counts = st.sampled_from(["0", "1", "2", "3", "4", "8", "16", "64"])
quantities = st.sampled_from(["1", "512Mi", "1Gi", "8Gi", "15000Mi", "16Gi", "40Gi", "80Gi", "100Gi", "140Gi",
                              "200Gi"])
mib = st.sampled_from(["0", "1", "1000", "8192", "15000", "23000", "40000", "81920", "100000", "143000", "200000"])
percent = st.sampled_from(["0", "1", "10", "50", "99", "100"])
models = st.lists(st.sampled_from([*short_names(), "A100", "H100-SXM5-80GB"]), min_size=1, max_size=2).map(",".join)
uuids = st.sampled_from(["GPU-a", "GPU-a,GPU-b", "GPU-b,GPU-c", "GPU-a,GPU-b,GPU-c,GPU-d"])
profiles = st.sampled_from(mig_profiles())
policies = st.sampled_from(LIVE_POLICIES)
groups = st.sampled_from(["team-a", "team-b"])


def maybe(draw, strategy, p: float = 0.3):
    return draw(strategy) if draw(st.integers(0, 99)) < p * 100 else None


@st.composite
def hami_resources(draw) -> dict:
    out = {}
    for key, values in ((keys.GPU_RESOURCE, counts), (keys.GPU_MEMORY_RESOURCE, mib),
                        (keys.GPU_MEMORY_PCT_RESOURCE, percent), (keys.GPU_CORES_RESOURCE, percent),
                        (keys.GPU_PRIORITY_RESOURCE, st.sampled_from(["0", "1"]))):
        if (value := maybe(draw, values, 0.5)) is not None:
            out[key] = value
    return out


@st.composite
def container_resources(draw) -> dict:
    kind = draw(st.sampled_from(["hami", "hami", "whole", "mig", "aliyun", "none"]))
    if kind == "hami":
        return draw(hami_resources())
    if kind == "whole":
        return {keys.GPU_RESOURCE: draw(counts)}
    if kind == "mig":
        return {keys.mig_resource_name(draw(profiles)): draw(counts)}
    if kind == "aliyun":
        return {keys.ALIYUN_MEMORY: draw(st.sampled_from(["1", "8", "16", "80", "141", "200"]))}
    return {}


@st.composite
def fgpu_annotations(draw) -> dict:
    out = {}
    for key, values in ((keys.FGPU_FRACTION, fractions), (keys.FGPU_COUNT, counts), (keys.FGPU_MEMORY, quantities),
                        (keys.FGPU_SM, st.sampled_from(["10", "50", "100"])), (keys.FGPU_MIG_PROFILE, profiles),
                        (keys.FGPU_MODEL, models), (keys.FGPU_PRIORITY, st.sampled_from(["high", "low"])),
                        (keys.FGPU_POLICY, policies), (keys.FGPU_AFFINITY, groups), (keys.FGPU_ANTI_AFFINITY, groups),
                        (keys.FGPU_EXCLUSION, groups), (keys.FGPU_SLO_SLOWDOWN, st.sampled_from(["1.2", "3"]))):
        if (value := maybe(draw, values, 0.4 if key in (keys.FGPU_FRACTION, keys.FGPU_COUNT) else 0.15)) is not None:
            out[key] = value
    return out


@st.composite
def kai_annotations(draw) -> dict:
    out = {keys.KAI_FRACTION: draw(fractions)} if draw(st.booleans()) else {
        keys.KAI_MEMORY: draw(st.sampled_from(["1000", "2000", "20000", "80000", "150000"]))}
    if (value := maybe(draw, counts, 0.5)) is not None:
        out[keys.KAI_NUM_DEVICES] = value
    return out


@st.composite
def hami_annotations(draw) -> dict:
    out = {}
    for key, values in ((keys.HAMI_USE_UUID, uuids), (keys.HAMI_NOUSE_UUID, uuids), (keys.HAMI_USE_TYPE, models),
                        (keys.HAMI_NOUSE_TYPE, models), (keys.HAMI_NODE_POLICY, st.sampled_from(["binpack", "spread"])),
                        (keys.HAMI_GPU_POLICY, st.sampled_from(["binpack", "spread"]))):
        if (value := maybe(draw, values, 0.15)) is not None:
            out[key] = value
    return out


@st.composite
def kubeshare_labels(draw) -> dict:
    request, limit = draw(st.sampled_from([("0.5", "0.5"), ("0.3", "0.8"), ("1", "1"), ("2", "2"), ("0.1", "1")]))
    out = {keys.KUBESHARE_REQUEST: request, keys.KUBESHARE_LIMIT: limit}
    for key, values in ((keys.KUBESHARE_MEMORY, st.sampled_from(["1073741824", "17179869184", "214748364800"])),
                        (keys.KUBESHARE_MODEL, models), (keys.KUBESHARE_AFFINITY, groups)):
        if (value := maybe(draw, values, 0.3)) is not None:
            out[key] = value
    return out


@st.composite
def gpu_pods(draw) -> dict:
    """A pod as a user of one peer (sometimes two) would write it, sometimes with an init container."""
    names = [f"c{i}" for i in range(draw(st.integers(1, 3)))]
    containers = [{"name": n, "image": "cuda"} for n in names]
    annotations, labels, scheduler = {}, {}, draw(st.sampled_from([None, keys.SCHEDULER_NAME, "hami-scheduler"]))
    for spelling in draw(st.lists(st.sampled_from(["resources", "fgpu", "kai", "kubeshare"]), min_size=1,
                                  max_size=2, unique=True)):
        if spelling == "resources":
            for c in containers:
                if limits := draw(container_resources()):
                    c["resources"] = {"limits": limits}
            annotations |= draw(hami_annotations())
        elif spelling == "fgpu":
            annotations |= draw(fgpu_annotations())
        elif spelling == "kai":
            annotations |= draw(kai_annotations())
            scheduler = "kai-scheduler"
        else:
            labels |= draw(kubeshare_labels())
            scheduler = "kubeshare-scheduler"
    spec = {"containers": containers} | ({"schedulerName": scheduler} if scheduler else {})
    if draw(st.integers(0, 4)) == 0:  # an init container, asking for GPUs of its own or not
        init = {"name": "warmup", "image": "cuda"}
        if limits := draw(container_resources()):
            init["resources"] = {"limits": limits}
        spec["initContainers"] = [init]
        if draw(st.booleans()):
            annotations[keys.FGPU_CONTAINER] = "warmup"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "annotations": annotations,
                         "labels": labels}, "spec": spec}


def names_unknown_model(request: GpuRequest) -> bool:
    """An allow-list entry that, by its spelling's rule, matches no catalogued GPU (KubeShare's `A100`: its
    rule wants a whole name)."""
    return any(not any(ModelFilter(f.rule, (token,)).admits(g.name) for g in all_gpus())
               for f in request.model_filters for token in f.allow)


def roomy_node(request: GpuRequest, pod: dict) -> NodeSpec:
    """The biggest node a cluster of catalogued GPUs could offer this request: fractional GPUs (or GPUs with
    an instance of the MIG profile) of the allowed model with the most memory, as many as asked and at least
    8, the allowed UUIDs first, and the device resources the mutated pod counts advertised."""
    shape = request.containers[0]
    mig_models = {g.name for g in mig.mig_gpus()}

    def takes(g) -> bool:
        if shape.mig_profile is None:
            return True
        return g.name in mig_models and shape.mig_profile in {p.name for p in mig.profiles(g)}

    filters = tuple(ModelFilter(f.rule, f.allow, f.deny) for f in request.model_filters)
    allowed = [g for g in all_gpus() if admits_all(filters, g.name) and takes(g)]
    memory = max((c.mem_bytes or 0) for c in request.containers)
    fitting = [g for g in allowed if g.mem_bytes >= memory]
    assert fitting, f"admitted, but no catalogued GPU model can hold it: {dump_request(request)}"
    spec = max(fitting, key=lambda g: g.mem_bytes)
    count = max(8, sum(c.count for c in request.containers))
    named = sorted(set(request.uuids) - set(request.exclude_uuids))
    gpus = []
    for i in range(count):
        uuid = named[i] if i < len(named) else f"GPU-roomy-{i}"
        if shape.mig_profile is None:
            gpus.append(GpuInfo(uuid, spec.name, spec.mem_bytes // MIB, spec.sms))
        else:
            inst = mig.instance_spec(spec, shape.mig_profile)
            slot = MigSlot(uuid, shape.mig_profile, inst.mem_bytes // MIB, inst.sms)
            gpus.append(GpuInfo(f"GPU-mig-{i}", spec.name, spec.mem_bytes // MIB, spec.sms, mig=(slot,)))
    resources: dict[str, int] = {}
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        for key in ((c.get("resources") or {}).get("limits") or {}):
            if key.startswith("nvidia.com/"):
                resources[key] = SPLIT * count
    return NodeSpec("roomy", 1_000_000, 1 << 30, count, spec.name, gpus=tuple(gpus),
                    extended=tuple(sorted(resources.items())), max_pods=110)


@settings(max_examples=600, deadline=None)
@given(gpu_pods(), st.sampled_from([AdmissionConfig(), CONFIG]), policies)
def test_every_admitted_request_is_placed_on_some_cluster(pod, config, policy):
    try:
        seen = classify_pod(pod, config)
    except InputError as err:
        assert "\n" not in str(err)
        event("refused")
        return
    if seen.request is None:
        event("not a GPU pod")
        return
    request = seen.request
    several = sum(c.count for c in request.containers) > 1
    event(f"admitted: {len(request.containers)} GPU container(s), {'several devices' if several else 'one device'}")
    mutated = apply_patch(pod, mutate(pod, request, config))
    core = core_request(mutated, request)  # a shape the core cannot take raises here
    if names_unknown_model(request):
        # admitted on purpose: a node with that GPU may join; until then it is Pending naming the model
        event("admitted, allow-list of a model the catalog does not know")
        return
    node = roomy_node(request, mutated)
    live = LiveCluster(policy)
    live.upsert_node(node)
    outcome = live.schedule("uid-p", core, request.node_policy)
    assert isinstance(outcome, Allocation), f"{dump_request(request)}: {outcome}"
    handoff = parse_assignment(dump_assignment(assignment_for(outcome, request,
                                                              {g.uuid: g.mem_mib for g in node.gpus})))
    assert [len(c.devices) for c in handoff.containers] == [c.count for c in request.containers]
    devices = [d.uuid for c in handoff.containers for d in c.devices]
    assert len(set(devices)) == len(devices)  # every device of the pod on its own GPU or MIG instance
