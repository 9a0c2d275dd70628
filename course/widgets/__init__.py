"""Interactive pictures for the lessons (ipywidgets + matplotlib).

Each widget has a pure function that computes what is drawn (tested on its own) and a builder
that wires sliders to a plot. Builders return the widget so a notebook cell can display it; under
nbgrader they return a placeholder instead (:class:`NotWhileGrading`). One module per idea:

- ``costs``: the N×N score matrix and the roofline (lessons 00 and 01);
- ``online_softmax``: the running max and sum (lesson 02);
- ``tiling``: one query tile's walk over the key tiles, and the bytes tiling saves (lesson 03);
- ``memory``: lanes to sectors and banks, and one buffer against two on a load/compute timeline (lesson 04);
- ``causal``: skipped, full and diagonal tiles of a causal mask, and the work of each program (lesson 06);
- ``fragments``: which lane holds which element of a matrix fragment (lesson 05);
- ``backward``: which programs add to which dQ rows in the two backward designs, and the bits that differ
  between runs of the atomic one (lesson 07);
- ``fp8``: a tensor's values over the e4m3 and e5m2 grids, the scale as a slider, attention's error (lesson 08).
"""
from course.widgets.backward import (BitDifferences, DqWriters, backward_explorer, bit_differences,
                                     determinism_view, dq_writers)
from course.widgets.base import NotWhileGrading
from course.widgets.causal import CausalPicture, causal_explorer, causal_picture
from course.widgets.costs import (ScoreMatrixCost, roofline_explorer, roofline_points, score_matrix_cost,
                                  score_matrix_explorer)
from course.widgets.dataflow import CoreLoad, core_grid, core_load, dataflow_timeline, timeline_data
from course.widgets.dst import BlockStep, block_step, dst_explorer, largest_fitting_rows
from course.widgets.fp8 import Fp8View, fp8_attention_error, fp8_explorer, fp8_view
from course.widgets.fragments import fragment_explorer
from course.widgets.memory import memory_access_explorer, pipeline_explorer
from course.widgets.online_softmax import OnlineSoftmaxStep, online_softmax_explorer, online_softmax_trace
from course.widgets.tiling import TilingStep, hbm_bytes, tiling_explorer, tiling_trace

__all__ = ["NotWhileGrading", "ScoreMatrixCost", "score_matrix_cost", "score_matrix_explorer", "roofline_points",
           "roofline_explorer", "OnlineSoftmaxStep", "online_softmax_trace", "online_softmax_explorer",
           "TilingStep", "tiling_trace", "hbm_bytes", "tiling_explorer", "memory_access_explorer",
           "pipeline_explorer", "fragment_explorer",
           "CausalPicture", "causal_picture", "causal_explorer", "DqWriters", "dq_writers", "backward_explorer",
           "BitDifferences", "bit_differences", "determinism_view",
           "timeline_data", "dataflow_timeline", "CoreLoad", "core_load", "core_grid",
           "BlockStep", "block_step", "largest_fitting_rows", "dst_explorer",
           "Fp8View", "fp8_view", "fp8_attention_error", "fp8_explorer"]
