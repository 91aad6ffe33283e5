# Every target does its own set-up: a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The locks (infra/lock.py): every package at an exact version with the hashes of its files,
# resolved by uv for every platform; a new release upstream changes nothing until `make lock`
# is committed. pip refuses an editable install in hash-checking mode, so each install is two
# steps: the third-party packages from a lock with --require-hashes (a file whose hash the lock
# does not hold is refused), then the project itself, editable, fetching nothing
# (--no-deps --no-build-isolation: its build backend, setuptools, came from the lock).
LOCK       := requirements/lock.txt
LOCAL_LOCK := requirements/lock-local.txt
TOOLS_LOCK := requirements/lock-tools.txt
# setuptools reports every editable install of a package-dir layout ("Editable installation.
# Please be careful with folders in your working directory with the same name as your
# package"): an informational notice, not a problem; only that one message is filtered.
PIP    := PYTHONWARNINGS="ignore:Editable installation.:UserWarning" $(BIN)/python -m pip
# pip shows what it collects, downloads and installs (no -q: a first install takes minutes),
# without its "already satisfied" lines; each step ends with its elapsed time.
SHELL  := bash
.SHELLFLAGS := -o pipefail -c
# $(call install,LOCK FILE): that lock's packages, hashes required, then the package (editable).
define install
t=$$(date +%s); $(PIP) install --require-hashes --no-deps --progress-bar on -r $(1) \
	| { grep -v '^Requirement already satisfied' || true; } \
	&& $(PIP) install -q --no-deps --no-build-isolation -e . \
	&& echo "    done in $$(( $$(date +%s) - t ))s"
endef
SUM    := $(shell cat pyproject.toml $(LOCK) $(LOCAL_LOCK) | cksum | cut -d' ' -f1)
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

# The demo needs only the package and the local stack (embedded Postgres, moto). The Postgres
# is the version the stack deploys (reminders/local/postgres_binaries.py), unpacked once.
$(LOCAL): pyproject.toml $(LOCK) $(LOCAL_LOCK)
	@echo "setting up $(VENV): the package and the local stack (about a minute the first time)"
	$(PYTHON) -m venv $(VENV)
	$(call install,$(LOCAL_LOCK))
	$(BIN)/python -m reminders.local.postgres_binaries
	rm -f $(VENV)/.local-*
	touch $(LOCAL)

# Tests, linters, the CDK toolchain, the console's and the benchmark's libraries on top (a few
# minutes the first time): the whole lock.
$(STAMP): $(LOCAL)
	@echo "adding the test, lint and CDK tools to $(VENV) (a few minutes the first time)"
	$(call install,$(LOCK))
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

demo: $(LOCAL) pooler
	$(BIN)/reminders demo

# The delivery console (its web libraries, the `console` extra, come with the lock) on
# http://127.0.0.1:8765/, against the database and queues the command line is configured
# for (the local stack's when `reminders local up` runs).
console: setup pooler
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

# The benchmark's references (PgQueuer, asyncpg) are in the lock with the rest.
bench: setup pooler  ## figures as ratios in one run (docs/BENCHMARKS.md); 4-6 minutes
	$(BIN)/python -m tests.bench.run

# The locks (infra/lock.py), resolved by uv (itself pinned with its hashes in
# requirements/lock-tools.txt): `lock` keeps each current pin that still fits pyproject.toml;
# `lock-upgrade` takes the newest release of everything. Both print what changed; commit
# requirements/ after `make test`.
LOCK_VENV := build/lock-venv

$(LOCK_VENV)/.uv-$(shell cksum < $(TOOLS_LOCK) | cut -d' ' -f1):
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --require-hashes --no-deps -r $(TOOLS_LOCK)
	rm -f $(LOCK_VENV)/.uv-*
	touch $@

lock: $(LOCK_VENV)/.uv-$(shell cksum < $(TOOLS_LOCK) | cut -d' ' -f1)
	$(LOCK_VENV)/bin/python -m infra.lock

lock-upgrade: $(LOCK_VENV)/.uv-$(shell cksum < $(TOOLS_LOCK) | cut -d' ' -f1)
	$(LOCK_VENV)/bin/python -m infra.lock --upgrade

clean:
	rm -rf $(VENV) build cdk.out .reminders
