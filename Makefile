# The two set-up commands of the README: `make run` and `make test`.
# Both create the virtualenv on first use; nothing needs to be installed by hand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check lint types bench-http image clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)  ## serve the demo cluster in the foreground (HTTP :8888, gRPC :9090)
	$(BIN)/raygate serve --demo

test: $(STAMP)  ## the whole test suite, layering contracts included
	$(BIN)/python -m pytest -q

check: lint types  ## lint (ruff) and types (mypy strict, tests included)

lint: $(STAMP)
	$(BIN)/ruff check .

types: $(STAMP)
	$(BIN)/mypy

bench-http: $(STAMP)  ## end-to-end filter/prioritize latency against a real server (wrk if present)
	$(BIN)/python -m bench.http_extender

image:  ## the container image of deploy/ (needs a Docker engine)
	docker build -t raygate:$(shell $(PYTHON) -c "import tomllib;print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])") .

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .benchmarks
