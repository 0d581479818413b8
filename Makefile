# Everything a developer or CI runs. `make test` on a fresh machine installs and starts what it needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON   ?= python3.11
VENV     := .venv
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
PG       := deploy/postgres/pg.sh
KAFKA    := deploy/kafka/kafka.sh
export KAFKA_BOOTSTRAP_SERVERS ?= 127.0.0.1:9092
PYTEST_ARGS ?=

.PHONY: help install up down status topics test test-unit lint fmt bench bench-backbone demo schemas-lock clean

help:
	@echo "make install         virtualenv + pinned Python packages (PyPI only)"
	@echo "make up / down       start / stop local Kafka (127.0.0.1:9092) and PostgreSQL (127.0.0.1:55432)"
	@echo "make test            install, up, then the whole test suite against the real stack"
	@echo "make test-unit       unit tests only (no Kafka/PostgreSQL)"
	@echo "make lint            ruff + mypy --strict on libs/ and services/"
	@echo "make bench-backbone  outbox -> Kafka -> idempotent consumer throughput and latency"
	@echo "make demo            run the system with the simulators and print a report"

$(STAMP): requirements-dev.txt libs/pyproject.toml $(wildcard services/*/pyproject.toml)
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

up: install
	bash $(PG) start
	bash $(KAFKA) start
	$(PY) -m backbone.kafka.topics --bootstrap $(KAFKA_BOOTSTRAP_SERVERS)

down:
	-bash $(KAFKA) stop
	-bash $(PG) stop

status:
	-bash $(PG) status
	-bash $(KAFKA) status

topics: install
	$(PY) -m backbone.kafka.topics --bootstrap $(KAFKA_BOOTSTRAP_SERVERS)

test: up
	PG_ADMIN_URL="$$(bash $(PG) url admin)" $(PY) -m pytest $(PYTEST_ARGS)

test-unit: install
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy libs/src $(wildcard services/*/src)

fmt: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: bench-backbone

bench-backbone: up
	PG_ADMIN_URL="$$(bash $(PG) url admin)" $(PY) bench/bench_backbone.py

demo: up
	PG_ADMIN_URL="$$(bash $(PG) url admin)" $(PY) bench/demo.py

schemas-lock: install
	$(PY) -m backbone.avro.lock --write

clean: down
	rm -rf .local/kafka .local/postgres
