"""A class on JupyterHub on this machine: students fetch and submit through nbgrader's exchange, the instructor
releases, collects, grades with the course's grader and returns feedback.

    python -m autograder.hub serve [--port 8000] [--state build/hub] [--users hub/users.toml]
    python -m autograder.hub release ASSIGNMENT    (the instructor, in a terminal of their hub server)
    python -m autograder.hub collect ASSIGNMENT
    python -m autograder.hub grade ASSIGNMENT [--jobs N]
    python -m autograder.hub feedback ASSIGNMENT

``serve`` starts JupyterHub (``hub/jupyterhub_config.py``) with its proxy, configurable-http-proxy, which
``scripts/setup.sh --hub`` installs from npm into ``.venv/node_modules``. Users come from ``hub/users.toml``.
Every user's server runs as this machine's user (JupyterHub's ``SimpleLocalProcessSpawner``), in a home of its
own under ``<state>/home/<name>``, so no operating-system accounts are made:

- a **student's** server is the learner's lab (``course.tools.lab.build`` writes it into their home: the student
  notebooks and the kernel files without solutions), with nbgrader's Assignments tab on and its instructor tools
  (formgrader, Create Assignment, the course list, Validate) off;
- an **instructor's** server is JupyterLab with nbgrader's formgrader, on a home holding ``flash-attention/``, the nbgrader
  course directory the exchange is fed from. Its nbgrader settings are the course's (``autograder.nbgrader_config``):
  the formgrader's Generate makes the course's student version, its Autograde runs the submission's notebook in the
  bubblewrap sandbox and then the re-check (``autograder.preprocessors.recheck_tests``) before nbgrader writes a
  grade, and its feedback leaves the hidden tests out. Its ``source/`` holds the instructor notebooks of
  ``solutions/``, ``kernels-without-solutions/<assignment>/`` what each assignment's sandbox shows as
  ``kernels/``, and the gradebook lists the class's students, so the formgrader shows one who handed nothing in as
  "no submission".

nbgrader's exchange is ``<state>/exchange``, a folder the hub owns. nbgrader names a submission after the
operating-system user that hands it in (unless that user is ``jovyan``, the containers' user, when it takes
``JUPYTERHUB_USER``); every server here runs as one user, so each student's nbgrader configuration names the
student (``CourseDirectory.student_id``, which submit, list and fetch_feedback use in place of the user name).

The instructor clicks through the formgrader, or runs the steps above in a terminal: ``release`` and ``collect``
run nbgrader's own commands in ``flash-attention/``; ``grade`` runs the course's batch grader (``python -m autograder grade``:
the same sandbox and re-check) on the notebooks collected and writes the class's grade table, which lists every
student of ``hub/users.toml``: one who handed nothing in is "missing", not 0.
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.coursedir import COURSE_ID, IGNORED_FILES, KERNELS_VIEW, path_with_programs, put_programs_on_path
from autograder.gradebook_version import read_in_process
from autograder.sandbox.bubblewrap import kernels_folder, write_kernels_without_solutions
from course.paths import CHECKOUT, REPO
from course.tools.lab import ANNOUNCEMENTS_PLUGIN, build

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser under its old name, when installed
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

__all__ = ["HUB_CONFIG", "DEFAULT_USERS", "DEFAULT_STATE", "Roster", "HubError", "HubPaths", "proxy_command",
           "prepare_server", "release", "collect", "grade", "release_feedback", "class_table", "main"]

_SOURCE = CHECKOUT or REPO
HUB_CONFIG = _SOURCE / "hub" / "jupyterhub_config.py"
DEFAULT_USERS = _SOURCE / "hub" / "users.toml"
DEFAULT_STATE = _SOURCE / "build" / "hub"
PROXY = _SOURCE / ".venv" / "node_modules" / ".bin" / "configurable-http-proxy"

# What the hub's servers and the instructor's commands find their hub by (set by `serve`).
STATE_ENV = "COURSE_HUB_STATE"
USERS_ENV = "COURSE_HUB_USERS"

# nbgrader's pieces, by name: a student's server keeps only the assignment list (the Assignments tab).
_INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list",
                                 "nbgrader.server_extensions.validate_assignment")
_STUDENT_SERVER_EXTENSIONS = ("nbgrader.server_extensions.assignment_list",)
_INSTRUCTOR_LAB_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                           "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:validate-assignment")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


class HubError(Exception):
    """The hub or one of the instructor's steps cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class Roster:
    """``hub/users.toml``: the class password, the instructors and the students."""

    password: str
    instructors: tuple[str, ...]
    students: tuple[str, ...]

    @classmethod
    def load(cls, path: Path = DEFAULT_USERS) -> "Roster":
        if tomllib is None:
            raise HubError(f"reading the class list {path} needs Python 3.11, or `pip install tomli` on Python 3.10.")
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise HubError(f"cannot read the class list {path}: {exc}") from None
        password = data.get("password")
        if not isinstance(password, str) or len(password) < 8:
            raise HubError(f"{path}: `password` must be a string of at least 8 characters (the class password; "
                           f"JupyterHub refuses a shorter one).")
        groups = {}
        for key in ("instructors", "students"):
            names = data.get(key)
            if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
                raise HubError(f"{path}: `{key}` must be a non-empty list of user names.")
            bad = [n for n in names if not _NAME.fullmatch(n)]
            if bad:
                raise HubError(f"{path}: {bad[0]!r} cannot be a hub user name here: use lower-case letters, digits, "
                               f"'.', '_' and '-' (nbgrader's exchange files submissions under it).")
            groups[key] = tuple(names)
        both = set(groups["instructors"]) & set(groups["students"])
        if both:
            raise HubError(f"{path}: {sorted(both)[0]!r} is listed both as an instructor and as a student.")
        return cls(password, groups["instructors"], groups["students"])

    @property
    def users(self) -> tuple[str, ...]:
        return self.instructors + self.students


