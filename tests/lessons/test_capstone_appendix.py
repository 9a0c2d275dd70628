"""Lesson 08's appendix "what bought speed": its numbers are the recorded H200 measurements of docs/benchmarks.md,
and the configs it names are the ones the launch tables run.

The appendix quotes a GPU run no CPU can repeat; what can drift is the copy. Every measured number in it (times,
ratios, percentages, registers, bytes) must appear in docs/benchmarks.md, which names the machine, and the
winners it names must be the sm_90 rows of lessons 06 and 07.
"""
from __future__ import annotations

import json
import re

import torch

from course.kernels import load_triton_module
from course.paths import REPO
from course.tracks.triton import pick_row

TITLE = "## Appendix: what bought speed"


def _appendix() -> tuple[str, bool]:
    cells = json.loads((REPO / "solutions" / "08_capstone" / "08_capstone.ipynb").read_text())["cells"]
    found = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith(TITLE)]
    assert len(found) == 1, f"{len(found)} appendix cells"
    return "".join(cells[found[0]]["source"]), found[0] == len(cells) - 1


def measured_numbers(text: str) -> set[str]:
    """Numbers with a decimal point, and those followed by a unit of measurement (ms, %, ×, registers, bytes)."""
    return set(re.findall(r"\d+(?:\.\d+)?(?=\s*(?:ms\b|%|×| registers\b| bytes\b))|\d+\.\d+", text))


def test_the_appendix_ends_the_notebook_and_names_its_machine():
    text, last = _appendix()
    assert last, "the appendix is the notebook's last cell"
    assert "NVIDIA H200" in text and "docs/benchmarks.md" in text and "not been measured yet" in text


def test_every_number_of_the_appendix_is_recorded_in_docs_benchmarks():
    text, _ = _appendix()
    numbers = measured_numbers(text)
    assert {"5.17", "1.89", "6.63", "1.42", "12.5", "7.074"} <= numbers  # the claims the appendix is built on
    recorded = (REPO / "docs" / "benchmarks.md").read_text()
    missing = sorted(n for n in numbers if not re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", recorded))
    assert not missing, f"numbers in the appendix that docs/benchmarks.md does not record: {missing}"


def test_the_number_finder_sees_units_and_decimals():
    assert measured_numbers("took 5.17 ms, 24% busy, 1.89× faster, 218 registers, 76 to 308 bytes, 16 heads") == \
        {"5.17", "24", "1.89", "218", "308"}


def test_the_winners_it_names_are_the_sm90_launch_table_rows():
    text, _ = _appendix()
    assert "128 × 128 tiles, 8 warps and 2 stages" in text and "32 × 64 tiles and 4 warps" in text
    rows = load_triton_module("triton/07_backward").LAUNCH_TABLE[(9, 0)]
    for d, n, wanted in ((64, 16384, (128, 128, 8, 2)), (128, 4096, (32, 64, 4, 2))):
        config = pick_row(rows, d, torch.float16, True, n)["atomic"]["dkdv_kernel"]
        assert (config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages) == wanted
