"""The kubelet plugin over its unix sockets, driven by a stub kubelet: registration, Prepare writing a CDI
spec whose env and signed token carry the claim's memory and SM share, over-commitment refused, Prepare
idempotent across retries and driver restarts (the checkpoint), Unprepare releasing, forged claims refused."""
from __future__ import annotations

import json
import os

import pytest
from dra_support import NODE, SECRET, StubKubelet, allocated_claim, node_config

from deviceplugin.allocate import AllocContext
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.plugin import DriverState, KubeletPlugin
from deviceplugin.dra.state import CHECKPOINT_NAME, Checkpoint, cdi_spec_path
from simgpu import env
from simgpu.token import verify_token

GIB = 1 << 30


class Claims:
    """ClaimSource stub: the claims 'in the API', and how often each was read."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.reads = 0
        self.down = False

    def add(self, claim: dict) -> tuple[str, str, str]:
        meta = claim["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = claim
        return meta["namespace"], meta["name"], meta["uid"]

    def __call__(self, namespace: str, name: str) -> dict:
        self.reads += 1
        if self.down:
            raise ConnectionError("apiserver unreachable")
        return self.objects[(namespace, name)]


@pytest.fixture
def claims():
    return Claims()


@pytest.fixture
def driver(short_dir, claims):
    started = []

    def start() -> tuple[KubeletPlugin, StubKubelet]:
        state = DriverState(NODE, node_devices(node_config(), NODE),
                            AllocContext(node_name=NODE, secret=SECRET, daemon_socket=f"{short_dir}/run/d.sock"),
                            Checkpoint(os.path.join(short_dir, CHECKPOINT_NAME)), f"{short_dir}/cdi", claims)
        plugin = KubeletPlugin(state, f"{short_dir}/reg", f"{short_dir}/plugins", poll_s=0.05)
        plugin.start()
        kubelet = StubKubelet(plugin.registration_socket)
        kubelet.register()
        started.append((plugin, kubelet))
        return plugin, kubelet

    yield start, short_dir
    for plugin, kubelet in started:
        kubelet.close()
        plugin.stop()


def _share(name: str, uid: str, memory: str, sm: str, device: str = "gpu-0-shared") -> dict:
    return allocated_claim(name, uid, [{"device": device, "shareID": f"share-{uid}",
                                        "consumedCapacity": {"gpu.fgpu.io/memory": memory, "gpu.fgpu.io/smShare": sm}}])


def _cdi_env(short_dir: str, uid: str) -> dict[str, str]:
    with open(cdi_spec_path(f"{short_dir}/cdi", uid)) as fh:
        spec = json.load(fh)
    assert spec["kind"] == "fgpu.io/gpu" and len(spec["devices"]) == 1
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def test_registration_names_the_dra_service(driver):
    start, short_dir = driver
    plugin, _ = start()
    kubelet = StubKubelet(plugin.registration_socket)
    info = kubelet.register()
    kubelet.close()
    assert info.type == "DRAPlugin" and info.name == "gpu.fgpu.io"
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    assert info.endpoint == f"{short_dir}/plugins/gpu.fgpu.io/dra.sock" and os.path.exists(info.endpoint)
    assert plugin.registration.registered.is_set()


def test_share_claim_gets_its_memory_and_sm_share_through_cdi(driver, claims):
    start, short_dir = driver
    _, kubelet = start()
    ref = claims.add(_share("c1", "uid-1", "8Gi", "30"))
    resp = kubelet.prepare(ref).claims["uid-1"]
    assert resp.error == ""
    [device] = resp.devices
    assert (device.pool_name, device.device_name, list(device.request_names)) == (NODE, "gpu-0-shared", ["gpu"])
    assert device.share_id == "share-uid-1"
    assert list(device.cdi_device_ids) == ["fgpu.io/gpu=uid-1-gpu"]
    envs = _cdi_env(short_dir, "uid-1")
    gpu0 = node_devices(node_config(), NODE).by_name["gpu-0"].uuid
    assert envs[env.NVIDIA_VISIBLE_DEVICES] == gpu0
    assert env.parse_memory_limit(envs[env.memory_limit_var(0)]) == 8 * GIB
    assert envs[env.CUDA_DEVICE_SM_LIMIT] == "30"
    assert envs[env.DAEMON_SOCKET] == f"{env.CONTAINER_SOCKET_DIR}/d.sock"
    grant = verify_token(SECRET, envs[env.CONTEXT_TOKEN])
    assert (grant.device_uuid, grant.mem_limit_bytes, grant.sm_limit_pct) == (gpu0, 8 * GIB, 30)
    assert (grant.pod_namespace, grant.pod_name) == ("default", "p1")


def test_shares_fill_a_gpu_and_overcommit_is_refused(driver, claims):
    start, _ = start_and_dir = driver
    _, kubelet = start()
    a = claims.add(_share("a", "uid-a", "8Gi", "30"))
    b = claims.add(_share("b", "uid-b", "8Gi", "30"))
    c = claims.add(_share("c", "uid-c", "8Gi", "50"))
    out = kubelet.prepare(a, b, c).claims
    assert out["uid-a"].error == out["uid-b"].error == ""
    assert "110% of its SMs" in out["uid-c"].error
    big = claims.add(_share("big", "uid-big", "70Gi", "10"))
    assert "bytes of its" in kubelet.prepare(big).claims["uid-big"].error
    # a whole GPU, or a MIG instance, over the GPU that holds shares: the same silicon twice
    whole = claims.add(allocated_claim("w", "uid-w", [{"device": "gpu-0"}]))
    assert "gpu-0-shared" in kubelet.prepare(whole).claims["uid-w"].error
    small = claims.add(allocated_claim("m", "uid-m", [{"device": "gpu-0-mig-1g-10gb-0"}]))
    assert "overlaps" in kubelet.prepare(small).claims["uid-m"].error
    # the other GPU is free
    other = claims.add(allocated_claim("w2", "uid-w2", [{"device": "gpu-1"}]))
    assert kubelet.prepare(other).claims["uid-w2"].error == ""
    # a refused claim left nothing behind, and releasing a share makes room
    assert not os.path.exists(cdi_spec_path(f"{start_and_dir[1]}/cdi", "uid-c"))
    assert kubelet.unprepare(a).claims["uid-a"].error == ""
    assert kubelet.prepare(c).claims["uid-c"].error == ""


def test_mig_claims(driver, claims):
    start, short_dir = driver
    _, kubelet = start()
    devs = node_devices(node_config(), NODE)
    h100 = next(d for d in devs.devices if d.gpu.index == 3 and d.profile == "4g.40gb")
    real = claims.add(allocated_claim("r", "uid-r", [{"device": h100.name}]))
    assert kubelet.prepare(real).claims["uid-r"].error == ""
    envs = _cdi_env(short_dir, "uid-r")
    assert envs[env.NVIDIA_VISIBLE_DEVICES] == h100.uuid  # the configured instance itself
    assert verify_token(SECRET, envs[env.CONTEXT_TOKEN]).mem_limit_bytes is None
    # on a fractional GPU a MIG placement is a hard share of the GPU, sized like the profile
    emu = devs.by_name["gpu-1-mig-3g-40gb-4"]
    a = claims.add(allocated_claim("e", "uid-e", [{"device": emu.name}]))
    assert kubelet.prepare(a).claims["uid-e"].error == ""
    grant = verify_token(SECRET, _cdi_env(short_dir, "uid-e")[env.CONTEXT_TOKEN])
    assert (grant.device_uuid, grant.mem_limit_bytes, grant.sm_limit_pct) == (emu.gpu.uuid, emu.mem_bytes, emu.sm_pct)
    beside = claims.add(allocated_claim("e2", "uid-e2", [{"device": "gpu-1-mig-4g-40gb-0"}]))
    assert kubelet.prepare(beside).claims["uid-e2"].error == ""  # 4g + 3g fit side by side
    overlap = claims.add(allocated_claim("e3", "uid-e3", [{"device": "gpu-1-mig-1g-10gb-4"}]))
    assert "overlaps" in kubelet.prepare(overlap).claims["uid-e3"].error


def test_prepare_is_idempotent_across_retries_and_restarts(driver, claims):
    start, short_dir = driver
    plugin, kubelet = start()
    ref = claims.add(_share("c1", "uid-1", "8Gi", "30"))
    first = kubelet.prepare(ref).claims["uid-1"]
    reads = claims.reads
    assert kubelet.prepare(ref).claims["uid-1"] == first
    assert claims.reads == reads  # answered from the checkpoint
    kubelet.close()
    plugin.stop()
    claims.down = True  # a restarted driver answers a prepared claim without the API
    _, kubelet2 = start()
    assert kubelet2.prepare(ref).claims["uid-1"] == first
    # its share still counts against the next claim
    claims.down = False
    more = claims.add(_share("c2", "uid-2", "8Gi", "80"))
    assert "110%" in kubelet2.prepare(more).claims["uid-2"].error
    # a CDI spec lost (a node's /var/run wiped) is written again, with the same content
    path = cdi_spec_path(f"{short_dir}/cdi", "uid-1")
    with open(path) as fh:
        before = fh.read()
    os.unlink(path)
    assert kubelet2.prepare(ref).claims["uid-1"] == first
    with open(path) as fh:
        assert fh.read() == before


def test_unprepare_releases_and_is_idempotent(driver, claims):
    start, short_dir = driver
    _, kubelet = start()
    ref = claims.add(_share("c1", "uid-1", "8Gi", "30"))
    kubelet.prepare(ref)
    assert kubelet.unprepare(ref).claims["uid-1"].error == ""
    assert not os.path.exists(cdi_spec_path(f"{short_dir}/cdi", "uid-1"))
    assert Checkpoint(os.path.join(short_dir, CHECKPOINT_NAME)).claims == {}
    assert kubelet.unprepare(ref).claims["uid-1"].error == ""
    assert kubelet.unprepare(("default", "never", "uid-never")).claims["uid-never"].error == ""


@pytest.mark.parametrize(("mutate", "expect"), [
    (lambda c: c["metadata"].update(uid="someone-else"), "deleted and created again"),
    (lambda c: c["status"].pop("allocation"), "is not allocated"),
    (lambda c: c["status"].update(reservedFor=[]), "reserved for no pod"),
    (lambda c: c["status"]["allocation"]["devices"]["results"][0].update(pool="other-node"), "this is node"),
    (lambda c: c["status"]["allocation"]["devices"]["results"][0].update(device="gpu-9"), "has no device 'gpu-9'"),
    (lambda c: c["status"]["allocation"]["devices"]["results"][0].pop("shareID"), "without a shareID"),
    (lambda c: c["status"]["allocation"]["devices"]["results"][0].update(driver="other.example.com"),
     "no device of driver"),
    # a status edited after allocation: more memory or SMs than the claim's request asks, or none named
    (lambda c: c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"].update(
        {"gpu.fgpu.io/memory": "40Gi"}), "more than its request 'gpu' asks (8589934592)"),
    (lambda c: c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"].update(
        {"gpu.fgpu.io/smShare": "90"}), "more than its request 'gpu' asks (30)"),
    (lambda c: c["status"]["allocation"]["devices"]["results"][0].pop("consumedCapacity"),
     "without consumedCapacity"),
])
def test_claims_that_are_not_what_the_kubelet_names_get_nothing(driver, claims, mutate, expect):
    start, short_dir = driver
    _, kubelet = start()
    claim = _share("c1", "uid-1", "8Gi", "30")
    mutate(claim)
    claims.objects[("default", "c1")] = claim
    resp = kubelet.prepare(("default", "c1", "uid-1")).claims["uid-1"]
    assert expect in resp.error and not resp.devices
    assert not os.path.exists(cdi_spec_path(f"{short_dir}/cdi", "uid-1"))


def test_api_unreachable_is_an_error_the_kubelet_retries(driver, claims):
    start, _ = driver
    _, kubelet = start()
    ref = claims.add(_share("c1", "uid-1", "8Gi", "30"))
    claims.down = True
    assert "apiserver unreachable" in kubelet.prepare(ref).claims["uid-1"].error
    claims.down = False
    assert kubelet.prepare(ref).claims["uid-1"].error == ""


def test_registration_socket_removed_is_served_again(driver):
    import time

    start, _ = driver
    plugin, _ = start()
    os.unlink(plugin.registration_socket)
    deadline = time.monotonic() + 5
    while not os.path.exists(plugin.registration_socket) and time.monotonic() < deadline:
        time.sleep(0.05)
    kubelet = StubKubelet(plugin.registration_socket)
    assert kubelet.register().name == "gpu.fgpu.io"
    kubelet.close()


def _with_config(claim: dict, *entries: dict) -> dict:
    claim["status"]["allocation"]["devices"]["config"] = list(entries)
    return claim


def _ours(params: dict, source: str = "FromClaim", requests: list[str] | None = None) -> dict:
    entry = {"source": source, "opaque": {"driver": "gpu.fgpu.io",
                                          "parameters": {"apiVersion": "gpu.fgpu.io/v1", "kind": "GpuConfig",
                                                         **params}}}
    return {**entry, **({"requests": requests} if requests else {})}


def test_opaque_config_sets_priority_and_slowdown_bound(driver, claims):
    start, short_dir = driver
    _, kubelet = start()
    plain = claims.add(_share("d", "uid-d", "8Gi", "10"))
    low = claims.add(_with_config(_share("l", "uid-l", "8Gi", "10"), _ours({"priority": "high"}, "FromClass"),
                                  _ours({"priority": "low"}, requests=["gpu"])))
    bound = claims.add(_with_config(_share("b", "uid-b", "8Gi", "10"), _ours({"sloSlowdown": 1.5}),
                                    {"source": "FromClaim", "opaque": {"driver": "other.example.com",
                                                                       "parameters": {"anything": 1}}}))
    out = kubelet.prepare(plain, low, bound).claims
    assert all(out[u].error == "" for u in ("uid-d", "uid-l", "uid-b"))

    def grant(uid):
        return verify_token(SECRET, _cdi_env(short_dir, uid)[env.CONTEXT_TOKEN])

    assert (grant("uid-d").priority, grant("uid-d").slo_slowdown) == (0, None)  # high, the node's bound
    assert _cdi_env(short_dir, "uid-d")[env.CUDA_TASK_PRIORITY] == "0"
    assert (grant("uid-l").priority, grant("uid-l").slo_slowdown) == (1, None)  # the claim's entry wins
    assert _cdi_env(short_dir, "uid-l")[env.CUDA_TASK_PRIORITY] == "1"
    assert (grant("uid-b").priority, grant("uid-b").slo_slowdown) == (0, 1.5)


@pytest.mark.parametrize(("params", "expect"), [
    ({"priority": "urgent"}, "priority 'urgent'"),
    ({"sloSlowdown": 1.0}, "sloSlowdown 1.0"),
    ({"colour": "red"}, "unknown key 'colour'"),
])
def test_bad_opaque_config_gets_nothing(driver, claims, params, expect):
    start, short_dir = driver
    _, kubelet = start()
    ref = claims.add(_with_config(_share("c", "uid-c", "8Gi", "10"), _ours(params)))
    resp = kubelet.prepare(ref).claims["uid-c"]
    assert expect in resp.error and "config[0].opaque.parameters" in resp.error and not resp.devices
    assert not os.path.exists(cdi_spec_path(f"{short_dir}/cdi", "uid-c"))


def test_a_share_id_handed_out_twice_is_refused(driver, claims):
    """Two claims naming one share of a device (a status copied from another claim): the second gets nothing."""
    start, short_dir = driver
    _, kubelet = start()
    first = claims.add(_share("c1", "uid-1", "8Gi", "30"))
    copied = _share("c2", "uid-2", "8Gi", "30")
    copied["status"]["allocation"]["devices"]["results"][0]["shareID"] = "share-uid-1"
    second = claims.add(copied)
    assert kubelet.prepare(first).claims["uid-1"].error == ""
    resp = kubelet.prepare(second).claims["uid-2"]
    assert "share share-uid-1 is handed out twice" in resp.error and not resp.devices
    assert not os.path.exists(cdi_spec_path(f"{short_dir}/cdi", "uid-2"))


def test_a_restarted_driver_forgets_claims_that_no_longer_exist(driver, claims):
    """A node torn down without NodeUnprepareResources (found on the real node: the drain deleted the driver's
    pod with the others) leaves checkpoint entries whose claims are gone; the next driver drops them, and only
    them, before the kubelet can ask, so their shares do not hold the GPU forever."""
    start, short_dir = driver
    plugin, kubelet = start()
    kept = claims.add(_share("kept", "uid-kept", "8Gi", "30"))
    deleted = claims.add(_share("deleted", "uid-deleted", "8Gi", "30"))
    remade = claims.add(_share("remade", "uid-remade", "8Gi", "30"))
    for ref in (kept, deleted, remade):
        assert kubelet.prepare(ref).claims[ref[2]].error == ""
    kubelet.close()
    plugin.stop()
    del claims.objects[("default", "deleted")]
    claims.add(_share("remade", "uid-remade-2", "8Gi", "30"))  # deleted and created again: another claim
    plugin, _ = start()
    assert plugin.dra.state.forget_gone_claims() == ["default/deleted", "default/remade"]
    assert set(plugin.dra.state.checkpoint.claims) == {"uid-kept"}
    assert not os.path.exists(cdi_spec_path(f"{short_dir}/cdi", "uid-deleted"))
    assert os.path.exists(cdi_spec_path(f"{short_dir}/cdi", "uid-kept"))
    assert Checkpoint(os.path.join(short_dir, CHECKPOINT_NAME)).claims.keys() == {"uid-kept"}
    claims.down = True  # the API unreachable: nothing is dropped on a guess
    assert plugin.dra.state.forget_gone_claims() == []
    assert set(plugin.dra.state.checkpoint.claims) == {"uid-kept"}
