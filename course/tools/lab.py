"""The learner's lab: the student release in its own folder, served by JupyterLab without nbgrader's
instructor tools.

    python -m course.tools.lab build [--dest DIR]             (re)build the folder, default build/lab/
    python -m course.tools.lab serve [--dest DIR] [ARGS...]   build it, then run `jupyter lab ARGS` there
    python -m course.tools.lab instructor [ARGS...]           the instructor's lab: the repository, nbgrader on

The folder holds what a learner works with and nothing else:

- ``notebooks/NN_name/*.ipynb``: the student notebooks as the release wrote them to ``notebooks/``;
- ``kernels/<track>/*``: the kernel files with every ``BEGIN SOLUTION`` ... ``END SOLUTION`` region
  replaced by the stub the release puts in the notebook cell that shows the file (the same function
  strips both, ``course.solution_regions.clear_solution_regions``);
- ``.course/`` (hidden from JupyterLab's file browser): the record of what the last build wrote, and
  the Jupyter configuration of this lab.

**The learner's work is never overwritten.** A rebuild writes a file only when it is missing or still
byte for byte what the previous build wrote there (``.course/manifest.json`` keeps a hash of each).
A file the learner changed stays as it is; when the course's version of it changed meanwhile, the
build says so and how to get the new one (move yours aside, build again). Nothing is ever deleted.

**nbgrader is off in this lab.** Its server extensions (formgrader, course list, assignment list,
validate) are switched off in ``.course/jupyter/jupyter_server_config.json`` and its JupyterLab
plugins (the Nbgrader menu, Formgrader, Create Assignment, Assignment List, Course List, the Validate
button) in ``.course/jupyter/labconfig/page_config.json``, both read through ``JUPYTER_CONFIG_PATH``
only by the server that ``serve`` starts. Nothing is uninstalled: ``make lab-instructor`` serves the
repository with all of it on. The assignment list and Validate stay off too: the first needs an
nbgrader exchange that a self-paced learner does not have, and the second judges with nbgrader's
defaults rather than the course's grading settings (any stderr output fails a test cell, where the
grader ignores warnings), so it could call a correct answer wrong. The test cells' ``course.check``
is the learner's feedback.

**No news pop-up.** JupyterLab's announcements plugin asks, in a notification that stays until answered,
whether to fetch official Jupyter news; it sits over the lower right of the notebook, where the widgets'
plots are. Both labs switch the plugin off in their ``page_config.json`` (``ANNOUNCEMENTS_PLUGIN``): no
question, no news fetched, no update check. ``python -m course.tools.lab instructor`` (``make
lab-instructor``) serves the repository with nbgrader on and only that plugin off, from
``build/lab-instructor/jupyter``.

The notebooks import ``course`` from the virtual environment (an editable install of this
repository), so they run the same here as in ``notebooks/``, and ``course.paths.REPO`` still points at
the repository (the hints and reveals read its solutions). ``.course/manifest.json`` marks the folder
as a lab (``course.paths.LAB_MARKER``): ``python -m course run`` in it checks the lab's kernel files,
the ones the learner edits, and so does a course installed with ``pip install .`` (no clone), where the
lab is the only course folder there is.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course.paths import CHECKOUT, LAB_MARKER, REPO
from course.solution_regions import (CODE_STUBS, LEAK_MARKERS, SolutionRegionError, clear_solution_regions,
                                     file_language, has_solution_region)

__all__ = ["DEFAULT_DEST", "INSTRUCTOR_CONFIG", "NBGRADER_SERVER_EXTENSIONS", "NBGRADER_LAB_EXTENSION",
           "ANNOUNCEMENTS_PLUGIN", "LabBuildError", "BuildReport", "release_files", "build", "config_dir",
           "lab_environment", "lab_command", "write_instructor_config", "instructor_command", "main"]

# The lab is built from the clone the package belongs to (an installed package has no notebooks or kernels).
_SOURCE = CHECKOUT or REPO
DEFAULT_DEST = _SOURCE / "build" / "lab"
NOTEBOOKS = _SOURCE / "notebooks"
KERNELS = _SOURCE / "kernels"
FIRST_NOTEBOOK = "notebooks/00_orientation/00_orientation.ipynb"

# Everything nbgrader adds to Jupyter, on the server and in the page.
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.validate_assignment",
)
# Disabling the package disables every plugin in it, including any a later nbgrader adds.
NBGRADER_LAB_EXTENSION = "@jupyter/nbgrader"
# JupyterLab's news and update check: its "get notified about official Jupyter news?" notification covers the
# lower right of the notebook (the widgets' plots) until answered. Off in both labs.
ANNOUNCEMENTS_PLUGIN = "@jupyterlab/apputils-extension:announcements"
# The instructor's lab reads its page configuration from here (it serves the repository itself).
INSTRUCTOR_CONFIG = _SOURCE / "build" / "lab-instructor" / "jupyter"

_STATE = LAB_MARKER.parent.name
_MANIFEST = LAB_MARKER.name
_SKIPPED_DIRS = {"__pycache__", ".ipynb_checkpoints"}


class LabBuildError(Exception):
    """The learner's lab cannot be built without shipping something it must not; the message says what."""


