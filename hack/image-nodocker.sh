#!/usr/bin/env bash
# Build the Dockerfile without Docker (buildah, chroot isolation, vfs storage) and check what it built:
# every entrypoint's --help runs in the image, and the image runs as the non-root user 65532 -- under buildah,
# and (where containerd, ctr and runc are installed: `make node-setup`) imported into a throwaway containerd.
# Idempotent; needs root (buildah's chroot isolation and vfs storage), Debian's buildah and debootstrap.
#
#   make image-nodocker              (or: hack/image-nodocker.sh)
#
#   base:    the Dockerfile's pinned python:*-slim-bookworm comes from Docker Hub, which need not be reachable;
#            instead a Debian bookworm rootfs (debootstrap --variant=minbase + python3, python3-venv,
#            python-is-python3: Debian's Python 3.11, which pyproject's requires-python >= 3.11 allows) is
#            committed as $BASE_IMAGE and passed as --build-arg PYTHON_IMAGE (build uses --pull=never).
#            Both stages still share one base, so the venv's interpreter path holds in the final stage.
#   cache:   ${FGPU_CACHE:-$HOME/.cache/fgpu}/image/   rootfs-bookworm/ (the base rootfs, built once),
#            storage/ + run/ (buildah's own store, not the system one), fgpu.tar (the built image as a
#            docker-archive: `kind load image-archive`, `minikube image load`, `ctr -n k8s.io images import`).
#            fgpu.tar.inputs: the hash of everything that goes into the image (this script, the Dockerfile,
#            .dockerignore and the build context it lets through); an unchanged tree reuses fgpu.tar at once.
#            Nothing is written in the repository.
#   pip inside the build reaches PyPI (the Dockerfile's own RUN pip install).
#   output:  progress on stderr; the LAST line on stdout is the OCI archive's path.
#   errors:  one line on stderr saying what failed and what to do.
#   env:     IMAGE (default fgpu:dev, stored as localhost/fgpu:dev), FGPU_CACHE, DEBIAN_MIRROR.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FGPU_CACHE=${FGPU_CACHE:-$HOME/.cache/fgpu}
DIR="$FGPU_CACHE/image"
ROOTFS="$DIR/rootfs-bookworm"
SUITE=bookworm                                   # the pinned base's Debian release (python:*-slim-bookworm)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
BASE_IMAGE=localhost/fgpu-base:$SUITE-r1      # -rN: bump when the base recipe below changes
IMAGE=${IMAGE:-fgpu:dev}
[[ $IMAGE == */* ]] || IMAGE="localhost/$IMAGE"
ARCHIVE="$DIR/fgpu.tar"

say() { echo "image-nodocker: $*" >&2; }
die() { echo "image-nodocker: $*" >&2; exit 1; }

[[ $(uname -s) == Linux ]] || die "needs Linux (buildah's chroot isolation); this is $(uname -s)"
# ---- an unchanged tree: the archive built from it last time ------------------------------------------------
# The build context is what .dockerignore lets through: those paths, less __pycache__.
inputs_hash() {
    (cd "$REPO" && {
        cat "$0" Dockerfile .dockerignore
        find pyproject.toml setup.py README.md fgpu_contracts simgpu deviceplugin operator -type f \
            ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16)
}
HASH=$(inputs_hash)
if [[ -f $ARCHIVE && -f $ARCHIVE.inputs && "$(cat "$ARCHIVE.inputs")" == "$HASH" && ${FGPU_IMAGE_REBUILD:-0} != 1 ]]; then
    say "reusing $ARCHIVE (inputs $HASH unchanged; FGPU_IMAGE_REBUILD=1 rebuilds)"
    echo "$ARCHIVE"
    exit 0
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (buildah with chroot isolation and vfs storage, debootstrap); run: sudo $0"
missing=()
for tool in buildah debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [[ ${#missing[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null || die "${missing[*]} not found: install Debian's buildah and debootstrap"
    say "installing Debian packages: ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        buildah debootstrap; } >/tmp/fgpu-image-apt.log 2>&1 \
        || die "apt-get could not install ${missing[*]}: $(grep -m1 -E '^(E|W):' /tmp/fgpu-image-apt.log || tail -n1 /tmp/fgpu-image-apt.log)"
fi
mkdir -p "$DIR"
bah() { buildah --root "$DIR/storage" --runroot "$DIR/run" --storage-driver vfs "$@"; }

# ---- the base rootfs (cached; minutes the first time) ------------------------------------------------------
if [[ ! -x $ROOTFS/usr/bin/python ]]; then
    say "debootstrap $SUITE (minbase + $BASE_PACKAGES) into $ROOTFS"
    rm -rf "$ROOTFS.tmp"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$ROOTFS.tmp" "$MIRROR" \
        > "$DIR/debootstrap.log" 2>&1 || die "debootstrap failed (mirror $MIRROR; set DEBIAN_MIRROR): see $DIR/debootstrap.log"
    # what a slim image leaves out: package caches and lists, docs, man pages, locales
    rm -rf "$ROOTFS.tmp"/var/cache/apt/*.bin "$ROOTFS.tmp"/var/cache/apt/archives/*.deb \
           "$ROOTFS.tmp"/var/lib/apt/lists/* "$ROOTFS.tmp"/usr/share/doc/* "$ROOTFS.tmp"/usr/share/man/* \
           "$ROOTFS.tmp"/usr/share/locale/* "$ROOTFS.tmp"/var/log/*.log "$ROOTFS.tmp"/var/log/apt/*
    mv "$ROOTFS.tmp" "$ROOTFS"
fi

# ---- the base image (rebuilt only when missing) ------------------------------------------------------------
if ! bah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    say "committing $ROOTFS as $BASE_IMAGE"
    ctr=$(bah from --pull=never scratch)
    mnt=$(bah mount "$ctr")
    # device nodes stay out: the runtime gives /dev (as it does for the official image)
    tar -C "$ROOTFS" --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -cf - . | tar -C "$mnt" -xpf - \
        || die "copying $ROOTFS into the base image failed"
    # the venv's pip (which vendors its own CA list) trusts the system store instead, like Debian's pip does;
    # the final image has no pip (the Dockerfile uninstalls it)
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$mnt/etc/pip.conf"
    bah umount "$ctr" >/dev/null
    bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
        --cmd python3 --os linux --arch "$(dpkg --print-architecture 2>/dev/null || echo amd64)" "$ctr"
    bah commit --rm -q "$ctr" "$BASE_IMAGE" >/dev/null || die "buildah commit of $BASE_IMAGE failed"
    for old in $(bah images --format '{{.Name}}:{{.Tag}}' | grep '/fgpu-base:' | grep -vx "$BASE_IMAGE"); do
        bah rmi "$old" >/dev/null 2>&1 || true    # an earlier recipe's base
    done
fi

# ---- the Dockerfile ----------------------------------------------------------------------------------------
say "buildah bud $REPO/Dockerfile -> $IMAGE (base $BASE_IMAGE)"
# A host that reaches PyPI through a TLS-inspecting proxy trusts that proxy's CA in its own bundle: the build's
# RUN steps see the host's bundle in place of the base's (a bind mount, so it is not in any layer).
HOST_CA=${FGPU_BUILD_CA:-${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}
ca_mount=()
if [[ -f $HOST_CA ]]; then ca_mount=(--volume "$HOST_CA:/etc/ssl/certs/ca-certificates.crt:ro"); fi
# --layers: each step's result is kept as a cache image, so a change to fgpu's sources alone reruns only the
# steps from its COPY on (the dependencies' pip install, most of the build's time, is reused)
bah bud --isolation chroot --pull=never --layers=true --build-arg PYTHON_IMAGE="$BASE_IMAGE" "${ca_mount[@]}" \
    -t "$IMAGE" -f "$REPO/Dockerfile" "$REPO" > "$DIR/build.log" 2>&1 \
    || die "buildah bud failed: $(grep -m1 -iE 'error|failed' "$DIR/build.log" || tail -n1 "$DIR/build.log") (full log: $DIR/build.log)"
bah rm --all >/dev/null 2>&1 || true

# ---- checks: the user, every entrypoint --------------------------------------------------------------------
user=$(bah inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")
[[ $user == 65532:65532 ]] || die "the image's USER is '$user', not 65532:65532 (Dockerfile's USER line)"
ctr=$(bah from --pull=never "$IMAGE")
trap 'bah rm "$ctr" >/dev/null 2>&1 || true' EXIT
run() { bah run --isolation chroot "$ctr" -- "$@"; }
ids=$(run python -c 'import os; print(os.getuid(), os.getgid())') || die "python does not run in $IMAGE"
[[ $ids == "65532 65532" ]] || die "a process in $IMAGE runs as uid/gid '$ids', not 65532 65532"
name=$(run python -c 'import getpass; print(getpass.getuser())') || die "uid 65532 has no passwd entry in $IMAGE (getpass.getuser() fails: Kopf needs it)"
[[ $name == fgpu ]] || die "uid 65532 is '$name' in $IMAGE, not fgpu"
for cmd in "fgpu --help" "fgpu-device-plugin --help" "kubectl-fgpu --help" "simgpu daemon --help" "simgpu run --help"; do
    # shellcheck disable=SC2086
    out=$(run $cmd 2>&1) || die "'$cmd' fails in $IMAGE: $(tail -n1 <<<"$out")"
    grep -qi usage <<<"$out" || die "'$cmd' in $IMAGE printed no usage line: $(head -n1 <<<"$out")"
    say "ok: $cmd ($(head -n1 <<<"$out" | cut -c1-70))"
done
run sh -c 'test ! -w /opt/fgpu/bin' || die "the non-root user can write /opt/fgpu/bin in $IMAGE"
bah rm "$ctr" >/dev/null; trap - EXIT

rm -f "$ARCHIVE" "$ARCHIVE.inputs"
bah push -q "$IMAGE" "docker-archive:$ARCHIVE:${IMAGE#localhost/}" >/dev/null 2>&1 || die "buildah push to $ARCHIVE failed"

# ---- the same checks under containerd + runc (what a kubelet runs it with): a throwaway containerd -------
if [[ ${FGPU_IMAGE_CTR:-1} != 0 ]] && command -v containerd >/dev/null && command -v ctr >/dev/null && command -v runc >/dev/null; then
    tmp=$(mktemp -d /tmp/fgpu-image-ctrd.XXXXXX)
    printf 'version = 2\nroot = "%s/root"\nstate = "%s/state"\n[grpc]\n  address = "%s/ctrd.sock"\n' \
        "$tmp" "$tmp" "$tmp" > "$tmp/config.toml"
    containerd --config "$tmp/config.toml" > "$tmp/containerd.log" 2>&1 &
    ctrd=$!
    trap 'kill "$ctrd" 2>/dev/null; wait "$ctrd" 2>/dev/null; rm -rf "$tmp"' EXIT
    c() { ctr -a "$tmp/ctrd.sock" -n fgpu-image "$@"; }
    for _ in $(seq 50); do c version >/dev/null 2>&1 && break; sleep 0.2; done
    c images import "$ARCHIVE" >/dev/null 2>&1 || die "ctr images import $ARCHIVE failed (containerd log: $tmp/containerd.log)"
    ref="docker.io/library/${IMAGE#localhost/}"    # what a kubelet looks up for image: ${IMAGE#localhost/}
    n=0
    for cmd in "id -u" "" "fgpu-device-plugin --help" "simgpu daemon --help" "simgpu run --help"; do
        n=$((n + 1))
        # shellcheck disable=SC2086
        out=$(c run --rm "$ref" "fgpu-image-check-$n" $cmd 2>&1) || die "ctr run $ref ${cmd:-(its CMD)} failed: $(tail -n1 <<<"$out")"
        case $cmd in
            "id -u") [[ $out == 65532 ]] || die "under containerd $ref runs as uid '$out', not 65532" ;;
            *) grep -qi usage <<<"$out" || die "ctr run $ref ${cmd:-(its CMD)} printed no usage: $(head -n1 <<<"$out")" ;;
        esac
    done
    say "ok: containerd $(containerd --version | awk '{print $3}') + runc imported $ref and ran its CMD, the help of every entrypoint, as uid 65532"
    kill "$ctrd"; wait "$ctrd" 2>/dev/null || true; rm -rf "$tmp"; trap - EXIT
else
    say "containerd/ctr/runc not found (or FGPU_IMAGE_CTR=0): skipped the containerd run (make node-setup installs them)"
fi

size=$(bah images --format '{{.Size}}' "$IMAGE" | head -n1)
say "built $IMAGE: $size uncompressed, user $user; docker-archive at $ARCHIVE (kind load image-archive / ctr images import)"
echo "$HASH" > "$ARCHIVE.inputs"
echo "$ARCHIVE"
