"""The course's SIMT runtime: CUDA C and Metal kernels compiled by g++ and run on a CPU.

See kernel.py for the launch API (``RawModule``, ``RawKernel``), compiler.py for how a kernel file
becomes a shared library, runtime/runtime.cpp for the scheduler and the checking modes.
"""
from .compiler import KernelCompileError
from .kernel import CHECKS, KernelLaunchError, LaunchResult, RawKernel, RawModule

__all__ = ["RawModule", "RawKernel", "KernelCompileError", "KernelLaunchError", "LaunchResult", "CHECKS"]
