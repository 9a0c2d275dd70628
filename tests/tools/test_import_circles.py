"""No import circles in the course's packages: every module sits below the ones that import it.

Imports inside functions count as much as those at the top of a file: a lazy import hides a circle from
Python, not from a reader, who still has to hold both modules in mind to follow either.

The layers hold too: the course never imports the grader, no module of the course imports one of a higher layer
(``COURSE_LAYERS``: the runtime and support at the ground, then tiers, tracks, models, grading, lessons, the learner's
API, widgets and slides, tools), the course's lower layers never import its tools, and no module uses another's private (underscore) name, whether it
imports the name or reads it off the module (``from x import _name`` and ``x._name`` alike).

And the course's imports sit at the top of a file: one inside a function says why beside it, in a comment on its line
or the line above (what it would cost at the top, measured, or the circle or the process set-up it keeps apart).
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

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


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``package``."""
    base = node.module or ""
    if node.level:
        above = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(above + ([base] if base else []))
    return base


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
                base = _absolute(node, package)
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


# ---- Layers: what a module may import besides having no circle ----------------------------------------------

LOW_LAYERS = ("course.tracks", "course.simt", "course.models", "course.grading")

# Imports that break a rule below, each with why it is still there (none today). An entry that no longer happens
# fails the test too, so the lists only shrink.
KNOWN_LOW_TO_TOOLS: set[tuple[str, str]] = set()  # (module of a lower layer, the course/tools module it imports)
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()  # (module, private name) used elsewhere


def upward_imports(graph: dict[str, set[str]], lower: tuple[str, ...], upper: str) -> set[tuple[str, str]]:
    """(module, imported module) for every module under one of ``lower`` that imports a module under ``upper``."""
    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return {(module, target) for module, targets in graph.items() if any(under(module, low) for low in lower)
            for target in targets if under(target, upper)}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def private_imports(root: Path, packages: tuple[str, ...]) -> set[tuple[str, str, str]]:
    """(module, the other module, name) for every private name of a module of ``packages`` that another one
    uses: imported (``from x import _name``) or read off the module (``x._name``, ``alias._name``,
    ``course.x._name``, whatever name the module was imported under), relative imports and imports inside
    functions included."""
    files = module_files(root, packages)
    found = set()
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}  # a name this file binds to a module of `packages` -> that module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in packages:
                        # `import a.b as c` binds c to a.b; `import a.b` binds a to the package a
                        bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, package)
                if base.split(".")[0] not in packages:
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        found.add((module, base, alias.name))
                    elif f"{base}.{alias.name}" in files:  # `from course import tiers`: a module
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            chain = _dotted(node.value)
            if chain is None or chain.split(".")[0] not in bound:
                continue
            head, _, rest = chain.partition(".")
            target = ".".join([bound[head]] + ([rest] if rest else []))
            if target in files and target != module:
                found.add((module, target, node.attr))
    return found


def _rule_holds(found: set, known: set, what: str) -> None:
    new, gone = sorted(found - known), sorted(known - found)
    assert not new, f"{what}: " + "; ".join(" ".join(entry) for entry in new)
    assert not gone, ("no longer happens, remove it from this test's list: "
                      + "; ".join(" ".join(entry) for entry in gone))


def test_the_course_never_imports_the_grader():
    graph = import_graph(REPO, PACKAGES)
    assert upward_imports(graph, ("course",), "autograder") == set(), "course imports the autograder"


def test_the_lower_layers_of_the_course_do_not_import_its_tools():
    graph = import_graph(REPO, PACKAGES)
    _rule_holds(upward_imports(graph, LOW_LAYERS, "course.tools"), KNOWN_LOW_TO_TOOLS,
                "a lower layer imports course/tools")


def test_no_private_name_is_imported_from_another_module():
    found = private_imports(REPO, PACKAGES)
    new = sorted(entry for entry in found if entry[1:] not in KNOWN_PRIVATE_IMPORTS)
    assert not new, ("a private name of another module used (make it public or move the code): "
                     + "; ".join(f"{module} uses {name} of {source}" for module, source, name in new))
    _rule_holds({entry[1:] for entry in found}, KNOWN_PRIVATE_IMPORTS, "a private name of another module used")


