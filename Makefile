# The two commands a newcomer needs are `make lab` and `make test`; both set themselves up.
PY := .venv/bin/python
# Where `make grade` reads submissions from, and which assignment it grades.
SUBMISSIONS ?= submissions
ASSIGNMENT ?= 01_naive_attention
# `make lab` opens the course on the CPU tier; `make lab TIER=auto` uses a GPU when there is one.
TIER ?= cpu

.PHONY: setup setup-grade setup-test lab test test-fast release check-release grade doctor bench clean

setup:
	@scripts/setup.sh

setup-grade:
	@scripts/setup.sh --grade

setup-test:
	@scripts/setup.sh --test

# Jupyter refuses to run as root unless told; containers and fresh VMs often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: setup
	COURSE_TIER=$(TIER) $(PY) -m jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=. notebooks/00_orientation/00_orientation.ipynb

test: setup-test
	$(PY) -m pytest -n 2 --durations=15

# Everything but the notebook, grading and browser tests: a quick loop while editing.
test-fast: setup-test
	$(PY) -m pytest -n 2 -m "not slow and not browser"

release: setup
	$(PY) -m autograder release

check-release: setup
	$(PY) -m autograder release --check

grade: setup-grade
	$(PY) -m autograder grade $(SUBMISSIONS) --assignment $(ASSIGNMENT)

doctor: setup
	$(PY) -m course doctor

# Triton track vs PyTorch SDPA on an NVIDIA GPU (writes docs/benchmarks.md); on a CPU, a correctness smoke.
bench: setup
	$(PY) -m course.tools.bench_triton $(BENCH_ARGS)

clean:
	rm -rf build test-output .pytest_cache
