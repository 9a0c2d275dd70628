"""Grading on the workers of a Dask distributed cluster (``python -m autograder grade --cluster ADDRESS``).

ADDRESS is a scheduler's address (``tcp://host:8786``) or ``local:N``, which starts a LocalCluster of
N worker processes on this machine (one submission at a time each).

The client (this process) prepares the assignment once and sends it to every worker as a worker
plugin (:class:`ReleasePlugin`): each worker writes it out and builds the course's SIMT runtime
object once, when it joins, not per submission. Each submission then travels as data to one worker,
which grades it with :func:`autograder.grade.one.grade_one` (the function the single-machine path
runs in its threads: same sandbox, same limits, same crash handling) and sends everything back as
data. Workers need the course installed (the same checkout and environment) and bubblewrap, not a
shared filesystem. The client alone writes the gradebook, the files and the CSV.

A worker that dies mid-submission costs time only: the scheduler gives the submission to another
worker, and the client records it when its future completes, by student id. Submissions graded on
the GPU tier (``--tier gpu``) ask for the worker resource ``GPU`` (``dask worker ... --resources GPU=1``);
the others run on any worker.
"""
from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import socket
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import distributed
from distributed.diagnostics.plugin import WorkerPlugin

from autograder.grade.bundle import GPU_RESOURCE, GradingSettings, PreparedRelease, ReleaseBundle, SubmissionOutcome, \
    SubmissionTask, discard_release, prepared_release
from autograder.grade.one import grade_one
from autograder.grade.clusterspec import parse_cluster
from autograder.grade.results import GradingError

__all__ = ["TOPIC", "ClusterRunner", "grade_on_worker", "placement", "ReleasePlugin", "worker_problem"]

TOPIC = "autograder"          # the event topic workers report on ("started" grading a student)
CONNECT_SECONDS = 10          # how long to wait for a scheduler to answer
WORKERS_SECONDS = 60          # how long to wait for a cluster's first worker

# ---------------------------------------------------------------------------------------------
# The worker side
# ---------------------------------------------------------------------------------------------

def _warm_up() -> None:
    """Import what grading needs (seconds), while the client still prepares the assignment."""
    from autograder.lean_imports import skip_unused_imports
    skip_unused_imports()
    for module in ("nbgrader.api", "nbgrader.apps", "autograder.nbgrader_config", "autograder.grade.gradebook"):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 (a real problem shows up, with its message, when grading)
            return


def worker_problem(sandbox: dict) -> str | None:
    """Why this worker cannot grade (None when it can); run on every worker before a batch.

    A worker that can grade starts importing nbgrader in the background."""
    from autograder.sandbox.bubblewrap import SandboxSettings, SandboxUnavailable, require_sandbox
    settings = SandboxSettings(**sandbox)
    if settings.isolate:
        try:
            require_sandbox(settings)
        except SandboxUnavailable as exc:
            return str(exc)
    threading.Thread(target=_warm_up, name="autograder-warm-up", daemon=True).start()
    return None


def _plugin_base(worker: Any) -> Path:
    return Path(worker.local_directory) / "autograder"


class ReleasePlugin(WorkerPlugin):
    """The assignment on a worker: written out, and the runtime built, when the worker gets the plugin
    (on registration, or when it joins later, a restarted worker included)."""

    def __init__(self, bundle: ReleaseBundle) -> None:
        self.bundle = bundle
        self.name = f"autograder-release-{bundle.digest[:16]}"
        self.base: Path | None = None

    async def setup(self, worker: Any) -> None:
        self.base = _plugin_base(worker)
        # Off the worker's event loop: writing the kernel view and compiling the runtime take seconds.
        await asyncio.to_thread(prepared_release, self.bundle, self.base)

    def teardown(self, worker: Any) -> None:
        if self.base is not None:
            discard_release(self.bundle, self.base)

    def release(self) -> PreparedRelease:
        """The template course directory (written here and now if setup could not)."""
        assert self.base is not None
        return prepared_release(self.bundle, self.base)


