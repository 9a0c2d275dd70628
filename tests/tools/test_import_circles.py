"""No import circles in the course's packages: every module sits below the ones that import it.

Imports inside functions count as much as those at the top of a file: a lazy import hides a circle from
Python, not from a reader, who still has to hold both modules in mind to follow either.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("course", "autograder")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its file (a package's ``__init__`` and
    the modules above a module, which Python loads first anyway, are left out)."""
    files = module_files(root, packages)

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    above = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(above + ([base] if base else []))
                # `from course import tiers` imports the module course.tiers; `from course.x import name`, course.x
                targets |= {known(f"{base}.{alias.name}") if f"{base}.{alias.name}" in files else known(base)
                            for alias in node.names}
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _described(group: list[str], graph: dict[str, set[str]]) -> str:
    return "; ".join(f"{a} imports {', '.join(sorted(graph[a] & set(group)))}" for a in group)


def test_the_course_and_the_grader_have_no_import_circles():
    graph = import_graph(REPO, PACKAGES)
    assert len(graph) > 100, "the scan found too few modules to mean anything"
    found = circles(graph)
    assert found == [], "import circles: " + " | ".join(_described(group, graph) for group in found)


def test_the_scan_sees_a_circle_hidden_in_a_function(tmp_path):
    """The check above can fail: a circle closed by an import inside a function, or by a relative import."""
    package = tmp_path / "course"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from course import low\n")
    (package / "low.py").write_text("def f():\n    from course.high import g\n    return g\n")
    (package / "high.py").write_text("from course.low import f\ng = f\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("from .a import x\n")
    (package / "alone.py").write_text("import course.low\nfrom course.sub import a\n")
    graph = import_graph(tmp_path, ("course",))
    assert circles(graph) == [["course.high", "course.low"], ["course.sub.a", "course.sub.b"]]
