#!/usr/bin/env bash
# Build (or reuse) the Kubernetes control plane the e2e tests run against: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, etcd, kwok and helm, compiled from their Go modules with the
# machine's Go toolchain and module proxy (docs/testing.md). Nothing is written inside the repository.
#
#   cache:  ${FGPU_CACHE:-$HOME/.cache/fgpu}/testbin/<pinned versions>/   (the executables + .stamp)
#           Only what is missing there is built: a cache made before kubelet joined the set keeps its
#           control plane and gets kubelet alone (~30 s with the Go caches below warm).
#   Go:     GOPATH/GOMODCACHE in $FGPU_CACHE/go, GOCACHE in $FGPU_CACHE/go-build: rebuilds reuse them.
#   output: progress on stderr; the LAST line on stdout is the absolute directory of the executables.
#   errors: one line on stderr naming what was needed and from where; the full Go output stays in a log.
set -euo pipefail

# ---- pinned versions (change here; the cache directory name follows) ------------------------------
K8S_VERSION=v1.37.2        # k8s.io/kubernetes; staging modules k8s.io/* at v0.37.2
ETCD_VERSION=v3.5.35       # go.etcd.io/etcd/server/v3 (>= 3.5.13: older ones break WatchList watches)
KWOK_VERSION=v0.8.0        # sigs.k8s.io/kwok
HELM_VERSION=v3.21.4       # helm.sh/helm/v3
CONTAINERD_VERSION=v2.4.2  # github.com/containerd/containerd/v2 (CDI on by default; Kubernetes >= 1.36 needs 2.x)
# -----------------------------------------------------------------------------------------------------

FGPU_CACHE=${FGPU_CACHE:-$HOME/.cache/fgpu}
PINNED="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_containerd-${CONTAINERD_VERSION}"
ROOT="$FGPU_CACHE/testbin"
OUT="$ROOT/$PINNED"
SRC="$ROOT/src/$PINNED"
LOG="$ROOT/build-$PINNED.log"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd kwok helm
          containerd ctr containerd-shim-runc-v2)
# the ones built from k8s.io/kubernetes (its cmd/<name>), in one wrapper module
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# KWOK's own stage definitions (node-initialize, node-heartbeat, pod ready/complete/delete), taken from the
# kwok module at build time; the bare `kwok` binary has none built in and refuses to start without them.
KWOK_STAGES=kwok-stages.yaml
KWOK_STAGE_FILES=(node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml
                  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)
# The kubelet-like heartbeat (node status every 10-20 min, a Lease renewed instead), in place of
# node-heartbeat: the scheduler bench's --node-heartbeat lease swaps it in.
KWOK_LEASE_STAGE=kwok-stage-node-heartbeat-with-lease.yaml
KWOK_LEASE_STAGE_FILE=node/heartbeat-with-lease/node-heartbeat-with-lease.yaml

say() { echo "testbin: $*" >&2; }
die() { echo "testbin: $*" >&2; exit 1; }

warm() {
    [[ -f "$OUT/.stamp" && "$(cat "$OUT/.stamp")" == "$PINNED" && -f "$OUT/$KWOK_STAGES" && -f "$OUT/$KWOK_LEASE_STAGE" ]] || return 1
    local b
    for b in "${BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || return 1; done
}

reuse_if_warm() {
    if warm; then
        say "reusing $OUT"
        echo "$OUT"
        exit 0
    fi
}

reuse_if_warm

# One build at a time per cache: a second caller (another `make test`) waits, then reuses the result.
mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
if ! flock -n 9; then
    say "another testbin build holds $ROOT/.lock; waiting for it"
    flock 9
fi
reuse_if_warm

command -v go >/dev/null 2>&1 || die "the Go toolchain ('go') is not on PATH; it is needed to build the control plane from its Go modules"

mkdir -p "$ROOT" "$OUT" "$SRC"
: >"$LOG"

export GOPATH="$FGPU_CACHE/go"
export GOMODCACHE="$FGPU_CACHE/go/pkg/mod"
export GOCACHE="$FGPU_CACHE/go-build"
export GOTOOLCHAIN=local       # never fetch another toolchain behind our back
export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
GOPROXY_SHOWN=$(go env GOPROXY 2>/dev/null || echo '?')
# two cores are shared with other work: keep parallel compiles (and their memory) bounded
JOBS=${FGPU_BUILD_JOBS:-2}

