"""The CPU runtime stands alone: nothing in course/simt/ imports from the course around it."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SIMT = Path(__file__).resolve().parents[2] / "course" / "simt"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in ``path``: level 0 for absolute imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def imports_from_outside(root: Path) -> list[str]:
    """The imports of modules under ``root`` (a package named course.simt) that reach outside it."""
    outside = []
    for path in sorted(root.rglob("*.py")):
        depth = len(path.relative_to(root).parts)  # 1 for course/simt/x.py
        for level, module in _imports(path):
            if (level == 0 and module.split(".")[0] == "course" and not module.startswith("course.simt")) \
                    or level > depth:
                outside.append(f"{path.relative_to(root)}: {'.' * level}{module}")
    return outside


def test_no_module_of_the_runtime_imports_from_outside_it():
    assert imports_from_outside(SIMT) == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The check above can fail: modules written like the old ones are caught, inner imports are not."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "bad.py").write_text("from ..errors import CourseError\nfrom .kernel import RawModule\n")
    (tmp_path / "sub" / "worse.py").write_text("import course.tiers\nfrom .. import kernel\nfrom course.simt import gpu\n")
    assert imports_from_outside(tmp_path) == ["bad.py: ..errors", "sub/worse.py: course.tiers"]


def test_the_nvcc_gate_does_not_load_triton():
    script = ("import sys\nimport course.tools.nvcc_gate\n"
              "print(sorted(m for m in sys.modules if m == 'triton' or m.startswith(('triton.', 'course.tools.triton'))))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])
