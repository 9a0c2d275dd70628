"""A class on a real JupyterHub, in Chromium: the hub `make hub` starts (``hub/jupyterhub_config.py``, its proxy from
npm, one single-user JupyterLab per user) with nbgrader's exchange, driven through a whole cycle of lesson 01.

- The instructor logs in and, in nbgrader's formgrader, generates the student version of lesson 01 and releases it.
- alice and bob log in, fetch it from the Assignments tab, type their answers into the notebook and submit. alice
  submits twice: first the notebook as fetched, then her answers. bob gets the scale wrong (1/d for 1/sqrt(d)) and
  then, outside the notebook, turns that exercise's test cells into ``pass`` and raises their points: checksums
  broken. carol never logs in.
- The hub restarts between the submissions and their collection.
- In the formgrader the instructor collects, clicks Autograde for each submission (the instructor's server runs the
  course's nbgrader settings: the notebook in the bubblewrap sandbox, then the re-check, before nbgrader writes a
  grade), generates and releases the feedback. The formgrader shows alice 9 / 9 and bob 6 / 9 (exactly the points
  of the exercise he got wrong: the test cells are restored), and carol's page says she handed in nothing.
- alice and bob fetch their feedback from the Assignments tab and see their score and why each point was lost.

Every process the test starts is stopped; the test checks none is left.
"""
from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from browser_support import REPO, free_port, launch_chromium, report_on_failure, require_browser_tools
from grading_support import processes_left_behind

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ASSIGNMENT = "01_naive_attention"
PASSWORD = "flash-attention"  # hub/users.toml
WRONG_SCALE = "scale = 1.0 / q.shape[-1]"
T0 = time.monotonic()


def _require_hub() -> None:
    problems = []
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        problems.append("JupyterHub is not installed")
    from autograder.hub import HubError, proxy_command
    try:
        proxy_command()
    except HubError as exc:
        problems.append(str(exc))
    import shutil
    if shutil.which("bwrap") is None:
        problems.append("bubblewrap (the grading sandbox) is not installed")
    if problems:
        message = "; ".join(problems) + ": run `scripts/setup.sh --test`."
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


class Hub:
    """`python -m autograder.hub serve` on a free port, with its state in a temporary folder."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = state / "hub.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "autograder.hub", "serve", "--state", str(self.state),
                                          "--port", str(self.port)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/hub/health", timeout=5):
                    return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"the hub did not start; its log ends:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, as Ctrl-C would: the hub stops every user's server and its proxy before it exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def _answers(wrong_scale: bool) -> dict[str, str]:
    """The instructor's solution cells as a student types them (no solution markers); optionally one plausible slip."""
    source = nbformat.read(REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    answers = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            lines = [line for line in cell.source.splitlines() if "BEGIN SOLUTION" not in line
                     and "END SOLUTION" not in line]
            answers[meta["grade_id"]] = "\n".join(lines)
    right = "scale = 1.0 / math.sqrt(q.shape[-1])"
    assert right in answers["attention_torch"]
    if wrong_scale:
        answers["attention_torch"] = answers["attention_torch"].replace(right, WRONG_SCALE)
    return answers


def _log_in(page, hub: Hub, user: str) -> None:
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit], button[type=submit]")


def _wait_for_lab(page, user: str) -> None:
    page.wait_for_url(f"**/user/{user}/lab**", timeout=150_000)
    print(f"  {user}'s lab is up at {time.monotonic() - T0:.0f} s")
    page.locator("#jp-MainMenu").wait_for(timeout=90_000)


def _lab(page, hub: Hub, user: str, path: str = "") -> None:
    """The user's lab in a fresh workspace (no tab of an earlier visit restored), opening `path` if given."""
    tree = f"/tree/{path}" if path else ""
    page.goto(f"{hub.url}/user/{user}/lab/workspaces/{secrets.token_hex(4)}{tree}?reset")
    page.locator("#jp-MainMenu").wait_for(timeout=90_000)


def _assignments(page, hub: Hub, user: str):
    """The Assignments tab (Nbgrader > Assignment List) of the user's lab, with its lists loaded."""
    _lab(page, hub, user)
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    items = page.locator(".lm-Menu-content .lm-Menu-item:visible .lm-Menu-itemLabel")
    assert items.all_inner_texts() == ["Assignment List"], "a student's Nbgrader menu offers only the Assignments tab"
    items.first.click()
    page.locator("#released_assignments_list").wait_for(timeout=60_000)
    page.locator("#released_assignments_list_loading").wait_for(state="hidden", timeout=60_000)
    return page


def _row(panel, listing: str):
    return panel.locator(f"#{listing} .list_item:not(.nested_list_item)", has_text=ASSIGNMENT)


