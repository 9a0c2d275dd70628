"""Running a submission's notebook: in the sandbox, with a byte cap on output, surviving crashes.

:class:`SandboxedExecute` replaces nbgrader's ``Execute`` in the autograde pass. It differs in three ways:

* its kernels start through :class:`SandboxedKernelManager`, confined as :mod:`autograder.sandbox.bubblewrap` says;
* it keeps at most ``max_output_bytes`` of output per cell, counted as messages arrive, so a cell
  printing a gigabyte costs the grader no more memory than one message (nbgrader's own
  ``LimitOutput`` counts lines, and runs only after the whole output is in memory);
* a kernel that dies in a cell (segfault, abort, killed for memory), or that ignores the interrupt
  at the time limit and has to be killed, costs only that cell: the cell gets an error saying so,
  a fresh kernel re-runs the notebook's locked setup cells and the notebook goes on with the next
  cell. Whatever the lost kernel had defined is gone, so later cells that need it fail on their own;
* a test cell that grades through the course (:func:`grades_through_course`) is not run in the learner's
  process at all: the grader's re-check (:mod:`autograder.preprocessors.recheck_tests`) judges it in a process
  of its own, and until it has, the cell holds an error (:data:`AWAITING_RECHECK`), so a pass without a re-check
  that put it there earns nothing.

What happened is stored in the notebook's metadata under ``autograder`` (kept through nbgrader's
metadata clearing by the course config): ``events`` (interruptions, crashes, kills, each with the
cell) and ``tier``, the execution tier the notebook reported in a locked cell ("grading tier: ..."
or the doctor's "graded on: ..."), else the tier the sandbox implies.
"""
from __future__ import annotations

import ast
import copy
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager, KernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.client import NotebookClient
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.preprocessors import Execute
from traitlets import Bool, Dict, Integer, Unicode, default

from autograder.kernel_polling import poll_shell_in_slices
from autograder.sandbox.bubblewrap import SandboxSettings, describe_exit, hand_over, kernel_command, sandbox_uid

__all__ = ["SandboxedKernelManager", "SandboxedExecute", "METADATA_KEY", "AWAITING_RECHECK", "grades_through_course",
           "judged_outside"]

METADATA_KEY = "autograder"

AWAITING_RECHECK = "AwaitingRecheck"
"""The error name a judged test cell holds between the notebook's run, which does not run it, and the re-check."""

# Past the output budget, an error and one stderr message are still kept (clipped to this size):
# nbgrader scores a test cell by whether they are there.
_CLIP_BYTES = 4096
_COUNTED_MESSAGES = {"stream", "display_data", "execute_result", "update_display_data", "error",
                     "comm_open", "comm_msg"}
_TIER_LINE = re.compile(r"(?:grading tier|graded on):\s*(\S[^\n]*)")


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel through the sandbox; talks to it over IPC sockets in a private folder."""

    sandbox = Dict(help="SandboxSettings as a dict; isolate=False starts the kernel unconfined").tag(config=True)
    kernels_view = Unicode("", help="kernel sources without solutions, shown where course reads kernels/; "
                                     "{assignment} stands for the assignment graded").tag(config=True)
    kernel_log = Unicode("", help="file that receives the kernel process's own stdout and stderr")

    _runtime_dir: Path | None = None

    @property
    def settings(self) -> SandboxSettings:
        return SandboxSettings(**self.sandbox)

    def exit_status(self) -> int | None:
        process = getattr(self.provisioner, "process", None)
        return None if process is None else process.poll()

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if self.settings.isolate:
            # The sandbox has no network, so no TCP. Unix socket paths must stay short (108 bytes).
            self._runtime_dir = Path(tempfile.mkdtemp(prefix="kernel-"))
            self.transport = "ipc"
            self.ip = str(self._runtime_dir / "zmq")
            self.connection_file = str(self._runtime_dir / "connection.json")
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        if self.settings.isolate:
            workdir = Path(kw.get("cwd") or Path.cwd())
            hand_over(self._runtime_dir, sandbox_uid(workdir))
            kernel_cmd = kernel_command(kernel_cmd, self.settings, workdir, self._runtime_dir,
                                        Path(self.kernels_view) if self.kernels_view else None)
        # The kernel's own stdout and stderr go to a file, not into the grader's log (and memory).
        log = open(self.kernel_log, "ab") if self.kernel_log else subprocess.DEVNULL
        try:
            await super()._async_launch_kernel(kernel_cmd, **{**kw, "stdout": log, "stderr": subprocess.STDOUT})
        finally:
            if log is not subprocess.DEVNULL:
                log.close()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await KernelManager._async_cleanup_resources(self, restart=restart)
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            self._runtime_dir = None

    cleanup_resources = _async_cleanup_resources


# ---------------------------------------------------------------------------------------------
# Output budget
# ---------------------------------------------------------------------------------------------

def _text_bytes(value: Any) -> int:
    """UTF-8 size of the text in a message's content (iterative: content can nest deeply)."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item) if item.isascii() else len(item.encode("utf-8", "replace"))
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        else:
            total += 8
    return total


