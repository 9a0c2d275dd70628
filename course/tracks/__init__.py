"""The kernel tracks: which file answers which exercise, and how each language launches it.

- :mod:`course.tracks.table`: the one table of kernel exercises (id, lesson, step, track, file, entry point);
- :mod:`course.tracks.common`: what every launcher shares (q/k/v checks, tile and grid arithmetic);
- :mod:`course.tracks.triton`, :mod:`course.tracks.cuda`, :mod:`course.tracks.metal`: one launcher per language.
- :mod:`course.tracks.triton_compile`: the Triton track's real compiler for NVIDIA targets, without a GPU (the
  compile gate and the checks of learners' kernels), with :mod:`course.tracks.processes` to stop what it starts.
"""
