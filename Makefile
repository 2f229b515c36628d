# deploytool: the README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BASE_IMAGE ?= deploytool/base:bookworm

.PHONY: demo test gpu-image setup checkov test-tools engine base-image docs check-docs clean

# The virtual environment, with deploytool installed from this tree.
$(BIN)/deploytool: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,k8s]'
	@# an editable install writes no bytecode, and where PYTHONDONTWRITEBYTECODE is set no start
	@# writes it either: every command would compile deploytool again (about 0.05 s a start)
	$(BIN)/python -m compileall -q src/deploytool >/dev/null
	touch $@

setup: $(BIN)/deploytool

# checkov for tests/test_checkov.py (which skips, saying so, without it), in a virtual environment
# of its own inside .venv: its pins conflict with deploytool's (docs/security.md).
checkov: $(VENV)/checkov/bin/checkov
$(VENV)/checkov/bin/checkov:
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install --quiet checkov==3.3.30

# The host programs some tests drive (each skips, saying so, without its program): Chromium (the
# reports and the monitor's pages), nginx (the gateway a rollout drains through), tmux (`top` in a
# terminal), Prometheus and promtool (monitor). Debian packages, so root and apt: `make test`
# installs the missing ones where it can, as it does the engine, and names any still missing.
test-tools:
	@scripts/test-tools.sh install

engine:
	@scripts/ensure-engine.sh

base-image: engine
	@scripts/make-base-image.sh $(BASE_IMAGE)

# The whole lifecycle on the embedded default (the reference runtime): no GPU needed.
demo: setup base-image
	@PATH="$(CURDIR)/$(BIN):$$PATH" scripts/demo.sh

# The test suite. Integration tests use a real Docker engine when one can be had here (and
# skip, saying why, when not); everything else runs anywhere. TEST_WORKERS processes (pytest-xdist):
# five, on two cores: most of a docker test is waiting on a container or a health check, and
# five keep both cores busy (measured: 95% busy at five, 86% at four, where the suite took 14%
# longer; six would only queue for the cores and crowd the timing-sensitive tests); the longest units first (tests/run_plan.py); TEST_WORKERS=0 runs everything in this process.
# Before it starts, scripts/test-notice.sh says what on this host could interfere (a release of
# deploytool already serving, a busy default port) and how the suite avoids it; it goes on.
# PYTEST_ARGS goes to pytest as it is (e.g. `--randomly-seed=N` to repeat an order, `-k NAME`).
# The suite starts hundreds of Python processes on the same sources (each worker collects every
# test module; every `deploytool` command and reference runtime is a process of its own), so it
# keeps bytecode caches even where PYTHONDONTWRITEBYTECODE is set: without them each process
# compiles deploytool again and each worker rewrites every test module (collection alone took
# 13 to 15 s of CPU a process without, 4.5 s with, measured on the two-core development machine).
TEST_WORKERS ?= 5
PYTEST_ARGS ?=
# On a new machine the engine and base image (debootstrap), the host programs some tests drive,
# checkov and the virtual environment (pip) are each about a minute, and need nothing of each
# other: they are made side by side. The host programs wait for the engine's install, since two
# apt-gets cannot hold the package lock at once. TEST_TOOLS=0 installs none of them (the tests
# that need one skip, saying so).
TEST_TOOLS ?= 1
test:
	@{ scripts/ensure-engine.sh --optional; \
	  if [ "$(TEST_TOOLS)" != 0 ]; then { scripts/test-tools.sh install --optional; } & fi; \
	  if docker info >/dev/null 2>&1; then scripts/make-base-image.sh $(BASE_IMAGE) \
	  || echo "no base image: the integration tests will skip, saying why"; fi; wait; } & images=$$!; \
	if [ "$(TEST_TOOLS)" != 0 ]; then { $(MAKE) --no-print-directory checkov >/dev/null 2>&1 \
	  || echo "no checkov: tests/test_checkov.py will skip, saying why"; } & fi; \
	$(MAKE) --no-print-directory setup; venv=$$?; wait; [ $$venv = 0 ]
	@scripts/test-notice.sh $(BIN)/python
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The real GPU image of the RTX 5090 profile on the registry-free wheels base, built and proven
# without a GPU (tests/test_gpu_image.py): ~4.8 GB of locked wheels, kept in deploytool's cache
# (or DEPLOYTOOL_GPU_WHEELHOUSE=DIR), a 12.4 GB image. Niced: it shares the machine.
gpu-image: setup base-image
	DEPLOYTOOL_GPU_IMAGE=1 nice -n 19 ionice -c3 $(BIN)/python -m pytest -m gpu_image tests/test_gpu_image.py -v

docs: setup
	$(BIN)/python scripts/gen_cli_docs.py > docs/cli.md
	$(BIN)/python scripts/gen_profile_docs.py > docs/profile-fields.md

clean:
	rm -rf $(VENV) .pytest_cache reports