def _type_answers(page, hub: Hub, user: str, answers: dict[str, str]) -> None:
    """Open the fetched notebook in the lab and type each answer over the cell's stub, then save."""
    path = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    _lab(page, hub, user, path)
    notebook = page.locator(".jp-NotebookPanel .jp-Notebook").first
    notebook.wait_for(timeout=90_000)
    nb = nbformat.read(hub.state / "home" / user / path, as_version=4)
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            editor = notebook.locator(".jp-Cell").nth(index).locator(".cm-content")
            editor.click()
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(answers[grade_id])
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # saved: the file on the server holds what was typed
        try:
            saved = nbformat.read(hub.state / "home" / user / path, as_version=4)
        except nbformat.reader.NotJSONError:  # read while the server was writing it: read it again
            time.sleep(0.3)
            continue
        if all(c.source == answers[c.metadata["nbgrader"]["grade_id"]] for c in saved.cells
               if c.metadata.get("nbgrader", {}).get("grade_id") in answers):
            return
        time.sleep(0.3)
    raise AssertionError(f"{user}'s answers did not reach the saved notebook")


def _submissions(panel):
    """The times of the submissions the Assignments tab lists (one row each, under the assignment)."""
    return panel.locator("#submitted_assignments_list").get_by_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? UTC$"))


def _submit(panel) -> None:
    before = _submissions(panel).count()
    _row(panel, "fetched_assignments_list").get_by_role("button", name="Submit").click()
    _submissions(panel).nth(before).wait_for(timeout=60_000)


def _tamper(notebook: Path) -> None:
    """Outside the notebook: the failing exercise's test cells emptied to `pass`, their points raised."""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id", "").startswith("test_attention_torch"):
            cell.source = "pass"
            meta["points"] = 50
    nbformat.write(nb, notebook)


def _feedback(page) -> str:
    """Fetch Feedback, follow "(view feedback)" to the folder in the file browser and open the page there."""
    _row(page, "submitted_assignments_list").get_by_role("button", name="Fetch Feedback").click()
    page.locator("#submitted_assignments_list").get_by_text("(view feedback)").click()
    page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html").dblclick()
    body = page.frame_locator(".jp-HTMLViewer iframe").locator("body")
    body.get_by_text("Score:").first.wait_for(timeout=60_000)
    return body.inner_text()


FORMGRADER_WAIT_MS = 600_000  # an Autograde click runs the notebook and the re-check of one submission


def _formgrader(page, hub: Hub, path: str, ready: str):
    """A page of the instructor's formgrader, once ``ready`` (a selector) shows its table has loaded."""
    page.goto(f"{hub.url}/user/instructor/formgrader{path}")
    page.locator(ready).first.wait_for(timeout=60_000)
    return page


def _click_and_confirm(page, row, column: str, success: str) -> None:
    """Click the link in ``column`` of a formgrader ``row``, wait for the dialog it ends with (nbgrader's success or
    error dialog), check that it says ``success`` and close it with its OK button."""
    link = row.locator(f"td.{column} a")
    link.wait_for(timeout=60_000)
    link.click()
    dialog = page.locator("#success-modal, #error-modal")
    dialog.locator(".modal-footer button").wait_for(state="visible", timeout=FORMGRADER_WAIT_MS)
    text = dialog.inner_text()
    assert success in text, text[-3000:]
    dialog.locator(".modal-footer button").click()
    dialog.wait_for(state="detached", timeout=30_000)


def _assignment_step(page, hub: Hub, column: str, success: str) -> None:
    """One of the Manage Assignments page's buttons for lesson 01 (Generate, Release, Collect, feedback)."""
    _formgrader(page, hub, "/manage_assignments", "tbody td.name a")
    row = page.locator("tbody tr", has=page.locator("td.name", has_text=ASSIGNMENT))
    _click_and_confirm(page, row, column, success)


def _submission_rows(page, hub: Hub) -> dict[str, object]:
    """The Manage Submissions page of lesson 01: its rows by student id."""
    _formgrader(page, hub, f"/manage_submissions/{ASSIGNMENT}", "tbody td.student-id")
    return {row.locator("td.student-id").inner_text().strip(): row for row in page.locator("tbody tr").all()}


