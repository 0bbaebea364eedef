# humpyard — the commands a newcomer needs. Every target creates .venv when missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

INFRA_VENV  := .venv-infra
INFRA_STAMP := $(INFRA_VENV)/.installed-infra

.PHONY: run test lint bench soak package lock clean infra-venv

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## run: start the demo — simulated providers + the gateway on examples/demo.toml
run: $(STAMP)
	$(VENV)/bin/humpyard demo --config examples/demo.toml

# cfn-lint and the SAM CLI (with its translator) live in their own venv so they
# never slow the app's imports; tests/infra calls them from there.
$(INFRA_STAMP):
	$(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(INFRA_VENV)/bin/python -m pip install --quiet 'aws-sam-cli==1.170.0' 'cfn-lint==1.58.0'
	touch $(INFRA_STAMP)

## infra-venv: the template-validation tools, for tests/infra
infra-venv: $(INFRA_STAMP)

# The console's browser tests drive Debian's Chromium (never a downloaded browser).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else echo "the UI tests need Chromium: sudo apt-get install chromium" >&2; exit 1; fi

# One hostile-client test drives Debian's curl (tests/hostile/test_clients_upgrade.py).
CURL := /usr/bin/curl
$(CURL):
	@if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl; \
	else echo "a client test needs curl: sudo apt-get install curl" >&2; exit 1; fi

# The tests that assert no latency and start no server of their own under load run
# on every core (pytest-xdist, at most 4 workers); the rest, among them the probes
# whose latency must stay flat, one at a time (docs/decisions/0029-parallel-tests.md).
# Both runs always run; make test fails if either failed.
PARALLEL_TESTS := tests/unit tests/contract tests/fuzz tests/infra

## test: install what the tests need, lint, and run every test
test: $(STAMP) $(INFRA_STAMP) $(CHROMIUM) $(CURL)
	$(VENV)/bin/ruff check shared tests
	bash tests/agents/install.sh
	status=0; \
	$(PY) -m pytest -n auto --maxprocesses=4 $(PARALLEL_TESTS) || status=$$?; \
	$(PY) -m pytest $(addprefix --ignore=,$(PARALLEL_TESTS)) || status=$$?; \
	exit $$status

## lint: ruff and mypy
lint: $(STAMP)
	$(VENV)/bin/ruff check shared tests functions bench
	$(VENV)/bin/mypy shared/humpyard

## soak: two minutes each of the fault soak (32 connections), the ledger soak (256) and the hostile soak (every attack at once), and the DynamoDB partition-heat runs at full size (2,000 requests on 10 and 40 instances); make test runs 10 s / 8 s and the heat on 3 instances / the first 1,000 requests
soak: $(STAMP)
	HUMPYARD_SOAK_SECS=$${HUMPYARD_SOAK_SECS:-120} $(PY) -m pytest tests/faults/test_soak.py tests/hostile/test_soak_hostile.py -q -s
	HUMPYARD_HEAT=full $(PY) -m pytest tests/unit/aws/test_partition_heat.py tests/unit/aws/test_budget_leases.py::test_one_budgeted_key_at_1000_requests_per_second_heats_no_item -q -s

## bench: measure the gateway's own cost; results in bench/results/
bench: $(STAMP)
	$(PY) bench/run.py

## package: build/ for `sam deploy` (humpyard + the locked deps for python3.12/arm64, unchecked-hash .pyc)
package:
	bash infra/package.sh

## lock: re-resolve the Lambda layer's dependencies into infra/layer-requirements.lock (pinned, hashed)
lock: $(STAMP)
	PYTHON=$(PY) bash infra/lock-layer.sh

clean:
	rm -rf $(VENV) $(INFRA_VENV) .aws-sam .pytest_cache build *.egg-info shared/*.egg-info
