"""Reading ``--cluster ADDRESS`` without Dask (so that a bad address is named even where Dask is missing)."""
from __future__ import annotations

import re

from autograder.grade.results import GradingError

__all__ = ["NO_DASK", "parse_cluster"]

NO_DASK = ("cluster grading needs Dask, which is not installed here: run `.venv/bin/python -m pip install -e '.[cluster]'` "
           "(`make grade CLUSTER=...` does it for you).")


def parse_cluster(text: str) -> tuple[str, int | None]:
    """``("local", N)`` for ``local:N``, ``(address, None)`` for a scheduler address; GradingError otherwise."""
    text = text.strip()
    if text == "local" or text.startswith("local:"):
        count = text.partition(":")[2]
        if not re.fullmatch(r"[0-9]+", count) or int(count) < 1:
            raise GradingError(f"--cluster {text!r}: a local cluster is written local:N, N a whole number of worker "
                               f"processes of at least 1 (e.g. local:4).")
        return "local", int(count)
    if not re.fullmatch(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+)(?::[0-9]+)?/?", text):
        raise GradingError(f"--cluster {text!r} is neither a scheduler address (tcp://host:8786) nor local:N.")
    return text, None
