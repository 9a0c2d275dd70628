"""Tools for instructors and CI, never imported by a notebook: benchmarks (one timing core), the nvcc and
Triton compile gates, notebook-cell sync, ``doctor`` and ``run`` (validate one kernel file)."""