def grade_on_worker(task: SubmissionTask, plugin_name: str) -> SubmissionOutcome:
    """One submission on a Dask worker: :func:`grade_one` in a scratch folder of the worker."""
    from distributed import get_worker
    worker = get_worker()
    plugin = worker.plugins.get(plugin_name)
    if plugin is None:
        raise RuntimeError(f"worker {worker.address} never received the assignment ({plugin_name})")
    worker.log_event(TOPIC, {"event": "started", "student": task.student_id, "worker": worker.address,
                             "pid": os.getpid(), "host": socket.gethostname()})
    release = plugin.release()
    return grade_one(task, release, _plugin_base(worker) / "scratch", where=worker.address)


# ---------------------------------------------------------------------------------------------
# The client side
# ---------------------------------------------------------------------------------------------

def placement(tier: str) -> dict:
    """Keyword arguments of ``Client.submit`` that place a submission graded on ``tier``: the GPU tier needs
    a worker with the GPU resource (and holds one unit of it while it grades), the CPU tier any worker."""
    return {"resources": {GPU_RESOURCE: 1}} if tier == "gpu" else {}


def _answers(address: str) -> None:
    """Fail at once, with a sentence, when nothing listens at a TCP scheduler address (Dask would retry
    until its timeout); other transports are left to Dask."""
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp", "tls"):
        return
    rest = rest.rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or rest.endswith("]"):  # no port given (a bracketed IPv6 address ends with "]")
        host, port = rest, "8786"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise GradingError(f"no Dask scheduler answered at {address} ({reason}); is it running, and is the "
                           f"address right?") from None


