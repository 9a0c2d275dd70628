#!/usr/bin/env bash
# Sets up everything the course needs in ./.venv, idempotently.
#   scripts/setup.sh            the course (JupyterLab, nbgrader, Triton, PyTorch)
#   scripts/setup.sh --grade    the same plus bubblewrap, the sandbox submissions are graded in
#   scripts/setup.sh --test     all of that plus the test tools, Debian's Chromium for the browser test, and
#                               .venv-triton-low: this .venv's packages with the lowest supported Triton instead
#                               (tests/tools/test_triton_lowest.py runs the Triton track's tests there)
#   scripts/setup.sh --slides   the course plus Playwright, which prints the slides' PDFs with a Chromium if one is installed
#   scripts/setup.sh --hub      the --grade setup plus JupyterHub and its proxy (configurable-http-proxy, from npm, into
#                               .venv/node_modules), for a class on a hub (`make hub`); --test installs them too
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_grade=0
want_slides=0
want_hub=0
case "${1:-}" in
    --test) want_test=1; want_hub=1 ;;
    --grade) want_grade=1 ;;
    --hub) want_grade=1; want_hub=1 ;;
    --slides) want_slides=1 ;;
    "") ;;
    *) echo "setup: unknown option ${1}; use --grade, --hub, --test or --slides" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "setup: the course needs Python 3.10 or newer (found: $("$PYTHON" --version 2>&1))." >&2
    exit 1
fi

# A PyTorch that $PYTHON already has (a GPU machine's image, a Colab-style notebook server) is used as
# it is, with the Triton it came with: the venv then sees $PYTHON's packages after its own. For a system
# Python that is --system-site-packages; when $PYTHON is itself a virtual environment (whose packages
# --system-site-packages would not reach) a .pth file adds its site-packages.
if [ ! -x .venv/bin/python ]; then
    if "$PYTHON" -c 'import torch' 2>/dev/null; then
        echo "setup: creating .venv on top of $PYTHON's packages, to use its" \
             "$("$PYTHON" -c 'import torch; print("torch", torch.__version__)')"
        if "$PYTHON" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
            "$PYTHON" -m venv .venv && {
                base_sites=$("$PYTHON" -c 'import site; print(repr(site.getsitepackages()))')
                echo "import site; list(map(site.addsitedir, $base_sites))" \
                    > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-course-base.pth"
            }
        else
            "$PYTHON" -m venv --system-site-packages .venv
        fi
    else
        echo "setup: creating .venv"
        "$PYTHON" -m venv .venv
    fi || { rm -rf .venv; echo "setup: 'python3 -m venv' failed; on Debian/Ubuntu install python3-venv first." >&2; exit 1; }
fi
PY=.venv/bin/python

# Without a PyTorch, the pair the course is tested with (on Linux, the Triton that goes with it; on a
# CUDA machine the same pins resolve to the CUDA build). An installed torch and its Triton are left alone.
if ! $PY -c 'import torch' 2>/dev/null; then
    pair="torch==2.13.0"
    [ "$(uname -s)" = Linux ] && ! $PY -c 'import triton' 2>/dev/null && pair="$pair triton==3.9.0"
    echo "setup: installing $pair"
    $PY -m pip install --quiet --disable-pip-version-check $pair
fi

# Re-install the course only when its dependency list changed.
extras=""
[ $want_test = 1 ] && extras="[dev]"
[ $want_test = 0 ] && [ $want_hub = 1 ] && extras="[hub]"
stamp=".venv/.course-installed${extras}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing the course package${extras:+ with test tools}"
    $PY -m pip install --quiet --disable-pip-version-check -e ".${extras}"
    touch "$stamp"
fi

