"""Helpers for the browser tests: a throwaway JupyterLab server, headless Chromium, and the few
JupyterLab interactions the tests need (open a notebook, Run All, read back what every cell showed).

Everything the server writes (settings, workspaces, runtime files, notebook outputs) goes to a
temporary directory, so a test run leaves the repository and the user's Jupyter setup untouched.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from course.slides.pdf import chromium_path  # the one place that finds the browser (the slides print with it)

REPO = Path(__file__).resolve().parent.parent
SCREENSHOTS = REPO / "test-output" / "browser"
SETUP_HINT = "run `scripts/setup.sh --test` to install Debian's Chromium and Playwright for the browser tests"

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # containers often have a tiny /dev/shm, which crashes renderers
    "--disable-dev-shm-usage",
]

# JupyterLab settings for a quiet, deterministic page: no news toast or update check, and every
# cell attached to the DOM (windowing would hide off-screen cells from the checks).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def require_browser_tools() -> str:
    """Chromium's path; without it (or Playwright) fail on CI and skip elsewhere."""
    missing = []
    path = chromium_path()
    if path is None:
        missing.append("Chromium (/usr/bin/chromium) is not installed")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package is not installed")
    if missing:
        message = f"{' and '.join(missing)}: {SETUP_HINT}."
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def launch_chromium(playwright, executable: str):
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LabServer:
    """A JupyterLab server serving `root`, on the CPU tier, with its own config and settings."""

    root: Path
    state: Path
    port: int = 0
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    proc: subprocess.Popen | None = None
    settings: dict = field(default_factory=lambda: dict(LAB_SETTINGS))  # user settings written before it starts

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state / "jupyterlab.log"

    def start(self, timeout: float = 60.0) -> None:
        for name, values in self.settings.items():
            path = self.state / "settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ, COURSE_TIER="cpu",
                   JUPYTER_CONFIG_DIR=str(self.state / "config"),
                   JUPYTER_RUNTIME_DIR=str(self.state / "runtime"),
                   IPYTHONDIR=str(self.state / "ipython"))
        # The free port may be taken between choosing and binding it; try another one then.
        for _ in range(3):
            self.port = free_port()
            cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                   f"--port={self.port}", "--port-retries=0",
                   f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={self.root}",
                   f"--LabApp.user_settings_dir={self.state / 'settings'}",
                   f"--LabApp.workspaces_dir={self.state / 'workspaces'}",
                   "--LabApp.expose_app_in_browser=True"]
            if os.geteuid() == 0:
                cmd.append("--allow-root")  # containers and CI runners often run as root
            log = open(self.log_path, "ab")
            # Own session, so teardown can stop the server together with its kernels.
            self.proc = subprocess.Popen(cmd, cwd=self.state, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            if self._wait_ready(timeout):
                return
            if self.proc.poll() is None:
                break  # alive but unresponsive: retrying will not help
        self.stop()
        raise RuntimeError(f"JupyterLab did not start; log tail:\n{self.log_tail()}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                self.api("status")
                return True
            except OSError:
                time.sleep(0.25)
        return False

    def api(self, path: str):
        url = f"{self.base_url}/api/{path}?token={self.token}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def notebook_url(self, name: str) -> str:
        # A fresh workspace each time, so notebooks opened by earlier tests are not restored.
        return f"{self.base_url}/lab/workspaces/{secrets.token_hex(4)}/tree/{name}?reset&token={self.token}"

    def kernel_state(self, notebook: str) -> str | None:
        """'idle', 'busy', 'starting'... for the kernel of `notebook`; None before it has one."""
        for session in self.api("sessions"):
            if session.get("path") == notebook and session.get("kernel"):
                return session["kernel"]["execution_state"]
        return None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # lets the server shut its kernels down cleanly
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left of this server's session
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.proc = None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


# ---- JupyterLab in the page ------------------------------------------------------------------

@dataclass
class CellReport:
    number: int  # 1-based position in the notebook, as a learner would count
    code: bool
    prompt: str  # "[3]:", "[*]:" while queued or running, "[ ]:" when never run
    first_line: str
    problems: list[tuple[str, str]]  # (what it is, rendered text) for error and stderr outputs

    @property
    def executed(self) -> bool:
        return bool(re.fullmatch(r"\[\d+\]:", self.prompt))

    def describe(self) -> str:
        return "\n".join(f"cell {self.number} ({self.first_line!r}) {kind}:\n{text.strip()}"
                         for kind, text in self.problems)


# JupyterLab renders both an exception and a stderr stream with the stderr mime type, so the
# notebook's model (the app is exposed to the page for the tests) says which one each output is.
# Outputs nested in a widget (an ipywidgets Output) have no cell-model entry of their own.
_READ_CELLS = """(name) => {
  const panel = Array.from(window.jupyterapp?.shell.widgets('main') || []).find(w => w.context?.path === name);
  if (!panel) return [];
  const nodes = Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell'))
    .filter(cell => panel.node.contains(cell));
  return nodes.map((cell, i) => {
    const types = (panel.content.model.cells.get(i).toJSON().outputs || []).map(o => o.output_type);
    const top = Array.from(cell.querySelectorAll(
      '.jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output'));
    const problems = Array.from(cell.querySelectorAll(
        '[data-mime-type="application/vnd.jupyter.error"], [data-mime-type="application/vnd.jupyter.stderr"]'))
      .map(out => {
        const j = top.indexOf(out);
        const kind = j < 0 ? 'shows an error or stderr inside a widget'
                           : types[j] === 'error' ? 'raised an error' : 'wrote to stderr';
        return [kind, out.innerText];
      });
    return {
      number: i + 1,
      code: cell.classList.contains('jp-CodeCell'),
      prompt: (cell.querySelector('.jp-InputPrompt')?.textContent || '').trim(),
      first_line: (cell.querySelector('.cm-line')?.textContent || '').trim(),
      problems,
    };
  });
}"""


def read_cells(page, name: str) -> list[CellReport]:
    """What every cell of notebook `name` shows: its prompt and any error or stderr output."""
    return [CellReport(**cell) for cell in page.evaluate(_READ_CELLS, name)]


def open_dialogs(page) -> list[str]:
    return [d.inner_text() for d in page.locator(".jp-Dialog").all() if d.is_visible()]


def dismiss_dialogs(page) -> list[str]:
    """Accept whatever dialog is up (kernel selection picks the default kernel); returns their texts."""
    texts = []
    for _ in range(5):
        dialog = page.locator(".jp-Dialog").first
        if not dialog.is_visible():
            break
        texts.append(dialog.inner_text())
        accept = dialog.locator(".jp-Dialog-button.jp-mod-accept")
        if accept.count():
            accept.first.click()
        else:
            page.keyboard.press("Escape")
        dialog.wait_for(state="detached", timeout=5_000)
    return texts


def open_notebook(page, server: LabServer, name: str, n_cells: int, timeout: float = 60.0) -> None:
    """Open `name` and wait until all its cells are in the DOM and its kernel is idle."""
    page.goto(server.notebook_url(name))
    page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for(timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while True:
        dismiss_dialogs(page)
        if len(read_cells(page, name)) == n_cells and server.kernel_state(name) == "idle":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not open with an idle kernel within {timeout:.0f} s "
                                 f"(kernel: {server.kernel_state(name)}, "
                                 f"cells in the page: {len(read_cells(page, name))} of {n_cells})")
        page.wait_for_timeout(250)


def run_all_cells(page) -> None:
    """Run All Cells the way a learner does it: from the Run menu."""
    page.locator(".jp-NotebookPanel .jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-content .lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


RUN_STOPPED_QUIET_S = 5.0


def wait_until_done(page, server: LabServer, name: str, timeout: float) -> list[CellReport]:
    """Wait for Run All to finish: no cell queued or running and the kernel idle.

    Run All stops at the first error, so "done" does not mean every cell ran; the caller checks that.
    A dialog appearing meanwhile (a dead kernel, say) ends the wait with its text.
    """
    deadline = time.monotonic() + timeout
    started = False
    quiet_since = None
    while True:
        cells = [c for c in read_cells(page, name) if c.code]
        pending = [c for c in cells if c.prompt == "[*]:"]
        started = started or bool(pending) or any(c.executed for c in cells)
        if started and not pending and server.kernel_state(name) == "idle":
            if all(c.executed for c in cells):
                return read_cells(page, name)
            # JupyterLab may send Run All's cells one at a time: between two of them the kernel is idle and
            # the next cell not yet queued. Only a quiet that lasts is the end of a run that stopped early.
            quiet_since = quiet_since if quiet_since is not None else time.monotonic()
            if time.monotonic() - quiet_since >= RUN_STOPPED_QUIET_S:
                return read_cells(page, name)
        else:
            quiet_since = None
        dialogs = open_dialogs(page)
        if dialogs:
            raise AssertionError(f"a dialog appeared while the notebook ran: {dialogs}")
        if time.monotonic() > deadline:
            where = ", ".join(f"cell {c.number} {c.prompt}" for c in pending[:5]) or "none started"
            raise AssertionError(f"Run All did not finish within {timeout:.0f} s (still pending: {where})")
        page.wait_for_timeout(500)


def wait_for_idle_kernel(page, server: LabServer, name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while server.kernel_state(name) != "idle":
        if time.monotonic() > deadline:
            raise AssertionError(f"the kernel of {name} is still {server.kernel_state(name)} after {timeout:.0f} s")
        page.wait_for_timeout(250)


def clear_outputs(notebook_path: Path) -> int:
    """Drop stored outputs and execution counts so the test sees only what this run produced;
    returns the number of cells."""
    nb = json.loads(notebook_path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    notebook_path.write_text(json.dumps(nb, indent=1))
    return len(nb["cells"])


@contextmanager
def report_on_failure(page, server: LabServer, screenshot_name: str):
    """On failure keep a screenshot and print the server log tail (pytest shows it with the failure)."""
    shot = SCREENSHOTS / screenshot_name
    shot.unlink(missing_ok=True)  # a picture from an earlier failure would mislead
    try:
        yield
    except Exception:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        try:
            page.screenshot(path=str(shot), full_page=True)
        except Exception as exc:  # a crashed page must not hide the real failure
            shot = f"(none: {exc})"
        print(f"screenshot of the failure: {shot}\n"
              f"--- JupyterLab server log, last lines ---\n{server.log_tail()}")
        raise