@dataclass(frozen=True)
class HubPaths:
    """Where a hub keeps everything, under its state folder (default ``build/hub``)."""

    state: Path

    @property
    def exchange(self) -> Path:
        return self.state / "exchange"

    @property
    def hub(self) -> Path:
        return self.state / "jupyterhub"  # the hub's database, cookie secret and proxy pid

    def home(self, user: str) -> Path:
        return self.state / "home" / user

    def config(self, user: str) -> Path:
        return self.state / "config" / user  # outside the home: what a user's server is configured with

    def course(self, instructor: str) -> Path:
        # Named after the course id, not `course/`: a folder of that name in the home (the server's working folder)
        # would be imported as the course package by every Python started there, the formgrader's included.
        return self.home(instructor) / COURSE_ID

    def grades(self, instructor: str) -> Path:
        return self.home(instructor) / "grades"


def proxy_command() -> list[str]:
    """configurable-http-proxy: the one `scripts/setup.sh --hub` installed, else one on PATH."""
    if PROXY.is_file():
        return [str(PROXY)]
    found = shutil.which("configurable-http-proxy")
    if found:
        return [found]
    raise HubError("JupyterHub's proxy, configurable-http-proxy, is not installed: run `scripts/setup.sh --hub` "
                   "(it needs Node.js and npm) or `make hub`, which does.")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _nbgrader_config(settings: dict[str, str]) -> str:
    lines = ['"""nbgrader settings of this hub user (written by python -m autograder.hub)."""',
             "c = get_config()  # noqa: F821"]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _json(data: dict) -> str:
    return json.dumps(data, indent=2) + "\n"