# Triton 3.6's interpreter (the CPU tier) turns 1-element NumPy arrays into ints, which NumPy 2.4 refuses
# (fixed from Triton 3.7 on): with such a Triton, a NumPy older than 2.4.
numpy_for_triton='import sys, numpy, triton; v = lambda s: tuple(int(x) for x in s.split(".")[:2]); sys.exit(v(triton.__version__) < (3, 7) and v(numpy.__version__) >= (2, 4))'
if $PY -c 'import triton' 2>/dev/null && ! $PY -c "$numpy_for_triton" 2>/dev/null; then
    echo "setup: installing numpy<2.4 (Triton $($PY -c 'import triton; print(triton.__version__)')'s interpreter needs it)"
    $PY -m pip install --quiet --disable-pip-version-check "numpy>=1.26,<2.4"
fi

# The lowest Triton the course supports, for its tests: .venv-triton-low has its own Triton (and a NumPy
# that Triton's interpreter works with) and takes everything else, torch and the course included, from .venv.
if [ $want_test = 1 ] && [ "$(uname -s)" = Linux ]; then
    lowest=$($PY -c 'import re, tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(next(re.match(r"triton>=([\d.]+)", d).group(1) for d in deps if d.startswith("triton>=")))')
    low=.venv-triton-low
    site=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    system=$(sed -n 's/^include-system-site-packages *= *//p' .venv/pyvenv.cfg)
    want="triton==$lowest.* numpy>=1.26,<2.4 on $site (system site-packages: $system)"
    # (.venv's own .pth files, a zz-course-base.pth among them, are read by addsitedir below: its base comes along.)
    if [ "$(cat $low/.course-low 2>/dev/null)" != "$want" ]; then
        echo "setup: preparing $low (Triton $lowest, for the tests of the lowest supported Triton)"
        rm -rf $low
        $PY -m venv $([ "$system" = true ] && echo --system-site-packages) $low
        $low/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "triton==$lowest.*" "numpy>=1.26,<2.4"
        # After the install: pip must not see .venv's Triton and NumPy as this environment's to replace.
        low_site=$($low/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "import site; site.addsitedir('$site')" > "$low_site/zz-course-venv.pth"
        echo "$want" > $low/.course-low
    fi
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
# Chromium (the browser test drives it through Playwright; Playwright's own browser download is not used)
# and clang (the compiler test builds every kernel with clang++ as well as g++); for --hub and --test, Node.js and
# npm (JupyterHub's proxy is an npm package).
packages=""
command -v g++ >/dev/null 2>&1 || packages="g++"
command -v addr2line >/dev/null 2>&1 || packages="$packages binutils"
if [ $want_test = 1 ] || [ $want_grade = 1 ]; then
    command -v bwrap >/dev/null 2>&1 || packages="$packages bubblewrap"
fi
[ $want_test = 1 ] && ! command -v chromium >/dev/null 2>&1 && packages="$packages chromium"
[ $want_test = 1 ] && ! command -v clang++ >/dev/null 2>&1 && packages="$packages clang"
[ $want_hub = 1 ] && ! command -v npm >/dev/null 2>&1 && packages="$packages nodejs npm"
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
# JupyterHub's proxy, for `make hub` and the hub's test: configurable-http-proxy from npm, into .venv/node_modules
# (never a global install), after the system packages (Node.js and npm among them).
chp="configurable-http-proxy@4.6.3"
if [ $want_hub = 1 ] && [ "$(cat .venv/node_modules/.course-proxy 2>/dev/null)" != "$chp" ]; then
    if command -v npm >/dev/null 2>&1; then
        echo "setup: installing $chp (JupyterHub's proxy) into .venv/node_modules"
        npm install --prefix .venv --no-save --no-audit --no-fund --silent "$chp" </dev/null
        echo "$chp" > .venv/node_modules/.course-proxy
    else
        echo "setup: no npm here; JupyterHub's proxy ($chp) needs Node.js and npm (Debian: apt-get install nodejs npm)," \
             "so \`make hub\` cannot start and the hub's test is skipped." >&2
    fi
fi

echo "setup: ready ($($PY -c 'import torch, sys; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")'))"
