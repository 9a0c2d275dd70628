#!/usr/bin/env bash
# Sets up everything the course needs in ./.venv, idempotently.
#   scripts/setup.sh            the course (JupyterLab, nbgrader, Triton, PyTorch)
#   scripts/setup.sh --grade    the same plus bubblewrap, the sandbox submissions are graded in
#   scripts/setup.sh --test     all of that plus the test tools and Debian's Chromium for the browser test
#   scripts/setup.sh --slides   the course plus Playwright, which prints the slides' PDFs with a Chromium if one is installed
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_grade=0
want_slides=0
case "${1:-}" in
    --test) want_test=1 ;;
    --grade) want_grade=1 ;;
    --slides) want_slides=1 ;;
    "") ;;
    *) echo "setup: unknown option ${1}; use --grade, --test or --slides" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "setup: the course needs Python 3.10 or newer (found: $("$PYTHON" --version 2>&1))." >&2
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PYTHON" -m venv .venv || {
        echo "setup: 'python3 -m venv' failed; on Debian/Ubuntu install python3-venv first." >&2; exit 1; }
fi
PY=.venv/bin/python

# PyTorch first, pinned to the version the course is tested with. On a CUDA machine the same
# pin resolves to the CUDA build; an already installed torch is left alone.
if ! $PY -c 'import torch' 2>/dev/null; then
    echo "setup: installing PyTorch 2.13.0"
    $PY -m pip install --quiet "torch==2.13.0"
fi

# Re-install the course only when its dependency list changed.
extras=""
[ $want_test = 1 ] && extras="[dev]"
stamp=".venv/.course-installed${extras}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing the course package${extras:+ with test tools}"
    $PY -m pip install --quiet --disable-pip-version-check -e ".${extras}"
    touch "$stamp"
fi

# The slides' PDFs need the playwright package (the version the test tools pin); Chromium is not installed for them.
if [ $want_slides = 1 ] && ! $PY -c 'import playwright' 2>/dev/null; then
    spec=$($PY -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"] if d.startswith("playwright")))')
    echo "setup: installing $spec (prints the slides' PDFs)"
    $PY -m pip install --quiet --disable-pip-version-check "$spec"
fi

# System packages, only those missing and only for who needs them: g++ and binutils for everyone
# (the CPU runtime compiles CUDA C and Metal kernels with g++; addr2line names their source lines),
# bubblewrap for grading (the sandbox of `python -m autograder grade`), and for --test also Debian's
# Chromium (the browser test drives it through Playwright; Playwright's own browser download is not used).
packages=""
command -v g++ >/dev/null 2>&1 || packages="g++"
command -v addr2line >/dev/null 2>&1 || packages="$packages binutils"
if [ $want_test = 1 ] || [ $want_grade = 1 ]; then
    command -v bwrap >/dev/null 2>&1 || packages="$packages bubblewrap"
fi
[ $want_test = 1 ] && ! command -v chromium >/dev/null 2>&1 && packages="$packages chromium"
packages=${packages# }
if [ -n "$packages" ]; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing $packages (Debian packages)"
        SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $packages >/dev/null
    else
        echo "setup: no apt-get here; install $packages yourself (without g++, CUDA C and Metal kernels cannot run on the CPU; without bubblewrap, grading needs" \
             "--no-sandbox; without chromium, the browser test is skipped)." >&2
    fi
fi
echo "setup: ready ($($PY -c 'import torch, sys; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")'))"
