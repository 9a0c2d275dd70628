# The two commands a newcomer needs are `make lab` and `make test`; both set themselves up.
PY := .venv/bin/python
# Where `make grade` reads submissions from, and which assignment it grades.
SUBMISSIONS ?= submissions
ASSIGNMENT ?= 01_naive_attention
# `make lab` opens the course on the CPU tier; `make lab TIER=auto` uses a GPU when there is one.
TIER ?= cpu

.PHONY: setup setup-grade setup-test lab lab-instructor hub test test-fast test-gpu release check-release grade doctor bench slides clean

setup:
	@scripts/setup.sh

setup-grade:
	@scripts/setup.sh --grade

setup-test:
	@scripts/setup.sh --test

# The learner's lab: build/lab/ holds the student notebooks and the kernels without their solutions,
# nbgrader's instructor tools are off, and a rebuild never overwrites a file the learner changed.
lab: setup
	COURSE_TIER=$(TIER) $(PY) -m course.tools.lab serve

# The instructor's lab: the whole repository (solutions/ included), nbgrader's tools on, JupyterLab's news off.
lab-instructor: setup
	COURSE_TIER=$(TIER) $(PY) -m course.tools.lab instructor

# A class on JupyterHub on this machine, at http://127.0.0.1:8000 (users: hub/users.toml; docs/grading.md, "A class
# on JupyterHub"): students fetch and submit from the Assignments tab, the instructor grades with the course's grader.
hub:
	@scripts/setup.sh --hub
	COURSE_TIER=$(TIER) $(PY) -m autograder.hub serve

test: setup-test
	$(PY) -m pytest -n 2 --dist worksteal --durations=15

# The GPU suite, on a machine with an NVIDIA GPU (docs/gpu.md): the Triton track compiled for the GPU, the CUDA C
# launchers, the benchmark's GPU path and the solution notebooks of lessons 00-08, COURSE_TIER=auto. Without a GPU it
# says so and fails. Offline, with the packages already importable: make -o setup-test test-gpu PY=python3
GPU_JOBS ?= 8
test-gpu: setup-test
	@$(PY) -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || { \
		echo "make test-gpu: $(PY) sees no NVIDIA GPU (torch.cuda.is_available() is false, or torch is missing), so there is no GPU suite to run here; make test runs the CPU suite." >&2; exit 3; }
	COURSE_TEST_TIER=gpu $(PY) -m pytest -m gpu -n $(GPU_JOBS) --dist worksteal --durations=20

# Everything but the notebook, grading and browser tests: a quick loop while editing.
test-fast: setup-test
	$(PY) -m pytest -n 2 -m "not slow and not browser"

release: setup
	$(PY) -m autograder release

check-release: setup
	$(PY) -m autograder release --check

# `make grade CLUSTER=tcp://host:8786` (or CLUSTER=local:4) grades on a Dask cluster; Dask is installed when missing.
grade: setup-grade
	$(if $(CLUSTER),@$(PY) -c 'import distributed' 2>/dev/null || $(PY) -m pip install --quiet --disable-pip-version-check -e '.[cluster]')
	$(PY) -m autograder grade $(SUBMISSIONS) --assignment $(ASSIGNMENT)$(if $(CLUSTER), --cluster $(CLUSTER))

doctor: setup
	$(PY) -m course doctor

# Triton track vs PyTorch SDPA on an NVIDIA GPU (writes docs/benchmarks.md); on a CPU, a correctness smoke.
bench: setup
	$(PY) -m course.tools.bench_triton $(BENCH_ARGS)

# Instructor code-tour decks, generated from the live kernels and notebooks into build/slides/ (one per lesson,
# one per track), with PDFs where Chromium is installed. `make slides SLIDES=tour_metal` builds one deck.
slides:
	@scripts/setup.sh --slides
	$(PY) -m course.slides $(SLIDES)

# build/lab/ holds a learner's work, so clean leaves it alone (delete it by hand to start over).
clean:
	[ ! -d build ] || find build -mindepth 1 -maxdepth 1 ! -name lab -exec rm -rf {} +
	rm -rf test-output .pytest_cache