# Run a Go command with its output in the log; on failure print ONE line and exit.
#   gorun "<what it needed, for the error line>" <download|build> <dir> go args...
gorun() {
    local what=$1 kind=$2 dir=$3
    shift 3
    echo "+ (cd $dir && $*)" >>"$LOG"
    if ! (cd "$dir" && "$@") >>"$LOG.step" 2>&1; then
        cat "$LOG.step" >>"$LOG"
        local first
        first=$(grep -m1 -E 'error|cannot|unrecognized|not found|no such|refused|timeout|dial|invalid|requires go' "$LOG.step" || head -n1 "$LOG.step")
        rm -f "$LOG.step"
        if [[ $kind == download ]]; then
            die "cannot download $what from the Go module proxy (GOPROXY=$GOPROXY_SHOWN): ${first} (full log: $LOG)"
        else
            die "building $what failed: ${first} (full log: $LOG)"
        fi
    fi
    cat "$LOG.step" >>"$LOG"
    rm -f "$LOG.step"
}

# A wrapper module at $SRC/<name> that requires the given modules.
new_module() {
    local name=$1
    mkdir -p "$SRC/$name"
    rm -f "$SRC/$name/go.mod" "$SRC/$name/go.sum"
    gorun "nothing (go mod init)" build "$SRC/$name" go mod init "fgpu.local/testbin/$name"
}

verify() {
    local b=$1 out
    if [[ $b == helm ]]; then
        out=$("$OUT/$b" version 2>&1) || die "$OUT/$b version failed: $(head -n1 <<<"$out")"
    else
        out=$("$OUT/$b" $([[ $b == containerd-shim-runc-v2 ]] && echo -v || echo --version) 2>&1) || die "$OUT/$b --version failed: $(head -n1 <<<"$out")"
    fi
    say "  $b: $(head -n1 <<<"$out")"
}

T0=$SECONDS
say "building the control plane into $OUT (log: $LOG)"