def _instructor_config(paths: HubPaths, instructor: str) -> str:
    """The instructor's nbgrader settings: the course's (``autograder.nbgrader_config``), so that the formgrader's
    buttons do what ``python -m autograder grade`` does: Generate with the per-language stubs, Autograde with the
    notebook's kernel in the sandbox and the re-check before nbgrader writes a grade, feedback without hidden tests."""
    root = paths.course(instructor)
    view = str(root / KERNELS_VIEW / "{assignment}")  # each assignment's own view (see _write_kernel_views)
    return "\n".join([
        '"""nbgrader settings of this hub user (written by python -m autograder.hub); see autograder/nbgrader_config.py."""',
        "from autograder.nbgrader_config import course_config",
        "",
        "c = get_config()  # noqa: F821",
        f"c.merge(course_config({str(root)!r}))",
        f"c.Exchange.root = {str(paths.exchange)!r}",
        f"c.SandboxedKernelManager.kernels_view = {view!r}",
        f"c.RecheckTests.kernels_view = {view!r}",
    ]) + "\n"


def _add_sources(course: Path) -> None:
    """The instructor notebooks (``solutions/``) as the course directory's ``source/``, where nbgrader's Generate
    finds them; a folder already there is the instructor's and stays as it is."""
    for folder in sorted((_SOURCE / "solutions").iterdir()) if (_SOURCE / "solutions").is_dir() else []:
        if _NAME.fullmatch(folder.name) and any(folder.glob("*.ipynb")) and not (course / "source" / folder.name).exists():
            shutil.copytree(folder, course / "source" / folder.name,
                            ignore=shutil.ignore_patterns(".*", "__pycache__", *IGNORED_FILES))


def _write_kernel_views(course: Path) -> None:
    """Per assignment, the kernel files a submission's sandbox shows as ``kernels/``: without their solutions, except
    those the assignment's lesson wraps whole (lesson 08 calls lessons 06 and 07), which no other assignment sees."""
    from course.tracks import table  # here, not on top: only an instructor's server reads the kernel table
    for source in sorted((course / "source").iterdir()) if (course / "source").is_dir() else []:
        whole = tuple(p.removeprefix("kernels/") for p in table.graded_whole(source.name[:2]))
        write_kernels_without_solutions(kernels_folder(), course / KERNELS_VIEW / source.name, whole)


def _enroll(course: Path, students: tuple[str, ...]) -> None:
    """The class's students in the gradebook, so that the formgrader lists one who handed nothing in ("no
    submission") rather than leaving them out."""
    from nbgrader.api import Gradebook  # here, not on top: only an instructor's server and steps use the gradebook
    read_in_process()
    put_programs_on_path()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        for student in students:
            gb.update_or_create_student(student)


def prepare_user(paths: HubPaths, roster: Roster, user: str) -> dict[str, str]:
    """Write ``user``'s home and configuration; returns the environment their server needs."""
    home, config = paths.home(user), paths.config(user)
    paths.exchange.mkdir(parents=True, exist_ok=True)
    paths.exchange.chmod(0o777)  # nbgrader's exchange is writable by everyone; inbound submissions are hidden
    if user in roster.instructors:
        course = paths.course(user)
        (course / "release").mkdir(parents=True, exist_ok=True)
        _add_sources(course)
        _write_kernel_views(course)
        nbgrader = _instructor_config(paths, user)
        _write(course / "nbgrader_config.py", nbgrader)
        _write(config / "nbgrader_config.py", nbgrader)  # for the formgrader, whose cwd is the home
        _enroll(course, roster.students)
        _write(config / "labconfig" / "page_config.json", _json({"disabledExtensions": {ANNOUNCEMENTS_PLUGIN: True}}))
    elif user in roster.students:
        build(home)  # the learner's lab: student notebooks and kernels without solutions; keeps what they changed
        _write(config / "nbgrader_config.py", _nbgrader_config({
            "CourseDirectory.course_id": COURSE_ID, "Exchange.root": str(paths.exchange),
            "CourseDirectory.student_id": user}))
        server = {name: False for name in _INSTRUCTOR_SERVER_EXTENSIONS}
        server.update({name: True for name in _STUDENT_SERVER_EXTENSIONS})
        _write(config / "jupyter_server_config.json", _json({"ServerApp": {"jpserver_extensions": server}}))
        plugins = {name: True for name in _INSTRUCTOR_LAB_PLUGINS}
        _write(config / "labconfig" / "page_config.json", _json({
            "disabledExtensions": {**plugins, ANNOUNCEMENTS_PLUGIN: True}, "lockedExtensions": plugins}))
    else:
        raise HubError(f"{user!r} is not in the class list.")
    home.mkdir(parents=True, exist_ok=True)
    return {"JUPYTER_CONFIG_PATH": str(config), STATE_ENV: str(paths.state),
            "PATH": path_with_programs(os.environ.get("PATH", os.defpath)),
            USERS_ENV: os.environ.get(USERS_ENV, str(DEFAULT_USERS)),
            "COURSE_TIER": os.environ.get("COURSE_TIER", "cpu")}