def test_a_class_on_the_hub(tmp_path: Path) -> None:
    chromium = require_browser_tools()
    _require_hub()
    from playwright.sync_api import sync_playwright

    global T0
    T0 = time.monotonic()
    hub = Hub(tmp_path)
    answers = {"alice": _answers(wrong_scale=False), "bob": _answers(wrong_scale=True)}
    with processes_left_behind() as left:
        try:
            with sync_playwright() as pw:
                browser = launch_chromium(pw, chromium)
                pages = {user: browser.new_context().new_page() for user in ("instructor", "alice", "bob")}
                with report_on_failure(pages["alice"], hub, "hub_alice.png"), \
                        report_on_failure(pages["bob"], hub, "hub_bob.png"), \
                        report_on_failure(pages["instructor"], hub, "hub_instructor.png"):
                    hub.start()
                    started = time.monotonic()
                    print(f"  hub up at {started - T0:.0f} s")
                    teacher = pages["instructor"]
                    _log_in(teacher, hub, "instructor")
                    _wait_for_lab(teacher, "instructor")
                    # Generate (the student version, with the course's stubs) and Release, in the formgrader.
                    _assignment_step(teacher, hub, "assign", "Successfully created the student version")
                    _assignment_step(teacher, hub, "release", "Successfully released")
                    print(f"  released at {time.monotonic() - T0:.0f} s")

                    for user in ("alice", "bob"):  # both servers start at once
                        _log_in(pages[user], hub, user)
                    for user in ("alice", "bob"):
                        _wait_for_lab(pages[user], user)
                    panels = {}
                    for user in ("alice", "bob"):
                        panel = panels[user] = _assignments(pages[user], hub, user)
                        _row(panel, "released_assignments_list").get_by_role("button", name="Fetch").click()
                        _row(panel, "fetched_assignments_list").wait_for(timeout=60_000)
                    # alice hands in the notebook as fetched, then her answers: the second submission counts.
                    _submit(panels["alice"])
                    for user in ("alice", "bob"):
                        _type_answers(pages[user], hub, user, answers[user])
                    _tamper(hub.state / "home" / "bob" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
                    for user in ("alice", "bob"):
                        panel = panels[user] = _assignments(pages[user], hub, user)
                        _submit(panel)
                    assert _submissions(panels["alice"]).count() == 2 and _submissions(panels["bob"]).count() == 1

                    # A student's lab has no instructor tools; the instructor's has the formgrader.
                    assert pages["alice"].goto(f"{hub.url}/user/alice/formgrader").status == 404

                    print(f"  submitted at {time.monotonic() - T0:.0f} s")
                    hub.stop()  # the hub restarts between submission and collection
                    hub.start()
                    print(f"  hub restarted at {time.monotonic() - T0:.0f} s")

                    teacher.goto(f"{hub.url}/hub/spawn")  # their server stopped with the hub: this starts it again
                    _wait_for_lab(teacher, "instructor")
                    _assignment_step(teacher, hub, "collect", "Successfully collected submissions")
                    for student in ("alice", "bob"):
                        rows = _submission_rows(teacher, hub)
                        assert sorted(rows) == ["alice", "bob"], sorted(rows)
                        _click_and_confirm(teacher, rows[student], "autograde", "Successfully autograded")
                        print(f"  {student} autograded at {time.monotonic() - T0:.0f} s")
                    rows = _submission_rows(teacher, hub)
                    scores = {student: row.locator("td.score").inner_text().strip() for student, row in rows.items()}
                    assert scores == {"alice": "9 / 9", "bob": "6 / 9"}, scores
                    # carol handed in nothing: her page in the formgrader says so (her score there is not a grade).
                    _formgrader(teacher, hub, "/manage_students/carol", "tbody td.name")
                    carol = teacher.locator("tbody tr td.name", has_text=ASSIGNMENT).first.inner_text()
                    assert carol.strip() == f"{ASSIGNMENT} (no submission)", carol
                    _assignment_step(teacher, hub, "generate-feedback", "Successfully generated feedback")
                    _assignment_step(teacher, hub, "release-feedback", "Successfully released feedback")
                    print(f"  feedback released at {time.monotonic() - T0:.0f} s")

                    seen = {}
                    # Their servers stopped with the hub: both start again at once. A goto would wait on the hub's
                    # spawn (up to its slow_spawn_timeout) before the second could begin; a navigation the page starts
                    # itself, after this call has returned, does not. Each page leaves its old lab first, so that the
                    # wait below sees the lab the spawn ends in, not the one the hub's restart left on the page.
                    for user in ("alice", "bob"):
                        pages[user].goto("about:blank")
                        pages[user].evaluate("url => setTimeout(() => location.assign(url), 0)", f"{hub.url}/hub/spawn")
                    for user in ("alice", "bob"):
                        _wait_for_lab(pages[user], user)
                        seen[user] = _feedback(_assignments(pages[user], hub, user))
                    cycle = time.monotonic() - started
                    print(f"\nhub class cycle (release to both feedback pages read, with one hub restart): {cycle:.0f} s")

                    assert "01_naive_attention (Score: 9.0 / 9.0)" in seen["alice"], seen["alice"][:2000]
                    assert "01_naive_attention (Score: 6.0 / 9.0)" in seen["bob"], seen["bob"][:2000]
                    cells = dict(re.findall(r"Grade cell: (\w+)\s+Score: ([\d.]+ / [\d.]+)", seen["bob"]))
                    lost = {cell for cell, score in cells.items() if float(score.split(" / ")[0]) < float(score.split(" / ")[1])}
                    assert lost == {"test_attention_torch", "test_attention_torch_hidden"}, cells
                    for cell in lost:  # each lost point comes with its reason, in a sentence, not a traceback
                        reason = seen["bob"].split(f"Grade cell: {cell}")[1].split("Grade cell:")[0]
                        assert "01.attention_torch: wrong answer on" in reason and "hint:" in reason, reason
                        assert "Traceback" not in reason, reason
                browser.close()
        finally:
            hub.stop()
    assert not left, f"processes the hub test started are still running: {left}"