@dataclass
class BuildReport:
    """What a build did, by path relative to the lab folder."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # changed by the learner, left alone
    outdated: list[str] = field(default_factory=list)  # kept, and the course has a newer version

    def lines(self) -> list[str]:
        out = [f"{len(self.created)} files created, {len(self.updated)} updated, "
               f"{len(self.unchanged)} already up to date, {len(self.kept)} changed by you and kept"]
        out += [f"  kept your {path}: the course's version changed since; to get it, move yours aside and "
                f"run `make lab` again" for path in self.outdated]
        return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _visible_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not _SKIPPED_DIRS.intersection(p.relative_to(folder).parts)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _stripped_kernel(path: Path) -> bytes:
    text = path.read_text(encoding="utf-8")
    shown = path.relative_to(_SOURCE) if path.is_relative_to(_SOURCE) else path
    if not has_solution_region(text):
        return text.encode("utf-8")
    language = file_language(path.name)
    if language is None:
        raise LabBuildError(f"{shown} has a solution region, but the course has no stub for '{path.suffix}' files; "
                            f"add the language to EXTENSION_LANGUAGES in course/solution_regions.py.")
    try:
        return clear_solution_regions(text, CODE_STUBS[language]).encode("utf-8")
    except SolutionRegionError as exc:
        raise LabBuildError(f"{shown}: {exc} (every BEGIN SOLUTION needs its own END SOLUTION).") from None


def release_files(notebooks: Path = NOTEBOOKS, kernels: Path = KERNELS) -> dict[str, bytes]:
    """The learner's files, ``{path in the lab: contents}``: student notebooks and stripped kernels.

    Raises :class:`LabBuildError` if any of them still holds a solution or hidden-test marker.
    """
    files: dict[str, bytes] = {}
    for path in sorted(Path(notebooks).glob("*/*.ipynb")):
        if not path.parent.name.startswith((".", "_")):
            files[f"notebooks/{path.parent.name}/{path.name}"] = path.read_bytes()
    for path in _visible_files(Path(kernels)):
        files[f"kernels/{path.relative_to(kernels).as_posix()}"] = _stripped_kernel(path)
    markers = LEAK_MARKERS
    for name, data in files.items():
        found = [m for m in markers if m.encode() in data]
        if found:
            raise LabBuildError(f"{name} would reach the learner with '{found[0]}' in it; "
                                f"run `make release` (notebooks) or fix the region's markers (kernels).")
    return files


def _write(path: Path, data: bytes) -> None:
    """Write through a temporary file, so an interrupted build never leaves half a notebook."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _read_manifest(path: Path) -> dict[str, str]:
    try:
        files = json.loads(path.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}  # without a record every differing file counts as the learner's: nothing is lost
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def config_dir(dest: Path = DEFAULT_DEST) -> Path:
    """The Jupyter configuration folder of the lab in ``dest`` (for ``JUPYTER_CONFIG_PATH``)."""
    return Path(dest) / _STATE / "jupyter"


def _write_config(dest: Path) -> None:
    folder = config_dir(dest)
    server = {"ServerApp": {"jpserver_extensions": {name: False for name in NBGRADER_SERVER_EXTENSIONS}}}
    # Locked as well, so JupyterLab's plugin manager cannot switch them back on in this lab.
    page = {"disabledExtensions": {NBGRADER_LAB_EXTENSION: True, ANNOUNCEMENTS_PLUGIN: True},
            "lockedExtensions": {NBGRADER_LAB_EXTENSION: True}}
    _write(folder / "jupyter_server_config.json", (json.dumps(server, indent=2) + "\n").encode())
    _write(folder / "labconfig" / "page_config.json", (json.dumps(page, indent=2) + "\n").encode())