def _spawner_class():
    from jupyterhub.spawner import SimpleLocalProcessSpawner  # here, not on top: only the hub process has JupyterHub

    class CourseSpawner(SimpleLocalProcessSpawner):
        """JupyterHub's SimpleLocalProcessSpawner, stopping a server with SIGTERM rather than SIGINT first.

        Without a terminal, jupyter_server exits on SIGINT without shutting its kernels down (they outlive it until
        they notice their parent is gone, which they never do under a subreaper); on SIGTERM it shuts them down
        first. SIGKILL still follows after ``term_timeout``."""

        async def stop(self, now=False):
            return await super().stop(now=True)

    return CourseSpawner


def prepare_server(spawner) -> None:
    """JupyterHub's ``Spawner.pre_spawn_hook``: the user's home and configuration, by their role."""
    paths = HubPaths(Path(os.environ[STATE_ENV]))
    roster = Roster.load(Path(os.environ.get(USERS_ENV, DEFAULT_USERS)))
    spawner.environment.update(prepare_user(paths, roster, spawner.user.name))


# ---- the instructor's steps ----------------------------------------------------------------------------------

def _context(instructor: str | None) -> tuple[HubPaths, Roster, str]:
    state = os.environ.get(STATE_ENV)
    paths = HubPaths(Path(state) if state else DEFAULT_STATE)
    roster = Roster.load(Path(os.environ.get(USERS_ENV, DEFAULT_USERS)))
    who = instructor or roster.instructors[0]
    if who not in roster.instructors:
        raise HubError(f"{who!r} is not an instructor of this class ({', '.join(roster.instructors)}).")
    prepare_user(paths, roster, who)  # the course directory, as their server has it (and before it ever started)
    return paths, roster, who


def _nbgrader(course: Path, *args: str) -> str:
    env = dict(os.environ, PATH=path_with_programs(os.environ.get("PATH")))
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise HubError(f"`nbgrader {' '.join(args)}` failed in {course}:\n{tail}")
    return done.stdout + done.stderr


def _assignment_folder(assignment: str) -> Path:
    folder = _SOURCE / "notebooks" / assignment
    if not _NAME.fullmatch(assignment) or not (folder / f"{assignment}.ipynb").is_file():
        lessons = sorted(p.name for p in (_SOURCE / "notebooks").glob("[0-9]*") if p.is_dir())
        raise HubError(f"the course has no assignment {assignment!r}; its assignments are {', '.join(lessons)}.")
    return folder


def release(assignment: str, instructor: str | None = None) -> str:
    """Generate the student version of ``assignment`` from its source (the formgrader's Generate: the gradebook
    learns its test cells) and put it in the exchange (Release)."""
    _assignment_folder(assignment)
    paths, _, who = _context(instructor)
    _nbgrader(paths.course(who), "generate_assignment", assignment, "--force")
    _nbgrader(paths.course(who), "release_assignment", assignment, "--force")
    return f"released {assignment} to the students of {COURSE_ID}"


