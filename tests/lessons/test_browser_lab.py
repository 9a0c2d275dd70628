"""The two labs in a real browser: the learner's (``make lab``: the student release in build/lab/,
nbgrader's instructor tools off) and the instructor's (``make lab-instructor``: the repository,
nbgrader on).

The learner's lab is built into a temporary folder and served with the configuration ``make lab``
uses; the test checks that no nbgrader menu, command, side panel or server page is there, and that a
student notebook opens and its setup cell (``import course``) runs. The instructor's lab runs the same
checks and must find every piece, so an absence above is not a check that cannot fail.

Neither lab asks JupyterLab's "get notified about official Jupyter news?" (its notification covers the lower right
of the widgets' plots until answered): both are served here without the browser tests' own setting that silences
it, and a lab served with JupyterLab's defaults asks, so its absence is not a check that cannot fail either.
"""
from __future__ import annotations

import json
import re

import pytest

from browser_support import (
    LAB_SETTINGS, REPO, LabServer, open_notebook, read_cells, report_on_failure,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NOTEBOOK = "notebooks/00_orientation/00_orientation.ipynb"

# What nbgrader shows in the page, read from the running app (exposed to the page for the tests).
_NBGRADER_UI = """async () => {
  const app = window.jupyterapp;
  await app.restored;
  const commands = ['nbgrader:open-formgrader', 'nbgrader:open-create-assignment',
                    'nbgrader:open-assignment-list', 'nbgrader:open-course-list'];
  return {
    menus: Array.from(document.querySelectorAll('#jp-MainMenu .lm-MenuBar-itemLabel')).map(e => e.textContent.trim()),
    side_panels: Array.from(document.querySelectorAll('.jp-SideBar .lm-TabBar-tab'))
      .map(t => [t.title, t.textContent].join(' ').trim()),
    commands: commands.filter(id => app.commands.hasCommand(id)),
    plugins: app.listPlugins().filter(id => id.startsWith('@jupyter/nbgrader')),
    widgets: app.hasPlugin('@jupyter-widgets/jupyterlab-manager:plugin'),
  };
}"""

# Runs code in the kernel of an open notebook and returns what it printed (or the error it raised).
_RUN_IN_KERNEL = """async ([name, code]) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context?.path === name);
  const future = panel.sessionContext.session.kernel.requestExecute({code, store_history: false});
  let out = '';
  future.onIOPub = msg => {
    if (msg.header.msg_type === 'stream') out += msg.content.text;
    if (msg.header.msg_type === 'error') out += `${msg.content.ename}: ${msg.content.evalue}`;
  };
  await future.done;
  return out;
}"""

_PROBE = """import json, os, IPython, course.paths
ip = IPython.get_ipython()
print(json.dumps({"cuda": ip.find_cell_magic("cuda") is not None, "metal": ip.find_cell_magic("metal") is not None,
                  "repo": str(course.paths.REPO), "cwd": os.getcwd()}))"""


# The browser tests' own settings without the one that answers the news question: whether it is asked is the labs'.
WITH_NEWS_DEFAULTS = {name: values for name, values in LAB_SETTINGS.items() if "fetchNews" not in values}
NEWS_QUESTION = "official Jupyter news"
ANNOUNCEMENTS_PLUGIN = "@jupyterlab/apputils-extension:announcements"


def _serve(root, state, jupyter_config_path: str | None) -> LabServer:
    """A JupyterLab server on `root`, reading `jupyter_config_path` first (None: the installed defaults), with
    JupyterLab's own default for the news question."""
    server = LabServer(root=root, state=state, settings=WITH_NEWS_DEFAULTS)
    with pytest.MonkeyPatch.context() as env:  # the server takes its environment from this process
        if jupyter_config_path is None:
            env.delenv("JUPYTER_CONFIG_PATH", raising=False)
        else:
            env.setenv("JUPYTER_CONFIG_PATH", jupyter_config_path)
        server.start()
    return server


@pytest.fixture
def learner_lab(tmp_path_factory):
    from course.tools import lab

    dest = tmp_path_factory.mktemp("learner") / "lab"
    lab.build(dest)
    server = _serve(dest, tmp_path_factory.mktemp("learner-state"),
                    lab.lab_environment(dest)["JUPYTER_CONFIG_PATH"])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def instructor_lab(tmp_path_factory):
    from course.tools import lab

    config = lab.write_instructor_config(tmp_path_factory.mktemp("instructor-config"))
    server = _serve(REPO, tmp_path_factory.mktemp("instructor-state"), str(config))
    try:
        yield server
    finally:
        server.stop()


def news_question(page) -> dict:
    """Whether JupyterLab's announcements plugin is there, and the notifications on the page that ask about news."""
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")
    return {"plugin": page.evaluate(f"() => window.jupyterapp.hasPlugin({ANNOUNCEMENTS_PLUGIN!r})"),
            "asked": page.get_by_text(NEWS_QUESTION).count()}


def nbgrader_ui(page, server: LabServer) -> dict:
    """Every trace of nbgrader in the page and on the server; each entry is empty (or 404) without it."""
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    ui = page.evaluate(_NBGRADER_UI)
    assert {"File", "Run", "Help"} <= set(ui["menus"]), f"the page is not fully up: menus {ui['menus']}"
    return {
        "menu": [m for m in ui["menus"] if re.search(r"nbgrader|formgrader", m, re.I)],
        "create assignment panel": [p for p in ui["side_panels"] if "Create Assignment" in p],
        "commands": ui["commands"],
        "plugins": ui["plugins"],
        "formgrader page": page.request.get(f"{server.base_url}/formgrader?token={server.token}",
                                            max_redirects=0).status,
        "widgets": ui["widgets"],
    }


def test_the_learners_lab_has_no_nbgrader_and_runs_a_student_notebook(learner_lab, page):
    with report_on_failure(page, learner_lab, "learner-lab-failure.png"):
        cells = json.loads((learner_lab.root / NOTEBOOK).read_text())["cells"]
        open_notebook(page, learner_lab, NOTEBOOK, len(cells))
        found = nbgrader_ui(page, learner_lab)
        assert found == {"menu": [], "create assignment panel": [], "commands": [], "plugins": [],
                         "formgrader page": 404, "widgets": True}

        setup = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
        assert "import course" in "".join(cells[setup]["source"])
        page.locator(".jp-Notebook .jp-Cell").nth(setup).locator(".cm-content").click()
        page.keyboard.press("Shift+Enter")  # as a learner runs one cell
        # Done means what the learner sees: a numbered prompt on the page. The model's outputs and the
        # kernel's status can both be ready while the page still draws "[*]:" (a loaded machine lags).
        page.wait_for_function(
            """([name, i]) => { const p = Array.from(window.jupyterapp.shell.widgets('main'))
                 .find(w => w.context?.path === name);
               const prompt = p.content.widgets[i].node.querySelector('.jp-InputPrompt');
               return (p.content.model.cells.get(i).toJSON().outputs || []).length > 0
                 && /^\\[\\d+\\]:$/.test((prompt?.textContent || '').trim()); }""",
            arg=[NOTEBOOK, setup], timeout=120_000)
        cell = read_cells(page, NOTEBOOK)[setup]
        assert cell.executed and not cell.problems, cell.describe()
        assert "Execution tiers" in page.locator(".jp-Notebook .jp-Cell").nth(setup).inner_text()

        probe = json.loads(page.evaluate(_RUN_IN_KERNEL, [NOTEBOOK, _PROBE]))
        assert probe == {"cuda": True, "metal": True, "repo": str(REPO),  # hints still find the repository
                         "cwd": str((learner_lab.root / NOTEBOOK).parent.resolve())}
        # By now (the app restored, a cell run) JupyterLab's defaults would have asked about news: the lab did not.
        assert news_question(page) == {"plugin": False, "asked": 0}


def test_the_instructors_lab_shows_nbgrader(instructor_lab, page):
    with report_on_failure(page, instructor_lab, "instructor-lab-failure.png"):
        page.goto(f"{instructor_lab.base_url}/lab?reset&token={instructor_lab.token}")
        found = nbgrader_ui(page, instructor_lab)
        assert found["menu"] == ["Nbgrader"]
        assert found["create assignment panel"], found
        assert set(found["commands"]) == {"nbgrader:open-formgrader", "nbgrader:open-create-assignment",
                                          "nbgrader:open-assignment-list", "nbgrader:open-course-list"}
        assert "@jupyter/nbgrader:formgrader" in found["plugins"]
        assert found["formgrader page"] in (200, 302)
        assert news_question(page) == {"plugin": False, "asked": 0}


def test_a_lab_with_jupyterlabs_defaults_asks_about_news(page, tmp_path_factory):
    """The control of the two absences above: served with neither lab's configuration, JupyterLab asks."""
    from playwright.sync_api import expect

    server = _serve(tmp_path_factory.mktemp("bare-root"), tmp_path_factory.mktemp("bare-state"), None)
    try:
        with report_on_failure(page, server, "bare-lab-failure.png"):
            page.goto(f"{server.base_url}/lab?reset&token={server.token}")
            expect(page.get_by_text(NEWS_QUESTION)).to_be_visible(timeout=60_000)
            assert news_question(page)["plugin"] is True
    finally:
        server.stop()
