#!/usr/bin/env bash
# Prepare this machine for the real-kubelet e2e test (tests/e2e/test_real_kubelet.py): idempotent, and
# a second run with nothing to do takes well under a second. `make test` runs it before pytest.
#
#   packages: Debian's runc, containernetworking-plugins, iptables, conntrack (apt-get; skipped when installed);
#             containerd itself is 2.x from hack/testbin.sh (Kubernetes >= 1.36 needs it; Debian's is 1.6)
#   node dir: ${FGPU_CACHE:-$HOME/.cache/fgpu}/node/   (nothing is written inside the repository)
#       containerd.toml        the CRI settings this machine needs (config version 3, see below); root/state/
#                              socket are given on containerd's command line by whoever runs it (a test, devcluster)
#       net.d/                 the CNI config: one bridge network (host-local IPs)
#       fgpu-probe             hack/node-probe built static (CGO_ENABLED=0)
#       fgpu-probe.oci.tar     it, packed as an OCI image layout by hack/oci_pack.py: the pod's image and
#                              containerd's sandbox image; the test imports it (`ctr images import`)
#   output: progress on stderr; the LAST line on stdout is the node dir.
#   errors: one line on stderr saying what is missing and what to do.
#
# containerd is not set up as a system service: the test starts its own (own root, state and socket under
# a temp dir) and stops it with every shim, so a run leaves nothing behind and needs no init system.
# Pitfalls this config answers: ../docs/testing.md#the-real-kubelet.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FGPU_CACHE=${FGPU_CACHE:-$HOME/.cache/fgpu}
NODE_DIR="$FGPU_CACHE/node"
PACKAGES=(runc containernetworking-plugins iptables conntrack)
CNI_BIN_DIR=/usr/lib/cni               # where Debian puts the CNI plugins (containerd's default: /opt/cni/bin)
IMAGE=fgpu.local/e2e/fgpu-probe:v1     # the workload image (pods use imagePullPolicy: Never)
SANDBOX_IMAGE=fgpu.local/e2e/pause:v1  # the same image, as containerd's sandbox image
POD_SUBNET=10.213.0.0/24
BRIDGE=fgpu-e2e0

say() { echo "node-setup: $*" >&2; }
die() { echo "node-setup: $*" >&2; exit 1; }

# Everything that decides the node dir's contents; a change to any of it redoes the configs and the image.
inputs_hash() {
    cat "$0" "$REPO/hack/oci_pack.py" "$REPO/hack/node-probe/main.go" "$REPO/hack/node-probe/go.mod" \
        | sha256sum | cut -c1-16
}

packages_installed() {
    command -v runc >/dev/null && command -v iptables-restore >/dev/null && command -v conntrack >/dev/null \
        && [[ -x $CNI_BIN_DIR/bridge && -x $CNI_BIN_DIR/host-local && -x $CNI_BIN_DIR/loopback ]]
}

STAMP="$NODE_DIR/.stamp"
HASH=$(inputs_hash)
if packages_installed && [[ -f $STAMP && "$(cat "$STAMP")" == "$HASH" ]]; then
    say "reusing $NODE_DIR"
    echo "$NODE_DIR"
    exit 0
fi

[[ $(uname -s) == Linux ]] || die "a real kubelet needs Linux (this is $(uname -s))"
[[ $(id -u) -eq 0 ]] || die "must run as root (containerd, runc and the kubelet need it); run: sudo $0"
grep -qw overlay /proc/filesystems || die "the kernel lacks overlayfs, which containerd's snapshotter needs (modprobe overlay)"

# ---- packages --------------------------------------------------------------------------------------------
if ! packages_installed; then
    command -v apt-get >/dev/null || die "apt-get not found: install ${PACKAGES[*]} (runc, CNI plugins in $CNI_BIN_DIR, iptables, conntrack) by hand"
    say "installing Debian packages: ${PACKAGES[*]}"
    # one setup at a time: apt holds its own lock, but a clear wait message beats a lock error
    log=$(mktemp)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${PACKAGES[@]}"; } >"$log" 2>&1; then
        first=$(grep -m1 -E '^(E|W):' "$log" || tail -n1 "$log")
        rm -f "$log"
        die "apt-get could not install ${PACKAGES[*]}: $first"
    fi
    rm -f "$log"
    packages_installed || die "installed ${PACKAGES[*]} but runc/iptables-restore/conntrack or $CNI_BIN_DIR/{bridge,host-local,loopback} are still missing"
fi
say "$(runc --version 2>/dev/null | head -n1); $(iptables --version 2>/dev/null)"

mkdir -p "$NODE_DIR/net.d"

# ---- containerd: the CRI plugin's settings -------------------------------------------------------------
# restrict_oom_score_adj: without CAP_SYS_RESOURCE (Firecracker VMs, some containers) runc cannot set the
#   pause container's oom_score_adj -998 and sandbox creation fails ("can't get final child's PID").
# cni.bin_dirs: Debian installs the plugins in /usr/lib/cni; containerd looks in /opt/cni/bin by default.
# sandbox_image: nothing can be pulled here; the locally imported probe image stands in for pause.
cat >"$NODE_DIR/containerd.toml.tmp" <<EOF
# written by hack/node-setup.sh for containerd 2.x; root, state and the socket come from the command line
version = 3

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$SANDBOX_IMAGE"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  # pod network namespaces under the (per-run) state dir rather than /run/netns: a run's teardown, or the
  # next run after a crash, finds and removes them with the rest
  netns_mounts_under_state_dir = true
  enable_selinux = false
  # CDI (on by default in 2.x): where a DRA driver writes its device specs
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$NODE_DIR/net.d"
EOF
mv "$NODE_DIR/containerd.toml.tmp" "$NODE_DIR/containerd.toml"

# ---- CNI: one bridge, host-local addresses (state on tmpfs: a reboot forgets stale leases) --------------
cat >"$NODE_DIR/net.d/10-fgpu-e2e.conflist.tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "fgpu-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "dataDir": "/run/fgpu-e2e/cni"
      }
    },
    {"type": "loopback"}
  ]
}
EOF
mv "$NODE_DIR/net.d/10-fgpu-e2e.conflist.tmp" "$NODE_DIR/net.d/10-fgpu-e2e.conflist"

# ---- the probe image ---------------------------------------------------------------------------------
command -v go >/dev/null || die "the Go toolchain ('go') is not on PATH; it builds the probe image's static binary"
say "building hack/node-probe (static) and packing it as $IMAGE"
export GOPATH="$FGPU_CACHE/go" GOMODCACHE="$FGPU_CACHE/go/pkg/mod" GOCACHE="$FGPU_CACHE/go-build"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
out=$(cd "$REPO/hack/node-probe" && go build -trimpath -ldflags "-s -w" -o "$NODE_DIR/fgpu-probe" . 2>&1) \
    || die "building hack/node-probe failed: $(head -n1 <<<"$out")"
arch=$(go env GOARCH)
digest=$(python3 "$REPO/hack/oci_pack.py" "$NODE_DIR/fgpu-probe" "$NODE_DIR/fgpu-probe.oci.tar" \
    --name "$IMAGE" --name "$SANDBOX_IMAGE" --arch "$arch") || die "packing the probe image failed"
printf '%s\n' "image=$IMAGE" "sandbox_image=$SANDBOX_IMAGE" "digest=$digest" "bridge=$BRIDGE" \
    "pod_subnet=$POD_SUBNET" >"$NODE_DIR/node.env"

echo "$HASH" >"$STAMP"
say "ready: $NODE_DIR"
echo "$NODE_DIR"
