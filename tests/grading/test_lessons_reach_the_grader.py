"""What a lesson declares for the grader reaches the re-check and the answer process as an argument, never through a
table that an import fills.

The re-check (course.grading.recheck) and the answer process (course.grading.answer_process) sit below the lessons;
their entry points, ``python -m course recheck`` and ``python -m course answer-process`` (course.__main__), read the
lessons with ``course.lessons.load`` and hand each what it uses: the kinds of answer cell a lesson adds, the probes its
checks run. Here the same code is handed other builders and probes, and uses those.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from course.grading import exercise
from course.grading.recheck import run_job

REPO = Path(__file__).resolve().parents[2]


def _tt_job(test: str) -> dict:
    return {"setup": ["import course"], "recordings": {}, "tests": [{"cell": "t", "source": test}],
            "answers": [{"cell": "twice", "kind": "tt", "names": ["twice"], "source": "def twice(x):\n    return 2 * x\n"}]}


def test_the_grading_layer_keeps_no_table_of_the_lessons():
    assert not {"CELL_BUILDERS", "PROBE_SOURCES", "probes"} & set(vars(exercise))


def test_a_lessons_kind_of_cell_is_built_by_the_builder_the_recheck_is_handed():
    built = []

    def builder(source, where, exercise_id, setup, earlier):
        built.append((source, where, exercise_id))
        names: dict = {}
        exec(source, names)
        return {"twice": names["twice"]}

    result = run_job(_tt_job("assert twice(21) == 42"), {"tt": builder})["t"]
    assert result["passed"], result["message"]
    assert built == [("def twice(x):\n    return 2 * x\n", "your cell 'twice'", "this exercise")]
    # Handed no builder for the kind, the re-check builds nothing: the cell's names fail, with a sentence.
    unbuilt = run_job(_tt_job("twice(1)"), {})["t"]
    assert not unbuilt["passed"] and "no way to build a 'tt' answer cell" in unbuilt["message"], unbuilt


def test_the_answer_process_runs_the_probes_it_is_handed():
    """serve() wraps a named function in a probe from the source it was handed (none is found anywhere else)."""
    child = ("from course.grading.answer_process import serve\n"
             "raise SystemExit(serve(lambda: {'doubled': lambda f: (lambda x: 2 * f(x))}))\n")
    requests = [{"setup": []},
                {"exec": {"cell": "inc", "source": "def inc(x):\n    return x + 1\n", "names": ["inc"]}},
                {"call": "inc", "probe": "doubled", "args": [20], "kwargs": {}},
                {"call": "inc", "probe": "autograd_probe", "args": [20], "kwargs": {}}]
    done = subprocess.run([sys.executable, "-c", child], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, COURSE_ANSWER_PARENT=str(os.getpid())))
    assert done.returncode == 0, done.stderr
    ready, defined, doubled, unknown = [json.loads(line) for line in done.stdout.splitlines()]
    assert ready["ready"] and defined == {"defined": {"inc": None}}
    assert doubled == {"value": 42}
    assert unknown["error"] == "KeyError" and "autograd_probe" in unknown["message"]  # a lesson's probe, not handed


def test_no_module_of_the_grading_layer_imports_the_course_package():
    """``import course`` from the grading layer would run the learner's API, which sits above it: what the re-check
    needs from above comes as an argument, and the test cells import the course themselves (the setup does)."""
    found = []
    for path in sorted((REPO / "course" / "grading").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import) and any(alias.name == "course" for alias in node.names):
                found.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and node.module == "course" and not node.level:
                found += [f"{path.name}:{node.lineno}" for alias in node.names
                          if not (REPO / "course" / alias.name).exists()
                          and not (REPO / "course" / f"{alias.name}.py").exists()]
    assert found == [], f"the grading layer imports the package course: {found}"
