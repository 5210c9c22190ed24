# make demo  - compile a small model, dump two runs (one perturbed), compare them
# make test  - the test suite (CPU; GPU tests are marked and skipped)
# make check - ruff, then the quick tier: the tests that compile nothing (about a minute)
# make lint  - ruff (pyproject.toml [tool.ruff]); make test runs it first
#
# Works from nothing: makes .venv, installs torch==2.13.0 only when no torch is
# importable (the GPU machine brings its own), then this package without letting
# dependency resolution touch torch.

PYTHON ?= python3
# pytest-xdist workers for make test (a test file's tests stay in one worker, so the
# compiled models its fixtures share are compiled once)
TEST_JOBS ?= 2
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo test check lint test-slow bench clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	@if $(PY) -c "import torch" 2>/dev/null; then \
		echo "using installed torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	else \
		$(PY) -m pip install -q "$(TORCH_PIN)"; \
	fi
	@# Install the pinned torch first, then everything else with a constraint that
	@# keeps the torch we have: an unpinned torch requirement would pull GBs of CUDA.
	@$(PY) -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt "click>=8" pandas pytest pytest-xdist hypothesis transformers matplotlib "triton==3.6.0" ruff
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $(STAMP)

demo: install
	$(PY) examples/demo.py

PYTEST := $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

test: install lint
	$(PYTEST) -m "not gpu and not slow" tests
	$(PYTEST) -m "slow and not gpu" tests

check: install lint
	$(PYTEST) -m "quick and not gpu" tests

lint: install
	$(VENV)/bin/ruff check aoti_debug tests benchmarks tools examples

test-slow: install
	$(PYTEST) -m "slow and not gpu" tests

bench: install
	$(PY) benchmarks/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info aoti_debug_dump
