"""``python -m course.tools.nsight_compare 04``: one CUDA step's counters on the CPU runtime, or (``--gpu``) the same
single launch on an NVIDIA GPU, to run under Nsight Compute and compare.

    python -m course.tools.nsight_compare 04                   # the CPU runtime's counters of step 04, N = 64, D = 32
    ncu --kernel-name double_buffer_attention --launch-count 1 --metrics <NCU_METRICS> \
        python -m course.tools.nsight_compare 04 --gpu         # the same launch, measured by Nsight Compute

``NCU_METRICS`` lists the Nsight Compute metrics the course models; docs/counters.md has the comparison on an
H100 and an H200.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

import numpy as np

from course.grading.counters import counters
from course.inputs import make_qkv
from course.kernels import kernel_path
from course.simt import gpu
from course.tracks import cuda, table

__all__ = ["NCU_METRICS", "main"]

NCU_METRICS = ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,"
               "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,"
               "smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_shared_st.sum,"
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,"
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,"
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,"
               "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum,l1tex__t_requests_pipe_lsu_mem_global_op_red.sum,"
               "smsp__inst_executed_op_shared_atom.sum")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m course.tools.nsight_compare 03 --n 64 --d 32``: the counters of CUDA step 03's kernel file
    at that size on the CPU runtime; with ``--gpu``, the same single launch on an NVIDIA GPU instead, to run
    under ``ncu --metrics ...`` (docs/counters.md gives the command)."""
    steps = {row.lesson: row.id for row in table.exercises(track="cuda") if row.id in cuda.STEPS}
    parser = argparse.ArgumentParser(prog="python -m course.tools.nsight_compare", description=main.__doc__)
    parser.add_argument("lesson", choices=sorted(steps))
    parser.add_argument("--n", type=int, default=64, help="query and key length (default 64)")
    parser.add_argument("--d", type=int, default=32, help="head dim (default 32)")
    parser.add_argument("--gpu", action="store_true", help="launch once on an NVIDIA GPU (for ncu) instead")
    args = parser.parse_args(argv)
    exercise = steps[args.lesson]
    step = cuda.STEPS[exercise]
    q, k, v = make_qkv(args.n, args.d, seed=0)
    if step.half_inputs:
        q, k, v = (t.half() for t in (q, k, v))
    if not args.gpu:
        module = cuda.module_for(exercise)
        print(counters(module, q, k, v))
        return 0
    ok, why = gpu.cuda_available()
    if not ok:
        print(why)
        return 1
    path = str(kernel_path(step.kernel_file))
    if step.layout == "naive":
        qa, ka, va = (t.float().numpy() for t in (q, k, v))
        o = np.zeros_like(qa)
        blocks = -(-args.n // cuda.THREADS_PER_BLOCK)
        gpu.launch_cuda(None, path, step.kernel, (blocks,), (cuda.THREADS_PER_BLOCK,),
                        (qa, ka, va, o, args.n, args.n, args.d, args.d ** -0.5))
    else:
        def runner(name, grid, block, launch_args, shared_mem):
            gpu.launch_cuda(None, path, name, grid, block, launch_args, shared_mem=shared_mem)
        cuda.forward(exercise, None, q, k, v, runner=runner)
    print(f"launched {step.kernel} once on the GPU (n={args.n}, d={args.d}); profile this command with ncu.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
