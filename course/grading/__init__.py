"""The machinery every lesson's checks share, below the learner's API (``course.check``, ``course.check_tracks``).

- comparing an answer with the float64 oracle: ``comparison``, ``compare_attention``, ``compare_values`` (cases,
  tolerances, the error budget in ``budget``, the usual mistakes recomputed for a hint in ``known_mistakes``),
  and what a learner's unfinished or failed cell means (``answers``);
- measuring how a kernel works, not only what it returns: ``counters`` (memory traffic, barriers, matrix
  operations), ``techniques`` (tiles visited, masks, matrix units, pipelining; ``model_policy``: the course's
  model functions in a numeric answer), ``footprint`` (what a PyTorch answer builds),
  ``racecheck`` (races on Triton's interpreter);
- running a learner's code apart from the checks: ``isolation`` (kernel checks in a child process);
- the grader's re-check: ``recheck`` runs each test cell again in a fresh process, ``answer_process`` runs the
  learner's Python answers in a child it calls through a pipe, ``recording`` is the data both speak.
"""
