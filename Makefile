# The README's two commands (and `make docs`). Each installs into a local virtual environment first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: serve test soak install clean cluster docs ssh-cluster slurm-cluster

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

serve: install
	$(BIN)/cddlm portal serve $(ARGS)

test: install
	$(BIN)/python -m pytest $(ARGS)

# the property tests at length: random seeds, EXAMPLES examples per test (ARGS="--hypothesis-seed=N"
# replays one run)
EXAMPLES ?= 500
soak: install
	CDDLM_HYPOTHESIS_PROFILE=soak CDDLM_SOAK_EXAMPLES=$(EXAMPLES) $(BIN)/python -m pytest tests/property -p no:cacheprovider $(ARGS)

# three host portals on 127.0.0.2-4 and a front portal delegating to them (docs/multihost.md)
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
