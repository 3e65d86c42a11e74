# The README's two commands (and `make docs`). Each installs into a local virtual environment first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: help serve test test-fast soak install clean cluster docs ssh-cluster slurm-cluster

.DEFAULT_GOAL := install

# `make help`: what each target does and the settings it reads (NAME=value after the target)
help:
	@echo "make serve [ARGS='--port 9090 ...']  a portal on 127.0.0.1:8080 (cddlm portal serve ARGS)"
	@echo "make test [ARGS='tests/web -x'] [WORKERS=4]  the tests (pytest ARGS), in parallel workers, then a serial part"
	@echo "make test-fast [ARGS=...]            unit and component tests only (the edit-test loop)"
	@echo "make soak [EXAMPLES=500]             the property tests at length"
	@echo "make cluster [FRONT_PORT=8080] [STATE=/tmp/cddlm-cluster] [HOST_PORT=18481]"
	@echo "                                     three host portals on 127.0.0.2-4 (ports HOST_PORT to HOST_PORT+2)"
	@echo "                                     and a front portal on 127.0.0.1:FRONT_PORT, their state (and"
	@echo "                                     agents.toml) under STATE; Ctrl-C stops them all; point the CLI"
	@echo "                                     at another FRONT_PORT with --portal or \$$CDDLM_PORTAL"
	@echo "make ssh-cluster | slurm-cluster [FRONT_PORT=8080]   the same over SSH or Slurm (root)"
	@echo "make docs                            the reference in site/"
	@echo "make clean                           remove .venv, cddlm-state, site"

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

serve: install
	$(BIN)/cddlm portal serve $(ARGS)

# the suite in two parts: the tests that may share the machine in WORKERS parallel workers
# (pytest-xdist), then those marked serial (tests/conftest.py says which, and why) one at a time
# in each of two lanes (the tests of namespaced test hosts beside the others: HOSTS_LANE there);
# it fails when either part does (pytest's 5, nothing selected, as when ARGS picks tests of one
# part only, is no failure)
WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
PYTEST := $(BIN)/python -m pytest
define two_parts
	@rc=0; for part in "-n $(WORKERS) -m 'not serial and not slow'" "-n 2 --lanes -m 'serial or slow'"; do \
		eval $(PYTEST) $$part $(1) || { r=$$?; [ $$r = 5 ] || rc=$$r; [ $$r = 2 ] && exit 2; }; \
	done; exit $$rc
endef

test: install
	$(call two_parts,$(ARGS))

# the edit-test loop: unit and component tests (pure cores, the SOAP conversations on the
# in-process portal, the store), in parallel, in under 3 minutes
FAST := tests/unit tests/lang tests/placement tests/schemas tests/notify/test_topics.py \
	tests/notify/test_messages.py tests/notify/test_outbox.py tests/notify/test_senders.py \
	tests/test_conversations.py tests/test_layering.py tests/test_store.py tests/test_direct_reads.py \
	tests/test_api_schema.py tests/test_listings.py tests/web/test_api.py tests/web/test_units.py \
	tests/cli/test_units.py
test-fast: install
	$(PYTEST) -n $(WORKERS) -m "not serial and not slow" $(FAST) $(ARGS)

# the property tests at length: random seeds, EXAMPLES examples per test (ARGS="--hypothesis-seed=N"
# replays one run)
EXAMPLES ?= 500
soak: install
	CDDLM_HYPOTHESIS_PROFILE=soak CDDLM_SOAK_EXAMPLES=$(EXAMPLES) $(BIN)/python -m pytest tests/property -p no:cacheprovider $(ARGS)

# three host portals on 127.0.0.2-4 (ports $HOST_PORT, 18481, to +2) and a front portal on
# 127.0.0.1:$FRONT_PORT (8080) delegating to them, their state under $STATE (/tmp/cddlm-cluster)
# (docs/multihost.md)
cluster: install
	examples/multihost/cluster.sh

# SSH hosts (an sshd per network namespace, nothing of ours on them) and a portal on
# 127.0.0.1:8080 ($FRONT_PORT) deploying onto them over SSH (docs/engines.md; needs root)
ssh-cluster: install
	$(BIN)/python -m tests.engines.sshd $(ARGS)

# a Slurm cluster (slurmctld here, a slurmd per network namespace) and a portal on 127.0.0.1:8080
# ($FRONT_PORT) with --datacenter slurm: deploying onto it as batch jobs (docs/engines.md; root)
slurm-cluster: install
	$(BIN)/python -m tests.engines.slurm_cluster $(ARGS)

# the reference in docs/, as a site in site/ (a warning, such as a broken link, fails it)
docs: install
	$(BIN)/mkdocs build --strict --quiet
	@echo "the docs are in site/ (open site/index.html)"

clean:
	rm -rf $(VENV) cddlm-state .pytest_cache site
