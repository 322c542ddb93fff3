# syntax=docker/dockerfile:1
# One image for every fgpu component; the command picks the entrypoint (see charts/fgpu, deploy/README.md):
#   fgpu operator ...              the Kopf operator: scheduler + admission webhook
#   fgpu-device-plugin ...         the kubelet device plugin
#   simgpu daemon ...              the node daemon that serves the emulated GPUs
#   simgpu run ...                 the workload client (what the example pods run)
# Build: `make image` (docker build -t fgpu:dev .), or without Docker `make image-nodocker` (buildah, with
# PYTHON_IMAGE set to a local Debian bookworm base; hack/image-nodocker.sh). Both stages use the same pinned base, so the virtual
# environment built in the first runs unchanged in the second (same interpreter path and libc).
ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/fgpu
WORKDIR /src
# dependencies first (a layer that survives source and README edits: it reads pyproject.toml alone), then the
# packages themselves
COPY pyproject.toml ./
RUN /opt/fgpu/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && /opt/fgpu/bin/pip install -r /tmp/requirements.txt
COPY setup.py README.md ./
COPY fgpu_contracts fgpu_contracts
COPY simgpu simgpu
COPY deviceplugin deviceplugin
COPY operator operator
RUN /opt/fgpu/bin/pip install --no-deps --no-compile . \
 && /opt/fgpu/bin/pip uninstall -y pip \
 && find /opt/fgpu -depth -name __pycache__ -exec rm -rf {} + \
 && /opt/fgpu/bin/fgpu --help >/dev/null && /opt/fgpu/bin/fgpu-device-plugin --help >/dev/null \
 && /opt/fgpu/bin/simgpu daemon --help >/dev/null && /opt/fgpu/bin/simgpu run --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="fgpu" \
      org.opencontainers.image.description="Fractional GPUs for Kubernetes: operator, device plugin, simgpu node daemon and workload client" \
      org.opencontainers.image.licenses="Apache-2.0"
# the non-root user below needs a passwd entry: Kopf names its peering identity by getpass.getuser(), which
# fails on a uid the image does not know (the operator crash-looped on its first real node without it)
RUN echo 'fgpu:x:65532:65532:fgpu:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'fgpu:x:65532:' >> /etc/group
COPY --from=build /opt/fgpu /opt/fgpu
ENV PATH=/opt/fgpu/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 MPLCONFIGDIR=/tmp/matplotlib
# a non-root user by number (Kubernetes' runAsNonRoot can check a number, not a name); the device plugin's
# DaemonSet overrides it, because the kubelet's device-plugin directory belongs to root
USER 65532:65532
WORKDIR /tmp
CMD ["fgpu", "--help"]