def collect(assignment: str, instructor: str | None = None) -> str:
    """Copy each student's latest submission of ``assignment`` into the course directory's ``submitted/``."""
    _assignment_folder(assignment)
    paths, _, who = _context(instructor)
    _nbgrader(paths.course(who), "collect", assignment, "--update")
    got = sorted(p.parent.name for p in (paths.course(who) / "submitted").glob(f"*/{assignment}"))
    return f"collected {assignment} from {len(got)} students: {', '.join(got) or 'none'}"


def _grading_dir(paths: HubPaths, who: str, assignment: str) -> Path:
    return paths.course(who) / "grading" / assignment


def grade(assignment: str, instructor: str | None = None, jobs: int = 1) -> str:
    """Grade the collected submissions with the course's grader; write the feedback pages and the class's table."""
    _assignment_folder(assignment)
    paths, roster, who = _context(instructor)
    course = paths.course(who)
    work = _grading_dir(paths, who, assignment)
    handed_in = work / "handed-in"  # only this assignment's notebooks, one folder per student
    shutil.rmtree(handed_in, ignore_errors=True)
    handed_in.mkdir(parents=True)
    collected = {}
    for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
        notebook = folder / f"{assignment}.ipynb"
        if notebook.is_file():
            (handed_in / folder.parent.name).mkdir()
            shutil.copy2(notebook, handed_in / folder.parent.name / notebook.name)
            collected[folder.parent.name] = folder
    if not collected:
        raise HubError(f"nothing of {assignment} has been collected yet: run `python -m autograder.hub collect "
                       f"{assignment}` first.")
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(handed_in), "--assignment", assignment,
                           "--workdir", str(work), "--jobs", str(jobs)], cwd=_SOURCE)
    if done.returncode != 0:
        raise HubError(f"the course's grader stopped with exit status {done.returncode} (its output is above).")
    # nbgrader's release_feedback finds each page by the submission it belongs to: the student's timestamp and secret.
    for student, folder in collected.items():
        page = work / "nbgrader" / "feedback" / student / assignment / f"{assignment}.html"
        target = course / "feedback" / student / assignment
        shutil.rmtree(target, ignore_errors=True)
        if page.is_file():
            target.mkdir(parents=True)
            shutil.copy2(page, target / page.name)
            for name in ("timestamp.txt", "submission_secret.txt"):
                if (folder / name).is_file():
                    shutil.copy2(folder / name, target / name)
    rows = class_table(work / "grades.csv", roster.students)
    _write(paths.grades(who) / f"{assignment}.csv", _table_csv(rows))
    _write(paths.grades(who) / f"{assignment}.html", _table_html(assignment, rows))
    return (f"graded {assignment}: the class's table is {paths.grades(who) / (assignment + '.html')}; "
            f"`python -m autograder.hub feedback {assignment}` returns the feedback")


def class_table(grades_csv: Path, students: tuple[str, ...]) -> list[dict[str, str]]:
    """One row per student of the class: their score from the grader's CSV, or "missing" when nothing came in."""
    with open(grades_csv, newline="", encoding="utf-8") as fh:
        graded = {row["student_id"]: row for row in csv.DictReader(fh)}
    rows = []
    for student in list(students) + sorted(set(graded) - set(students)):
        row = graded.get(student)
        if row is None:
            rows.append({"student": student, "score": "", "max_score": "", "status": "missing: nothing handed in"})
        else:
            status = row["status"] if student in students else f"{row['status']} (not in the class list)"
            rows.append({"student": student, "score": row["score"], "max_score": row["max_score"], "status": status})
    return rows