def build(dest: Path = DEFAULT_DEST, notebooks: Path = NOTEBOOKS, kernels: Path = KERNELS) -> BuildReport:
    """Bring the lab in ``dest`` up to date without touching a file the learner changed."""
    dest = Path(dest)
    if not Path(notebooks).is_dir() or not Path(kernels).is_dir():
        raise LabBuildError(f"there are no notebooks and kernels to build a lab from here ({notebooks} and {kernels}); "
                            f"the lab is built from a clone of the course (`make lab` in it).")
    if (Path(kernels).parent / LAB_MARKER).is_file():
        raise LabBuildError(f"{Path(kernels).parent} is a learner's lab, not a clone of the course; a lab is built from "
                            f"a clone (`make lab` in it).")
    files = release_files(notebooks, kernels)  # all checks first: a refused build writes nothing
    manifest_path = dest / _STATE / _MANIFEST
    written = _read_manifest(manifest_path)
    report = BuildReport()
    for name, data in files.items():
        target = dest / name
        fresh = _digest(data)
        if target.is_symlink() or (target.exists() and not target.is_file()):
            report.kept.append(name)  # something of the learner's own stands there
            continue
        if not target.exists():
            _write(target, data)
            report.created.append(name)
        else:
            current = _digest(target.read_bytes())
            if current == fresh:
                report.unchanged.append(name)
            elif current == written.get(name):
                _write(target, data)  # still what the last build wrote: the learner never changed it
                report.updated.append(name)
            else:
                report.kept.append(name)
                if written.get(name, fresh) != fresh:
                    report.outdated.append(name)
                continue  # the record keeps the last version written, so a later revert is seen as such
        written[name] = fresh
    _write(manifest_path, (json.dumps({"files": dict(sorted(written.items()))}, indent=1) + "\n").encode())
    _write_config(dest)
    return report


def write_instructor_config(folder: Path = INSTRUCTOR_CONFIG) -> Path:
    """The instructor's lab's Jupyter configuration in ``folder``: nbgrader stays on, the news pop-up is off."""
    page = {"disabledExtensions": {ANNOUNCEMENTS_PLUGIN: True}}
    _write(Path(folder) / "labconfig" / "page_config.json", (json.dumps(page, indent=2) + "\n").encode())
    return Path(folder)


def _with_config_path(folder: Path, environ: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    paths = [str(Path(folder).resolve())]
    if env.get("JUPYTER_CONFIG_PATH"):
        paths.append(env["JUPYTER_CONFIG_PATH"])
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return env


def lab_environment(dest: Path = DEFAULT_DEST, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) with the lab's configuration first on ``JUPYTER_CONFIG_PATH``."""
    return _with_config_path(config_dir(dest), environ)


def lab_command(dest: Path = DEFAULT_DEST, extra: list[str] | None = None) -> list[str]:
    """The ``jupyter lab`` command line that serves ``dest``, opening the first lesson."""
    dest = Path(dest).resolve()
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={dest}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and fresh VMs often run as root
    extra = list(extra or [])
    cmd += extra
    if (dest / FIRST_NOTEBOOK).is_file() and not any(not a.startswith("-") for a in extra):
        cmd.append(str(dest / FIRST_NOTEBOOK))  # unless the caller named what to open
    return cmd


def instructor_command(extra: list[str] | None = None) -> list[str]:
    """The ``jupyter lab`` command line of the instructor's lab: the repository, opening the first lesson."""
    return lab_command(_SOURCE, extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.tools.lab",
                                     description="Build and serve the learner's lab (the student release, "
                                                 "nbgrader's instructor tools off).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("build", "build or refresh the lab folder, keeping every file you changed"),
                       ("serve", "build, then start JupyterLab in the lab folder (other arguments go to jupyter lab)")):
        command = sub.add_parser(name, help=text, allow_abbrev=False)  # `--de...` may be meant for jupyter
        command.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="the lab folder (default: build/lab)")
    sub.add_parser("instructor", help="start JupyterLab on the repository with nbgrader's tools (other arguments go to "
                                      "jupyter lab)", allow_abbrev=False)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "build":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "instructor":
        cmd = instructor_command(extra)
        env = _with_config_path(write_instructor_config(), None)
        sys.stdout.flush()
        os.execve(cmd[0], cmd, env)
        return 0  # not reached
    try:
        report = build(args.dest)
    except LabBuildError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    for line in report.lines():
        print(f"lab: {line}")
    if args.command == "build":
        return 0
    cmd = lab_command(args.dest, extra)
    sys.stdout.flush()
    os.execve(cmd[0], cmd, lab_environment(args.dest))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