# ---- Kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet in one go build -----
# Only the missing ones: the real-kubelet test added kubelet to a set whose (36-minute) control-plane build
# was already cached under the same directory name, and that build must not run again for it.
k8s_missing=()
for b in "${K8S_BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || k8s_missing+=("$b"); done
if [[ ${#k8s_missing[@]} -gt 0 ]]; then
    # The wrapper module: requires k8s.io/kubernetes and replaces its staging modules. Kept between builds,
    # so a later build (of kubelet, say) starts from the modules the earlier one resolved.
    if ! grep -qs "k8s.io/kubernetes $K8S_VERSION" "$SRC/kubernetes/go.mod"; then
        say "kubernetes $K8S_VERSION: resolving modules"
        new_module kubernetes
        gorun "k8s.io/kubernetes@$K8S_VERSION" download "$SRC/kubernetes" go mod download k8s.io/kubernetes@"$K8S_VERSION"
        kmod=$(cd "$SRC/kubernetes" && go mod download -json k8s.io/kubernetes@"$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
        [[ -f "$kmod" ]] || die "cannot locate the go.mod of k8s.io/kubernetes@$K8S_VERSION in $GOMODCACHE (full log: $LOG)"
        # Staging modules are required at v0.0.0 and replaced with ./staging paths upstream; point each at
        # its published release instead (v1.X.Y -> v0.X.Y).
        staging_version="v0.${K8S_VERSION#v1.}"
        mapfile -t staging < <(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$kmod" | sort -u)
        [[ ${#staging[@]} -gt 0 ]] || die "found no k8s.io/* modules pinned at v0.0.0 in $kmod (full log: $LOG)"
        edits=(-require "k8s.io/kubernetes@$K8S_VERSION")
        for m in "${staging[@]}"; do edits+=(-replace "$m=$m@$staging_version"); done
        gorun "nothing (go mod edit)" build "$SRC/kubernetes" go mod edit "${edits[@]}"
        say "kubernetes: ${#staging[@]} staging modules replaced at $staging_version"
    fi
    say "kubernetes: downloading the dependencies of ${k8s_missing[*]}"
    gets=() pkgs=()
    for b in "${k8s_missing[@]}"; do
        gets+=("k8s.io/kubernetes/cmd/$b@$K8S_VERSION")
        pkgs+=("k8s.io/kubernetes/cmd/$b")
    done
    gorun "k8s.io/kubernetes@$K8S_VERSION dependencies" download "$SRC/kubernetes" go get "${gets[@]}"
    minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    ldk="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
    ldk+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
    ldk+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
    say "kubernetes: compiling ${k8s_missing[*]} (the control plane from cold is the long part)"
    t=$SECONDS
    gorun "${k8s_missing[*]} $K8S_VERSION" build "$SRC/kubernetes" \
        go build -p "$JOBS" -trimpath -ldflags "$ldk" -o "$OUT/" "${pkgs[@]}"
    say "kubernetes: compiled in $((SECONDS - t)) s"
fi

# ---- etcd 3.5, KWOK, helm: one Go module each ------------------------------------------------------
# go_tool NAME LABEL MODULE@VERSION (what `go get` fetches) PACKAGE (what `go build` builds) LDFLAGS
go_tool() {
    local name=$1 label=$2 get=$3 pkg=$4 ldf=$5 t
    [[ -x "$OUT/$name" ]] && return 0
    say "$label"
    new_module "$name"
    gorun "$get" download "$SRC/$name" go get "$get"
    t=$SECONDS
    gorun "$label" build "$SRC/$name" go build -p "$JOBS" -trimpath -ldflags "$ldf" -o "$OUT/$name" "$pkg"
    say "$name: compiled in $((SECONDS - t)) s"
}
go_tool etcd "etcd $ETCD_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3 \
    "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}"
go_tool kwok "kwok $KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok \
    "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
go_tool helm "helm $HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
    "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"

# ---- containerd 2.x: the daemon, ctr and the runc shim from one module ---------------------------------
# Built static without cgo: the btrfs snapshotter (the one part that needs cgo) is left out by its build tag.
CTRD_BINARIES=(containerd ctr containerd-shim-runc-v2)
ctrd_missing=()
for b in "${CTRD_BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || ctrd_missing+=("$b"); done
if [[ ${#ctrd_missing[@]} -gt 0 ]]; then
    say "containerd $CONTAINERD_VERSION: ${ctrd_missing[*]}"
    new_module containerd
    gorun "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" download "$SRC/containerd" \
        go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION"
    ldc="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
    ldc+=" -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
    t=$SECONDS
    for b in "${ctrd_missing[@]}"; do
        gorun "containerd $CONTAINERD_VERSION ($b)" build "$SRC/containerd" \
            go build -p "$JOBS" -trimpath -tags "no_btrfs urfave_cli_no_docs" -ldflags "$ldc" -o "$OUT/$b" \
            "github.com/containerd/containerd/v2/cmd/$b"
    done
    say "containerd: compiled in $((SECONDS - t)) s"
fi

# ---- KWOK stages ---------------------------------------------------------------------------------------
# write_stages OUTNAME FILE...: the upstream stage files, concatenated into $OUT/OUTNAME
write_stages() {
    local name=$1 f
    shift
    [[ -f "$SRC/kwok/go.mod" ]] || new_module kwok
    kdir=$(cd "$SRC/kwok" && go mod download -json sigs.k8s.io/kwok@"$KWOK_VERSION" 2>>"$LOG" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || true
    [[ -n "$kdir" && -d "$kdir/kustomize/stage" ]] || die "cannot download sigs.k8s.io/kwok@$KWOK_VERSION (for its stage files) from the Go module proxy (GOPROXY=$GOPROXY_SHOWN) (full log: $LOG)"
    {
        echo "# KWOK stages copied from sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage by hack/testbin.sh"
        for f in "$@"; do
            [[ -f "$kdir/kustomize/stage/$f" ]] || die "sigs.k8s.io/kwok@$KWOK_VERSION has no kustomize/stage/$f"
            echo "---"
            cat "$kdir/kustomize/stage/$f"
        done
    } >"$OUT/$name.tmp"
    mv "$OUT/$name.tmp" "$OUT/$name"
    say "kwok: wrote $name"
}
[[ -f "$OUT/$KWOK_STAGES" ]] || write_stages "$KWOK_STAGES" "${KWOK_STAGE_FILES[@]}"
[[ -f "$OUT/$KWOK_LEASE_STAGE" ]] || write_stages "$KWOK_LEASE_STAGE" "$KWOK_LEASE_STAGE_FILE"

say "checking that each binary runs"
for b in "${BINARIES[@]}"; do verify "$b"; done
echo "$PINNED" >"$OUT/.stamp"
say "done in $((SECONDS - T0)) s"
echo "$OUT"