def _clip(text: str, limit: int) -> str:
    if text.isascii():
        return text[:limit]
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def _clip_error(content: dict[str, Any]) -> None:
    content["evalue"] = _clip(str(content.get("evalue", "")), _CLIP_BYTES)
    kept, size = [], 0
    for line in reversed(content.get("traceback") or []):  # the end of a traceback says the most
        size += _text_bytes(line)
        if size > _CLIP_BYTES:
            kept.append("[... traceback clipped ...]")
            break
        kept.append(line)
    content["traceback"] = kept[::-1]


class _CellBudget:
    """Output bytes a cell has produced, and what has been kept past the limit."""

    def __init__(self) -> None:
        self.used = 0
        self.noted = False
        self.kept_stderr = False


# ---------------------------------------------------------------------------------------------
# The preprocessor
# ---------------------------------------------------------------------------------------------

def _cell_label(cell: NotebookNode, index: int) -> str:
    """The cell's nbgrader id, else its position counted from 1."""
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return str(grade_id) if grade_id else str(index + 1)


def _is_setup_cell(cell: NotebookNode) -> bool:
    """A locked instructor cell that is neither an exercise nor a test (e.g. the imports)."""
    return cell.cell_type == "code" and utils.is_locked(cell) and not utils.is_grade(cell)


def grades_through_course(test_source: str) -> bool:
    """Whether a test cell grades through the course (calls ``course.check`` or another ``course.`` function).

    Only such a test is judged by the re-check: it hands the learner's function to a check, which the re-check runs
    on the learner's answers in processes of its own. A test that calls the learner's code itself
    (``assert add(1, 2) == 3``) would have to run that code in the test's process, which is what the re-check exists
    to avoid, so it runs in the notebook and keeps the notebook's grade, and the report says so."""
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and isinstance(node.func.value, ast.Name) and node.func.value.id == "course"
               for node in ast.walk(tree))


def judged_outside(cell: NotebookNode) -> bool:
    """A test cell the re-check judges, and the notebook's run therefore never runs."""
    return (cell.get("cell_type") == "code" and utils.is_grade(cell) and not utils.is_solution(cell)
            and grades_through_course("".join(cell.source) if isinstance(cell.source, list) else str(cell.source)))


def _error_output(ename: str, message: str) -> NotebookNode:
    return new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


