"""The arithmetic of attention kernels that lessons, widgets and checks share: each is the course's own model of
one idea, checked against measurement where one exists.

``roofline`` (flops and bytes of every step), ``memory_model`` (sectors, banks, the tile pipeline), ``causal``
(skipped, full and diagonal tiles), ``fragments`` (which lane holds which element of a matrix-unit tile),
``determinism`` (run-to-run differences of atomic accumulation), ``traffic`` (counters mode's cost model: a launch's
warp accesses to Nsight Compute's metrics).
"""
