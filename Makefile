# The two set-up commands of the README: `make run` and `make test`.
# Both create the virtualenv on first use; nothing needs to be installed by hand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-ray testbed e2e check lint types proto proto-check bench bench-ci \
	bench-scheduler bench-scheduler-ci bench-cache-scale bench-admission \
	image pin-base-images clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# `make run` needs only what serving needs: raygate and its server extra, no test tools.
RUN_STAMP := $(VENV)/.installed-run

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $(RUN_STAMP)

run: $(RUN_STAMP)  ## serve the demo cluster in the foreground (HTTP :8888, gRPC :9090)
	$(BIN)/raygate serve --demo

# Two processes (pytest-xdist): the suite waits on sockets, subprocesses and timers more
# than it computes, so on 2 cores it takes about half as long. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

test: $(STAMP)  ## the whole test suite, layering contracts included
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

RAY_STAMP := $(VENV)/.installed-ray

$(RAY_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,ray]'
	touch $(RAY_STAMP)

# `make test` skips these when Ray is not installed; here a missing Ray is a failure.
test-ray: $(RAY_STAMP)  ## the tests against the real Ray autoscaler code (installs raygate[ray])
	RAYGATE_REQUIRE_RAY=1 $(BIN)/python -m pytest -q -m ray

# The real components, built from their Go modules at the versions pinned in
# testbed/modules/*/go.mod, into ~/.cache/raygate/testbed (a cold build takes ~25 min on
# 2 cores; a warm one seconds). Needs the go command and the Go module proxy; Karpenter's
# module needs Go 1.27.3, which the go command fetches through the proxy for that build alone.
testbed: $(STAMP)  ## build etcd, Kubernetes, KubeRay, Volcano, Kueue, kwok, Karpenter, helm from Go modules (cached)
	$(BIN)/python -m testbed build

# Ray too: the autoscaler scenarios run the real Ray head and autoscaler.
e2e: testbed $(RAY_STAMP)  ## the scenarios against the real components; writes docs/e2e-report.md
	$(BIN)/python -m pytest -q e2e

check: lint types proto-check  ## lint (ruff, import contracts), types (mypy strict, tests included), generated code current

lint: $(STAMP)  ## ruff, and the import contracts of pyproject.toml (import-linter)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# mypy's incremental cache outside the checkout, kept between runs as the testbed's is: a
# fresh clone (CI's) checks again only the files whose content changed (mypy compares
# hashes when a path or mtime differs): 1-2 s, ~12 s from a venv elsewhere, ~20 s cold.
MYPY_CACHE_DIR ?= $(HOME)/.cache/raygate/mypy

types: $(STAMP)
	MYPY_CACHE_DIR=$(MYPY_CACHE_DIR) $(BIN)/mypy

proto: $(STAMP)  ## regenerate raygate/contract/proto/ from protos/ (commit the result)
	$(BIN)/python protos/generate.py

proto-check: $(STAMP)  ## fail if raygate/contract/proto/ is not what protos/ generates
	$(BIN)/python protos/generate.py --check

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)  ## release benchmark vs the Go peer: table, JSON, markdown, plot (bench/)
	$(BIN)/python -m bench --label full --install-wrk --wait-quiet 15 \
		--markdown bench/results/latest-full.md \
		--plot bench/latency-vs-node-names.png
	$(MAKE) bench-cache-scale

bench-ci: $(BENCH_STAMP)  ## the fast benchmark scenarios; fails on wrong answers or errors only
	$(BIN)/python -m bench --label fast --install-wrk

# kube-scheduler's own throughput with no extender, an empty one, the Go peer and raygate
# in its cycle, on the testbed's real etcd, kube-apiserver and kube-scheduler.
bench-scheduler: testbed $(BENCH_STAMP)  ## 500 and 5,000 nodes, 1,000 pods, 3 interleaved runs: table, JSON, plot
	$(BIN)/python -m bench.scheduler_throughput --label full \
		--json bench/results/scheduler-full.json --markdown bench/results/scheduler-full.md \
		--plot bench/scheduler-throughput.png

bench-scheduler-ci: testbed $(BENCH_STAMP)  ## 500 nodes, 200 pods, one run; fails on wrong placement or a crash only
	$(BIN)/python -m bench.scheduler_throughput --label fast

# The testbed's etcd and kube-apiserver: loading 150,000 pods through the API takes most of
# its 15-30 min.
bench-cache-scale: testbed $(BENCH_STAMP)  ## raygate's cache on the real kube-apiserver: 5,000 nodes, 150,000 pods
	$(BIN)/python -m bench.cache_scale

bench-admission: $(STAMP)  ## filter/prioritize latency with many admission watchers; Watch latency
	$(BIN)/python -m bench.admission_watchers

# The name every manifest pulls (deploy/image/kustomization.yaml), at pyproject's version.
IMAGE = $(shell sed -n 's/^ *newName: //p' deploy/image/kustomization.yaml):$(shell \
	$(PYTHON) -c "import tomllib;print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")

image:  ## the container image of deploy/ and the chart (needs a Docker engine); IMAGE=<registry>/raygate:<tag> for your own
	docker build -t $(IMAGE) .

# What a release does first on a tag (.github/workflows/release.yml); commit the result.
pin-base-images:  ## pin the Dockerfiles' base images by digest (needs docker buildx and a registry)
	$(PYTHON) requirements/base_image.py pin

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .benchmarks