class SandboxedExecute(Execute):
    """nbgrader's ``Execute`` with sandboxed kernels, an output byte cap and crash isolation."""

    max_output_bytes = Integer(2 * 2**20, help="output kept per cell, in bytes").tag(config=True)
    replay_setup_cells = Bool(True, help="re-run the locked setup cells in a kernel started after a crash").tag(config=True)
    kernel_log_dir = Unicode("", help="folder for the kernels' own stdout/stderr logs").tag(config=True)
    fallback_tier = Unicode("unknown", help="tier recorded when the notebook prints none").tag(config=True)

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(**kw)

    @default("shutdown_kernel")
    def _kill_at_once(self) -> str:
        return "immediate"  # a kernel that is done (or lost) is killed: a graceful shutdown waits on student code

    # -- kernels ----------------------------------------------------------------------------

    def create_kernel_manager(self) -> KernelManager:
        km = super().create_kernel_manager()
        info = (getattr(self, "resources", None) or {}).get("nbgrader", {})
        student = info.get("student")
        if isinstance(km, SandboxedKernelManager) and info.get("assignment"):
            # A course directory that serves several assignments keeps a kernel view per assignment (the hub's).
            km.kernels_view = km.kernels_view.replace("{assignment}", str(info["assignment"]))
        if self.kernel_log_dir and student and isinstance(km, SandboxedKernelManager):
            Path(self.kernel_log_dir).mkdir(parents=True, exist_ok=True)
            km.kernel_log = str(Path(self.kernel_log_dir) / f"kernel-{student}.log")
        return km

    async def async_execute_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True) -> NotebookNode:
        poll_shell_in_slices(self.kc)  # a reply is never left unread until the cell's time limit
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    def _isolated(self) -> bool:
        return isinstance(self.km, SandboxedKernelManager) and self.km.settings.isolate

    def _start_fresh_kernel(self) -> None:
        self._cleanup_kernel()
        self.km = self.create_kernel_manager()
        self.start_new_kernel()
        self.start_new_kernel_client()

    def _replay_setup(self, before: int) -> None:
        """Re-run the setup cells above ``before`` in the fresh kernel; their saved outputs stay."""
        for index, cell in enumerate(self.nb.cells[:before]):
            if utils.is_solution(cell) or utils.is_grade(cell):
                return  # only the preamble: later locked cells may use what the student defined
            if not _is_setup_cell(cell):
                continue
            original = self.nb.cells[index]
            try:
                self.execute_cell(copy.deepcopy(original), index, store_history=False)
            except (DeadKernelError, CellTimeoutError):
                self.log.warning("a setup cell failed again in a fresh kernel; going on without it")
                self._start_fresh_kernel()
                return
            finally:
                self.nb.cells[index] = original

    # -- what happened ----------------------------------------------------------------------

    def _record(self, kind: str, cell: NotebookNode, index: int, what: str) -> None:
        self._events.append({"kind": kind, "cell": _cell_label(cell, index), "what": what})
        self.log.warning("%s", what)

    def _kernel_lost(self, cell: NotebookNode, index: int, failure: Exception) -> None:
        where = _cell_label(cell, index)
        if isinstance(failure, CellTimeoutError):
            what = f"kernel killed (it ignored the interrupt at the {self.timeout} s limit) in cell {where}"
            self._record("killed", cell, index, what)
            ename = "CellTimeoutError"
        else:
            what = f"kernel crashed ({describe_exit(self.km.exit_status(), self._isolated())}) in cell {where}"
            self._record("crashed", cell, index, what)
            ename = "KernelCrash"
        cell.outputs.append(_error_output(ename, f"{what}. The grader went on in a fresh Python process: "
                                                 f"what earlier cells defined is gone, so later cells that use it fail."))

    def _tier(self) -> str:
        for cell in self.nb.cells:
            if cell.cell_type != "code" or not utils.is_locked(cell):
                continue  # a student's own cell could print anything
            for output in cell.get("outputs", []):
                match = _TIER_LINE.search(output.get("text", "")) if output.get("output_type") == "stream" else None
                if match:
                    return match.group(1).strip()
        return self.fallback_tier

    # -- nbclient hooks ---------------------------------------------------------------------

    async def _async_handle_timeout(self, timeout: int, cell: NotebookNode | None = None) -> Any:
        self._interrupted = True
        return await super()._async_handle_timeout(timeout, cell)

    def process_message(self, msg: dict[str, Any], cell: NotebookNode, cell_index: int) -> NotebookNode | None:
        if msg["msg_type"] not in _COUNTED_MESSAGES:
            return super().process_message(msg, cell, cell_index)
        budget = self._budgets.setdefault(msg["parent_header"].get("msg_id", ""), _CellBudget())
        keep = self._fit(msg, budget)
        output = super().process_message(msg, cell, cell_index) if keep else None
        if budget.used > self.max_output_bytes and not budget.noted:
            budget.noted = True
            cell.outputs.append(new_output("stream", name="stdout", text=(
                f"\n[output truncated: this cell produced more than {self.max_output_bytes} bytes of output; "
                f"the rest was not kept]\n")))
        return output

    def _fit(self, msg: dict[str, Any], budget: _CellBudget) -> bool:
        """Whether to keep a message, clipping it to what is left of the cell's budget."""
        kind, content = msg["msg_type"], msg["content"]
        size = _text_bytes(content)
        left = self.max_output_bytes - budget.used
        budget.used += size
        if size <= left:
            return True
        if kind == "error":
            _clip_error(content)
            return True
        if kind == "stream":
            if left > 0:
                content["text"] = _clip(content.get("text", ""), left)
                return True
            if content.get("name") == "stderr" and not budget.kept_stderr:
                budget.kept_stderr = True
                content["text"] = _clip(content.get("text", ""), _CLIP_BYTES)
                return True
        return False

    # -- the run ----------------------------------------------------------------------------

    def preprocess(self, nb: NotebookNode, resources: Any = None, km: KernelManager | None = None
                   ) -> tuple[NotebookNode, dict[str, Any]]:
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._events: list[dict[str, str]] = []
        self._budgets: dict[str, _CellBudget] = {}
        with self.setup_kernel():
            info = self.wait_for_reply(self.kc.kernel_info())
            self.nb.metadata["language_info"] = info["content"]["language_info"]
            for index, cell in enumerate(self.nb.cells):
                if judged_outside(cell):  # graded from outside this process only: not run here at all
                    cell.outputs = [_error_output(AWAITING_RECHECK, "the grader's re-check judges this test in a "
                                                                    "process of its own, and has not run")]
                    cell.execution_count = None
                    continue
                self._interrupted = False
                try:
                    self.preprocess_cell(cell, resources, index)
                except (DeadKernelError, CellTimeoutError) as failure:
                    self._kernel_lost(cell, index, failure)
                    self._start_fresh_kernel()
                    if self.replay_setup_cells:
                        self._replay_setup(index)
                else:
                    if self._interrupted:
                        self._record("interrupted", cell, index,
                                     f"cell {_cell_label(cell, index)} was stopped at the {self.timeout} s limit")
                self._budgets.clear()
        self.set_widgets_metadata()
        self.nb.metadata[METADATA_KEY] = {"events": self._events, "tier": self._tier()}
        return self.nb, self.resources