class ClusterRunner:
    """Sends submissions to a Dask cluster's workers; the same interface as the pipeline's thread pool."""

    def __init__(self, address: str, say: Callable[[str], None], watch: Callable[[dict], None] | None = None) -> None:
        self.address, self.local_workers = parse_cluster(address)
        self.say = say
        self.watch = watch
        self.cluster: Any = None
        self.client: Any = None
        self.plugin: Any = None
        self.tier = "cpu"
        self._futures: set[Any] = set()

    @property
    def label(self) -> str:
        if self.local_workers:
            return f"a local cluster of {self.local_workers} worker{'s' * (self.local_workers != 1)}"
        return f"the cluster at {self.address}"

    def connect(self, settings: GradingSettings) -> None:
        """Reach (or start) the cluster and check that its workers can grade these settings."""
        self.tier = settings.tier
        if self.local_workers:
            # Ctrl-C is for this process, which stops the batch and then the workers: the worker processes
            # started now inherit SIGINT ignored (Python keeps an ignored SIGINT ignored).
            try:
                interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
            except ValueError:  # not the main thread: leave signals alone
                interrupt = None
            try:
                self.cluster = distributed.LocalCluster(n_workers=self.local_workers, threads_per_worker=1,
                                                        processes=True, dashboard_address=None,
                                                        silence_logs=logging.ERROR)
                self.client = distributed.Client(self.cluster)
            except Exception as exc:  # noqa: BLE001 (whatever Dask raises, the TA gets one sentence)
                raise GradingError(f"a local cluster of {self.local_workers} workers could not start "
                                   f"({type(exc).__name__}: {exc}).") from None
            finally:
                if interrupt is not None:
                    signal.signal(signal.SIGINT, interrupt)
        else:
            _answers(self.address)
            try:
                self.client = distributed.Client(self.address, timeout=CONNECT_SECONDS)
            except (OSError, TimeoutError, ValueError) as exc:
                raise GradingError(f"no Dask scheduler answered at {self.address} within {CONNECT_SECONDS} s "
                                   f"({type(exc).__name__}); is it running, and is the address right?") from None
            try:
                self.client.wait_for_workers(1, timeout=WORKERS_SECONDS)
            except (TimeoutError, OSError):
                raise GradingError(f"the Dask scheduler at {self.address} has had no worker for {WORKERS_SECONDS} s; "
                                   f"start some with `dask worker {self.address}`.") from None
        count = len(self.client.scheduler_info()["workers"])
        self.say(f"grading on {self.label} ({count} worker{'s' * (count != 1)} now)")
        self._check_workers(settings)
        self.client.subscribe_topic(TOPIC, self._event)

    def _check_workers(self, settings: GradingSettings) -> None:
        try:
            answers = self.client.run(worker_problem, settings.sandbox.as_dict(), on_error="return")
        except Exception as exc:  # noqa: BLE001 (whatever Dask raises, the TA gets one sentence)
            raise GradingError(f"the workers of {self.label} could not be reached ({type(exc).__name__}: {exc}).") from None
        problems = []
        for address, answer in sorted(answers.items()):
            if isinstance(answer, BaseException):
                problems.append(f"worker {address} cannot run the grader ({type(answer).__name__}: {answer}); "
                                f"install the course there as here")
            elif answer:
                problems.append(f"worker {address}: {answer}")
        if problems:
            raise GradingError(" ".join(problems[:3]) + (f" ({len(problems) - 3} more workers likewise)" if len(problems) > 3 else ""))
        if settings.tier == "gpu":
            workers = self.client.scheduler_info()["workers"].values()
            if not any(w.get("resources", {}).get(GPU_RESOURCE, 0) >= 1 for w in workers):
                raise GradingError(f"no worker of {self.label} advertises the {GPU_RESOURCE} resource, so nothing could grade "
                                   f"on the GPU tier; start GPU workers with `dask worker ADDRESS --resources {GPU_RESOURCE}=1`.")

    def _event(self, event: tuple[float, Any]) -> None:
        _, message = event
        if self.watch is not None and isinstance(message, dict):
            self.watch(dict(message))

    def start(self, bundle: ReleaseBundle) -> None:
        """Give every worker (and every worker that joins later) the assignment."""
        self.plugin = ReleasePlugin(bundle)
        try:
            self.client.register_plugin(self.plugin, name=self.plugin.name)
        except Exception as exc:  # noqa: BLE001
            raise GradingError(f"the workers of {self.label} could not prepare {bundle.settings.assignment} "
                               f"({type(exc).__name__}: {exc}).") from None

    def submit(self, task: SubmissionTask) -> Any:
        future = self.client.submit(grade_on_worker, task, self.plugin.name, pure=False,
                                    key=f"grade-{task.student_id}-{uuid.uuid4().hex[:12]}", **placement(self.tier))
        self._futures.add(future)
        return future

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return iter(distributed.as_completed(list(futures)))

    def failure(self, exc: BaseException) -> str:
        if type(exc).__name__ == "KilledWorker":
            return ("the workers grading this submission kept dying (Dask's distributed.scheduler.allowed-failures "
                    "was reached)")
        return f"grading raised {type(exc).__name__}: {exc}"

    def forget(self, future: Any) -> None:
        """The client has the result: the cluster may drop it (a held result whose worker dies is computed again)."""
        self._futures.discard(future)
        future.release()

    def abort(self) -> None:
        """Cancel what has not finished (a worker busy with a submission finishes it; its result is dropped)."""
        if self.client is not None and self._futures:
            try:
                self.client.cancel(list(self._futures))
            except Exception:  # noqa: BLE001 (the client may already be gone)
                pass

    def close(self) -> None:
        if self.client is not None:
            for step in (lambda: self.client.unsubscribe_topic(TOPIC),
                         lambda: self.plugin is not None and self.client.unregister_worker_plugin(self.plugin.name),
                         self.client.close):
                try:
                    step()
                except Exception:  # noqa: BLE001 (closing must not hide what happened before)
                    pass
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception:  # noqa: BLE001
                pass
