# Every target does its own set-up: a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup demo test lint typecheck bench synth layer clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,infra]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/reminders demo

test: setup lint
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy shared functions infra

clean:
	rm -rf $(VENV) build cdk.out .reminders