def _table_csv(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["student", "score", "max_score", "status"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _table_html(assignment: str, rows: list[dict[str, str]]) -> str:
    cells = "\n".join(
        f'<tr data-student="{html.escape(r["student"])}"><td>{html.escape(r["student"])}</td>'
        f'<td class="score">{html.escape(r["score"] and r["score"] + " / " + r["max_score"])}</td>'
        f'<td class="status">{html.escape(r["status"])}</td></tr>' for r in rows)
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(assignment)}: grades</title></head>"
            f"<body><h1>{html.escape(assignment)}: grades</h1>\n<table>\n<tr><th>student</th><th>score</th>"
            f"<th>status</th></tr>\n{cells}\n</table></body></html>\n")


def release_feedback(assignment: str, instructor: str | None = None) -> str:
    """Put the feedback pages of ``assignment`` in the exchange, where each student's Fetch Feedback finds theirs."""
    _assignment_folder(assignment)
    paths, _, who = _context(instructor)
    pages = sorted((paths.course(who) / "feedback").glob(f"*/{assignment}/{assignment}.html"))
    if not pages:
        raise HubError(f"there is no feedback for {assignment} yet: run `python -m autograder.hub grade "
                       f"{assignment}` first.")
    _nbgrader(paths.course(who), "release_feedback", assignment)
    return f"released the feedback of {assignment} to {', '.join(p.parent.parent.name for p in pages)}"


# ---- the hub ---------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(state: Path, users: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start the hub."""
    Roster.load(users)  # a broken class list stops here, in one sentence
    proxy = proxy_command()
    paths = HubPaths(Path(state).resolve())
    paths.hub.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **{STATE_ENV: str(paths.state), USERS_ENV: str(Path(users).resolve()),
                              "COURSE_HUB_PORT": str(port), "COURSE_HUB_PROXY": proxy[0],
                              # the hub's own API and the proxy's: any free ports (several hubs may share a machine)
                              "COURSE_HUB_API_PORT": str(_free_port()), "COURSE_HUB_PROXY_API_PORT": str(_free_port())})
    env.setdefault("COURSE_TIER", "cpu")
    return [sys.executable, "-m", "jupyterhub", "-f", str(HUB_CONFIG)], env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.hub",
                                     description="A class on JupyterHub: serve it, and the instructor's steps "
                                                 "(release, collect, grade, feedback).")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start JupyterHub for the class in hub/users.toml")
    serve.add_argument("--port", type=int, default=8000, help="the hub's address is http://127.0.0.1:PORT (8000)")
    serve.add_argument("--state", type=Path, default=DEFAULT_STATE,
                       help="homes, the exchange and the hub's database (default: build/hub)")
    serve.add_argument("--users", type=Path, default=DEFAULT_USERS, help="the class list (default: hub/users.toml)")
    for name, text in (("release", "generate the student version of ASSIGNMENT and put it in the exchange"),
                       ("collect", "copy the latest submission of each student into the course directory's submitted/"),
                       ("grade", "grade what was collected with the course's grader; write the class's table"),
                       ("feedback", "return the feedback pages to the students")):
        step = sub.add_parser(name, help=text)
        step.add_argument("assignment", metavar="ASSIGNMENT", help="e.g. 01_naive_attention")
        step.add_argument("--instructor", help="whose course directory (default: the first instructor)")
        if name == "grade":
            step.add_argument("--jobs", type=int, default=1, help="students graded at the same time (default: 1)")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            cmd, env = serve_command(args.state, args.users, args.port)
            print(f"hub: http://127.0.0.1:{args.port} (users: {args.users}; state: {args.state})", flush=True)
            os.chdir(HubPaths(Path(args.state).resolve()).hub)
            os.execve(cmd[0], cmd, env)
        steps = {"release": release, "collect": collect, "feedback": release_feedback}
        if args.command == "grade":
            print(f"hub: {grade(args.assignment, args.instructor, args.jobs)}")
        else:
            print(f"hub: {steps[args.command](args.assignment, args.instructor)}")
    except HubError as exc:
        print(f"hub: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