# The course's layers from the ground up, as the README's layout table tells them: a module may import its own layer
# and those below it, never one above. (A package's __init__ re-exports for notebooks and is left out: a module's
# package is loaded before it anyway.)
COURSE_LAYERS = (
    ("course.paths", "course.errors", "course.inputs", "course.reference", "course.solution_regions", "course.simt"),
    ("course.tiers", "course.kernels", "course.device_guard"),
    ("course.tracks",),
    ("course.models",),
    ("course.grading",),
    ("course.lessons",),
    ("course.exercises", "course.hint_ladder", "course.track_choice"),
    ("course.widgets", "course.slides"),
    ("course.tools", "course.__main__"),
)


def layer_of(module: str) -> int | None:
    """The index in COURSE_LAYERS of the entry that ``module`` is, or sits under (the longest that matches)."""
    found = [(len(prefix), i) for i, layer in enumerate(COURSE_LAYERS) for prefix in layer
             if module == prefix or module.startswith(prefix + ".")]
    return max(found)[1] if found else None


def imports_up_a_layer(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, imported module) for every import of a module from a higher layer."""
    return {(module, target) for module, targets in graph.items() if layer_of(module) is not None
            for target in targets if layer_of(target) is not None and layer_of(target) > layer_of(module)}


def test_every_module_of_the_course_has_a_layer():
    graph = import_graph(REPO, ("course",))
    assert [m for m in graph if m != "course" and layer_of(m) is None] == [], "add it to COURSE_LAYERS"


def test_no_module_imports_one_of_a_higher_layer():
    graph = import_graph(REPO, ("course",))
    found = imports_up_a_layer(graph)
    assert not found, "an import up a layer: " + "; ".join(f"{a} imports {b}" for a, b in sorted(found))


def test_the_layer_rules_see_what_they_forbid(tmp_path):
    """Each rule above fails on a package that breaks it, imports inside functions and relative ones included."""
    for package, files in {
        "course": {"__init__.py": "", "low.py": "def f():\n    from autograder.grade import g\n",
                   "tracks/__init__.py": "", "tracks/table.py": "from ..tools import lab\nfrom ..low import _hidden\n",
                   "simt/__init__.py": "", "simt/kernel.py": "import course.tools.run\n",
                   "tools/__init__.py": "", "tools/lab.py": "from course.tracks.table import rows\n",
                   "tools/run.py": "from os.path import _get_sep\nfrom course.low import __doc__\n"},
        "autograder": {"__init__.py": "", "grade.py": "from course.low import f\ng = f\n"},
    }.items():
        for name, text in files.items():
            (tmp_path / package / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / package / name).write_text(text)
    graph = import_graph(tmp_path, ("course", "autograder"))
    assert upward_imports(graph, ("course",), "autograder") == {("course.low", "autograder.grade")}
    assert upward_imports(graph, LOW_LAYERS, "course.tools") == {("course.tracks.table", "course.tools.lab"),
                                                                 ("course.simt.kernel", "course.tools.run")}
    assert private_imports(tmp_path, ("course", "autograder")) == {("course.tracks.table", "course.low", "_hidden")}
    assert imports_up_a_layer(graph) == {("course.tracks.table", "course.tools.lab"),
                                         ("course.simt.kernel", "course.tools.run")}
    with pytest.raises(AssertionError, match="course.tracks.table course.tools.lab"):
        _rule_holds(upward_imports(graph, LOW_LAYERS, "course.tools"), {("course.simt.kernel", "course.tools.run")}, "")
    with pytest.raises(AssertionError, match="remove it from this test's list"):
        _rule_holds(set(), {("course.gone", "course.low", "_x")}, "private")


def test_the_scan_sees_a_private_name_read_off_a_module(tmp_path):
    """A private name read as an attribute of another module counts as much as one imported from it, under
    whatever name the module was imported, inside a function or not; the module's own names and those of
    objects that are not modules do not count."""
    for name, text in {
        "__init__.py": "",
        "low.py": "_hidden = 1\n_other = 2\n\n\ndef _f():\n    pass\n",
        "grading/__init__.py": "",
        "grading/user.py": ("import os\nimport course.low\nimport course.low as short\nfrom course import low as lower\n\n\n"
                            "def f(thing):\n    from .. import low\n"
                            "    return lower._hidden, course.low._other, short._f, low._hidden, low.__doc__, "
                            "thing._hidden, os._exit\n"),
        "itself.py": "import course.itself as me\n_x = 1\ny = me._x\n",
        "plain.py": "from course.low import f\n",
    }.items():
        (tmp_path / "course" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "course" / name).write_text(text)
    found = private_imports(tmp_path, ("course",))
    assert found == {("course.grading.user", "course.low", "_hidden"), ("course.grading.user", "course.low", "_other"),
                     ("course.grading.user", "course.low", "_f")}
    with pytest.raises(AssertionError, match="course.low _hidden"):
        _rule_holds({entry[1:] for entry in found}, KNOWN_PRIVATE_IMPORTS, "a private name of another module used")


# ---- Imports inside functions: each one says why it is not at the top ------------------------------------------

def unexplained_inner_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``file:line import`` for every import of a module of ``packages`` (a relative one included) inside a function,
    methods and nested functions included, that has no comment on its own lines and no comment line right above it.
    A comment ending a line of code above (``if x:  # ...``) speaks of that line, not of the import."""
    found = []
    for path in module_files(root, packages).values():
        text = path.read_text()
        lines = text.splitlines()
        commented = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(text).readline)
                     if token.type == tokenize.COMMENT}
        for function in ast.walk(ast.parse(text, str(path))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                if not any(name.startswith(".") or name.split(".")[0] in packages for name in names):
                    continue
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                if commented & set(range(node.lineno, node.end_lineno + 1)) or above.startswith("#"):
                    continue
                found.append((path.relative_to(root).as_posix(), node.lineno, lines[node.lineno - 1].strip()))
    return [f"{file}:{line} {text}" for file, line, text in sorted(set(found))]


def test_every_import_inside_a_function_of_the_course_says_why():
    found = unexplained_inner_imports(REPO, ("course",))
    assert not found, ("an import inside a function with no reason beside it: move it to the top of its file, or say "
                       "on its line or the line above what the top would cost (measured, e.g. `# here, not on top: "
                       "+12 ms to `import course``) or what it keeps apart: " + "; ".join(found))


def test_the_scan_sees_an_import_inside_a_function_with_no_reason(tmp_path):
    """The check above can fail: on a bare import inside a function, a method or a nested function, on one whose
    line holds a ``#`` only inside a string, and on one below a line of code that ends with a comment; imports with
    a comment on their line or a comment line above, and imports of other packages, pass."""
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "__init__.py").write_text("")
    (tmp_path / "course" / "a.py").write_text(
        "import os\n"
        "from course import b\n"
        "\n"
        "\n"
        "def f(x):\n"
        "    from course import c\n"                           # 6: no reason
        "    from . import d  # here, not on top: +3 ms to `import course`\n"
        "    # here, not on top: course.e imports this module\n"
        "    from course.e import g\n"
        "    import json\n"
        "    y = '#'; import course.h\n"                        # 11: a string, not a comment
        "    if x:  # about the test, not the import\n"
        "        from course import k\n"                        # 13
        "    from course.m import (n,\n"
        "                          o)  # the reason may end the statement\n"
        "\n"
        "    class Inner:\n"
        "        async def method(self):\n"
        "            def nested():\n"
        "                from .p import q\n"                     # 20
        "            return nested\n"
        "    return y\n")
    assert unexplained_inner_imports(tmp_path, ("course",)) == [
        "course/a.py:6 from course import c", "course/a.py:11 y = '#'; import course.h",
        "course/a.py:13 from course import k", "course/a.py:20 from .p import q"]
