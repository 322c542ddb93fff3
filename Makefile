# fgpu — two commands: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
# The operator image's Python where this machine has it (hack/python.sh), else python3; `make PYTHON=...` overrides.
ifndef PYTHON
PYTHON := $(shell hack/python.sh)
endif
VENV := .venv
PY := $(VENV)/bin/python
# one stamp per interpreter version: a venv built with another Python is rebuilt (venv --clear)
STAMP := $(VENV)/.installed-py$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
FGPU_CACHE ?= $(HOME)/.cache/fgpu
export FGPU_CACHE

.PHONY: demo demo-down cluster-up cluster-down test testbin node-setup install python-pgo lint unit e2e bench prometheus clean image image-nodocker chart-docs kind-up kind-down minikube-up minikube-down

$(STAMP): pyproject.toml setup.py
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fgpu needs Python >= 3.11")'
	$(PYTHON) -I -m venv --clear $(VENV)
	$(PY) -I -m pip install -q --upgrade pip
	$(PY) -I -m pip install -q -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

## CPython built as the operator image's is (PGO + LTO; ~20 min on 2 cores, once, by hand; hack/python-pgo.sh), then .venv
## rebuilt with it, so benchmarks time the interpreter that ships. CI does not need it.
python-pgo:
	@hack/python-pgo.sh >/dev/null
	rm -f $(VENV)/.installed-py*
	$(MAKE) install PYTHON="$$(hack/python.sh)"

## fgpu end to end on this machine, no Docker (devcluster/demo.py): control plane, 3 emulated-GPU nodes, operator,
## Prometheus, the example pods, a workload, `fgpu report`, a short `fgpu simulate`. The cluster stays up until demo-down.
demo: $(STAMP) prometheus
	$(PY) -m devcluster.demo up

## Stop everything `make demo` started; no process or socket is left (logs and report stay in out/demo).
demo-down:
	@if [ -x $(PY) ]; then $(PY) -m devcluster.demo down; else echo "no venv: nothing to tear down"; fi

## The cluster kind would give you, from source, no Docker (devcluster/cluster.py): etcd, kube-apiserver,
## controller-manager, kube-scheduler, kube-proxy, one real node (containerd 2.x + kubelet) with the fgpu image
## imported, KWOK nodes. Needs root. KUBECONFIG=out/cluster/kubeconfig; stays up until cluster-down.
cluster-up: $(STAMP)
	$(PY) -m devcluster.cluster up

cluster-down:
	@if [ -x $(PY) ]; then $(PY) -m devcluster.cluster down; else echo "no venv: nothing to tear down"; fi

## Build (or reuse from $(FGPU_CACHE)) the control plane; the last line printed is its directory.
testbin:
	@hack/testbin.sh

## runc, CNI plugins, iptables from Debian + the real node's containerd/CNI configs and probe image (idempotent; root).
node-setup:
	@hack/node-setup.sh

## Debian's prometheus server + promtool, for the metrics tests.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || \
	  { echo "installing Debian package prometheus" >&2; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) || \
	    { echo "make prometheus: could not install the Debian package 'prometheus' (needs apt and root)" >&2; exit 1; }; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .

## Everything: install, lint, build/reuse the control plane, run the whole suite (e2e included, never skipped).
test: $(STAMP) prometheus
	$(VENV)/bin/ruff check .
	@dir=$$(hack/testbin.sh) || exit 1; \
	  echo "control plane binaries: $$dir"; \
	  node=$$(hack/node-setup.sh) || exit 1; \
	  echo "real-kubelet node setup: $$node"; \
	  image=$$(hack/image-nodocker.sh) || exit 1; \
	  echo "fgpu image archive: $$image"; \
	  FGPU_TESTBIN="$$dir" FGPU_NODE="$$node" FGPU_IMAGE="$$image" FGPU_REQUIRE_E2E=1 $(PY) -m pytest -ra -p no:cacheprovider tests

unit: $(STAMP)
	$(PY) -m pytest -ra -m 'not e2e' tests

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

## The container image of every component (Dockerfile); needs Docker.
IMAGE ?= fgpu:dev
image:
	@command -v docker >/dev/null || { echo "make image: needs docker (not found on PATH)" >&2; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "make image: docker is installed but its daemon does not answer" >&2; exit 1; }
	docker build -t $(IMAGE) .

## The same Dockerfile built without Docker (buildah, chroot isolation, a local Debian bookworm base), every
## entrypoint run from the image as uid 65532; needs root, buildah, debootstrap. artifacts go to FGPU_CACHE/image/.
image-nodocker:
	IMAGE=$(IMAGE) hack/image-nodocker.sh

## Rewrite charts/fgpu/values.schema.json and the chart README's values table (charts/chartgen.py).
chart-docs: $(STAMP)
	$(PY) -m charts.chartgen

## Quick start: a kind (or minikube) cluster with emulated GPUs, fgpu, Prometheus + Grafana, the example pods.
kind-up: $(STAMP)
	IMAGE=$(IMAGE) deploy/quickstart.sh kind up
kind-down:
	deploy/quickstart.sh kind down
minikube-up: $(STAMP)
	IMAGE=$(IMAGE) deploy/quickstart.sh minikube up
minikube-down:
	deploy/quickstart.sh minikube down

clean:
	rm -rf $(VENV) out build *.egg-info
