#!/usr/bin/env bash
# Build CPython the way the operator image's is built, so benchmarks time the interpreter a Helm install runs.
#
#   make python-pgo            (or: hack/python-pgo.sh [VERSION])
#
# Why: the image's base (the Dockerfile's python:3.12.x-slim-bookworm, Docker's official image) compiles CPython
# with profile-guided and link-time optimisation (`--enable-optimizations --with-lto`); pyenv's and most
# distributions' builds here do not, and the operator is pure Python on one thread, so the interpreter's build
# sets much of its rate (docs/benchmarks.md, "Scheduler throughput").
#   source:  python.org is not reachable here; the Go module proxy serves CPython's tagged sources as the module
#            github.com/python/cpython (vX.Y.Z+incompatible.zip). VERSION defaults to the proxy's 3.12 release closest to the
#            Dockerfile's pin and not older (the pin's own when the proxy has it).
#   cache:   ${FGPU_CACHE:-$HOME/.cache/fgpu}/python/<version>-pgo/ (the install), .../src-<version>/ (the build);
#            nothing is written in the repository. Idempotent: an existing install is reused.
#   cost:    ~20 min on 2 idle cores (2026-11-28: the build, PGO training run included); once, by hand. `make` then builds
#            .venv with it (hack/python.sh prefers it); CI does not build it.
#   output:  progress on stderr; the LAST line on stdout is the interpreter's path.
#   errors:  one line on stderr saying what failed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
FGPU_CACHE=${FGPU_CACHE:-$HOME/.cache/fgpu}
PROXY=${GOPROXY_URL:-https://proxy.golang.org}
MODULE=github.com/python/cpython
die() { echo "hack/python-pgo.sh: $*" >&2; exit 1; }

pin=$(sed -n 's/^ARG PYTHON_IMAGE=python:\([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' "$REPO/Dockerfile")
[[ -n $pin ]] || die "no python:X.Y.Z pin in the Dockerfile's ARG PYTHON_IMAGE"
version=${1:-}
if [[ -z $version ]]; then
    listed=$(curl -fsS --max-time 60 "$PROXY/$MODULE/@v/list") || die "cannot list $MODULE on $PROXY"
    minor=${pin%.*}
    version=$(tr ' ' '\n' <<<"$listed" | sed -n "s/^v\(${minor//./\\.}\.[0-9]*\)+incompatible$/\1/p" | sort -V \
              | awk -v pin="$pin" 'BEGIN { split(pin, p, ".") } { split($0, v, "."); if (v[3] + 0 >= p[3] + 0) print }' \
              | head -n1)
    [[ -n $version ]] || die "$PROXY has no $MODULE release $minor.x at or after the Dockerfile's $pin"
fi
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION '$version' is not X.Y.Z"
prefix="$FGPU_CACHE/python/$version-pgo"
python="$prefix/bin/python${version%.*}"
# The official image's build (docker-library/python, Debian bookworm), step by step: configure with PGO and LTO; C
# flags from dpkg-buildflags (-O2, stack protector) plus frame pointers (kept since 2025 so that `perf` can walk
# Python's stacks; they cost a little speed); the binaries stripped. Here an rpath stands for the image's
# $ORIGIN/../lib. An install made by another recipe (before frame pointers, say) is rebuilt: the stamp says which.
command -v dpkg-buildflags >/dev/null || die "no dpkg-buildflags (Debian's dpkg-dev): the image's C flags come from it"
cflags="$(dpkg-buildflags --get CFLAGS) -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer"
ldflags="$(dpkg-buildflags --get LDFLAGS) -Wl,--strip-all -Wl,-rpath,$prefix/lib"
configure=(--prefix="$prefix" --build="$(dpkg-architecture --query DEB_BUILD_GNU_TYPE)"
           --enable-loadable-sqlite-extensions --enable-optimizations --enable-option-checking=fatal
           --enable-shared --with-lto --with-ensurepip)
recipe="configure ${configure[*]}; EXTRA_CFLAGS=${cflags//$PWD/.}; LDFLAGS=$ldflags"
stamp="$prefix/.fgpu-recipe"
if [[ -x $python ]] && "$python" -I -c 'import ssl, ctypes, sqlite3' 2>/dev/null && [[ $(cat "$stamp" 2>/dev/null) == "$recipe" ]]; then
    echo "hack/python-pgo.sh: $version built as the image's is (PGO+LTO) already" >&2
    echo "$python"
    exit 0
fi

src="$FGPU_CACHE/python/src-$version"
zip="$FGPU_CACHE/python/cpython-$version.zip"
mkdir -p "$FGPU_CACHE/python"
if [[ ! -s $zip ]]; then
    echo "hack/python-pgo.sh: fetching CPython $version's source from $PROXY" >&2
    curl -fsS --max-time 600 -o "$zip.part" "$PROXY/$MODULE/@v/v$version+incompatible.zip" \
        || die "cannot fetch $MODULE v$version+incompatible from $PROXY"
    mv "$zip.part" "$zip"
fi
rm -rf "$src" && mkdir -p "$src"
unzip -q "$zip" -d "$src.unzip" || die "cannot unpack $zip"
mv "$src.unzip/$MODULE@v$version+incompatible"/* "$src/" && rm -rf "$src.unzip"
# Module zips keep no file modes: every script (a #! first line) gets its execute bit back.
grep -rlI --null -m1 '^#!' "$src" | xargs -0 chmod +x
cd "$src"
echo "hack/python-pgo.sh: configure + make (PGO, LTO) + install into $prefix; log: $src/build.log" >&2
rm -rf "$prefix"
{
    ./configure "${configure[@]}"
    make -j "$(nproc)" "EXTRA_CFLAGS=$cflags" "LDFLAGS=$ldflags"
    make install "EXTRA_CFLAGS=$cflags" "LDFLAGS=$ldflags"
} >"$src/build.log" 2>&1 || die "the build failed: see $src/build.log"
"$python" -I -c 'import ssl, ctypes, sqlite3' || die "$python lacks ssl/ctypes/sqlite3 (missing -dev packages?)"
echo "$recipe" >"$stamp"
echo "$python"
