"""A GPU's device rules, enforced on the CPU tier: which tensor would be on the GPU, and which on the CPU.

On the GPU tier a Triton kernel reads GPU memory only: a tensor made without asking for the tier's device
(``torch.randn(4, 1000)``, ``make_qkv(...)`` without ``device=``) stays on the CPU, and the launch fails
("Pointer argument cannot be accessed from Triton (cpu tensor?)"); an operation between a GPU tensor and a
CPU one fails too. On the CPU tier everything is on the CPU, so none of this shows. Inside
:func:`gpu_device_rules` the CPU tier follows the GPU's rules: :func:`course.tiers.device` hands out a
``"cpu"`` that remembers it was asked for (:class:`TierDevice`), every tensor PyTorch makes is given the
device it would have on a GPU machine (the GPU when it was made on the tier's device or computed from such
tensors; the CPU when it was made without a device, or moved with ``.cpu()``), and

- a Triton launch that receives a tensor that would be on the CPU,
- an operation that combines a would-be GPU tensor with a would-be CPU one (0-dim CPU tensors excepted,
  as PyTorch allows them), and
- ``.numpy()`` of a would-be GPU tensor

raise :class:`DeviceMismatch`, naming the line that made the CPU tensor. Tensors made before the block
(or outside PyTorch's Python API) are not judged.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from course.errors import CourseError
from course.tiers import TierDevice, triton_interpreted

__all__ = ["DeviceMismatch", "TierDevice", "gpu_device_rules", "active"]

_ON_GPU = "_course_would_be_on_gpu"
_MADE_AT = "_course_made_at"
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


class DeviceMismatch(CourseError):
    """On the GPU tier this tensor would be on the wrong device."""

    title = "tensor on the wrong device for the GPU tier"


_state: dict[str, Any] = {"depth": 0, "devices": {}, "storages": {}}


def active() -> bool:
    """Whether the GPU's device rules are being enforced now."""
    return _state["depth"] > 0


def _site() -> str:
    """file:line of the innermost caller outside PyTorch and this module (who made the tensor)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_TORCH) and path != os.path.abspath(__file__) and "contextlib" not in path:
            return f"{os.path.relpath(path) if path.startswith(os.getcwd()) else path}:{frame.f_lineno}"
        frame = frame.f_back
    return "an unknown place"


def _placement_of(device: Any) -> bool | None:
    """True (GPU), False (CPU) or None (not a device) for a device argument."""
    if isinstance(device, TierDevice):
        return True
    if isinstance(device, torch.device):
        known = _state["devices"].get(id(device))
        if known is not None and known[1] is device:
            return known[0]  # the .device of a tensor: wherever that tensor would be
        return device.type != "cpu"
    if isinstance(device, str):
        return torch.device(device).type != "cpu"
    if isinstance(device, int):
        return True  # a CUDA device index
    return None


def _remember(device: torch.device, on_gpu: bool) -> None:
    """A torch.device object that stands for the GPU (or the CPU): a tensor's .device, a parsed tier device."""
    devices = _state["devices"]
    if len(devices) > 4096:
        devices.clear()
    devices[id(device)] = (on_gpu, device)


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _placement(t: torch.Tensor) -> bool | None:
    found = getattr(t, _ON_GPU, None)
    if found is None and isinstance(t, torch.nn.Parameter):
        # nn.Parameter(data) wraps a tensor without PyTorch's Python API seeing it: go by the memory it wraps
        found, site = _state["storages"].get(_storage(t), (None, None))
        if found is not None:
            _mark(t, found, site)
    return found


def _mark(result: Any, on_gpu: bool, site: str | None) -> None:
    for value in tree_flatten(result)[0]:
        if isinstance(value, torch.Tensor):
            try:
                setattr(value, _ON_GPU, on_gpu)
                if not on_gpu and site is not None:
                    setattr(value, _MADE_AT, site)
            except (AttributeError, RuntimeError):
                pass


def _where(t: torch.Tensor) -> str:
    return getattr(t, _MADE_AT, "an unknown place")


class _Rules(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        descriptor = getattr(func, "__self__", None)
        if name == "__set__" and getattr(descriptor, "__name__", "") == "data" and len(args) == 2:
            # `param.data = moved` (what Module.to does): the tensor now holds the moved one's memory
            placed = _placement(args[1]) if isinstance(args[1], torch.Tensor) else None
            if placed is not None:
                _mark(args[0], placed, getattr(args[1], _MADE_AT, None))
            return result
        if name == "_parse_to":  # Module.to parses its device first: the parsed device keeps the tier's mark
            marked = [a for a in [*args, *kwargs.values()] if isinstance(a, TierDevice)]
            if marked and isinstance(result, tuple) and result and isinstance(result[0], torch.device):
                _remember(result[0], True)
            return result
        if name == "__get__":
            if getattr(descriptor, "__name__", "") == "grad" and isinstance(result, torch.Tensor) and args:
                owner = _placement(args[0])  # autograd puts a gradient where its tensor is
                if owner is not None and _placement(result) is None:
                    _mark(result, owner, getattr(args[0], _MADE_AT, None))
            if getattr(descriptor, "__name__", "") == "device" and isinstance(result, torch.device) and args:
                on_gpu = _placement(args[0])
                if on_gpu is not None:
                    _remember(result, on_gpu)
            return result
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if not any(isinstance(v, torch.Tensor) for v in tree_flatten(result)[0]):
            if name == "numpy" and inputs and _placement(inputs[0]):
                raise DeviceMismatch(f"`.numpy()` of a tensor that is on the GPU on the GPU tier ({_site()}): "
                                     "a GPU tensor has no NumPy view; call `.cpu()` first.")
            return result
        on_gpu = self._decide(name, args, kwargs, inputs)
        if on_gpu is None:  # computed only from tensors this block did not see made: not judged
            return result
        if result is (args[0] if args else None) and name in ("to", "cuda", "cpu") and _placement(result) != on_gpu:
            # On the CPU a move to "the GPU" returns the tensor itself; on a GPU machine it is a new tensor
            # and the original stays where it was. A view stands for the new tensor.
            result = result.view_as(result)
        origin = None
        if not on_gpu:  # where the CPU tensor came from: the first CPU input's origin, else this line
            origin = next((getattr(t, _MADE_AT) for t in inputs if hasattr(t, _MADE_AT)), None) or _site()
        _mark(result, on_gpu, origin)
        if not inputs:  # a new tensor: remember its memory, which an nn.Parameter may wrap
            for value in tree_flatten(result)[0]:
                if isinstance(value, torch.Tensor):
                    storages = _state["storages"]
                    if len(storages) > 65536:
                        storages.clear()
                    storages[_storage(value)] = (on_gpu, origin)
        return result

    @staticmethod
    def _decide(name: str, args: tuple, kwargs: dict, inputs: list[torch.Tensor]) -> bool | None:
        if name == "cpu":
            return False
        if name == "cuda":
            return True
        if name == "to":
            for spec in [*args[1:], kwargs.get("device")]:
                if isinstance(spec, torch.Tensor):
                    return _placement(spec)
                found = _placement_of(spec)
                if found is not None:
                    return found
            return _placement(inputs[0]) if inputs else False
        if kwargs.get("device") is not None:
            found = _placement_of(kwargs["device"])
            if found is not None:
                return found
        if not inputs:
            return False  # made from nothing but numbers (or NumPy): on the CPU, unless it says where
        if name in ("copy_", "set_"):
            return _placement(inputs[0])
        judged = [(t, _placement(t)) for t in inputs if _placement(t) is not None]
        big = [(t, p) for t, p in judged if t.dim() > 0]
        if name not in ("__getitem__", "__setitem__", "index_put_", "index_put"):
            gpu = [t for t, p in big if p]
            cpu = [t for t, p in big if not p]
            if gpu and cpu:
                raise DeviceMismatch(
                    f"{name} combines a tensor that is on the GPU on the GPU tier with one that stays on the CPU "
                    f"({_site()}); the CPU one was made at {_where(cpu[0])} without the tier's device. Make it "
                    "with device=course.tiers.device(), or move it with .to(course.tiers.device()).")
        if big:
            return any(p for _, p in big)
        if judged:
            return any(p for _, p in judged)
        return None


def _check_launch(kernel: Any, args: tuple, kwargs: dict) -> None:
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor) and _placement(value) is False:
            raise DeviceMismatch(
                f"a tensor made at {_where(value)} reaches the Triton kernel `{getattr(kernel, '__name__', kernel)}`, "
                "but it was made without the tier's device: on the GPU tier it would stay on the CPU and the launch "
                "would fail (\"cannot be accessed from Triton (cpu tensor?)\"). Make it with "
                "device=course.tiers.device(), or move it with .to(course.tiers.device()).")


@contextlib.contextmanager
def gpu_device_rules() -> Iterator[None]:
    """Run the block on the CPU tier as if its tensors were on a GPU machine (see the module's text).

    Only where Triton runs in its interpreter: on the GPU tier the real devices are there to fail."""
    if not triton_interpreted():
        yield
        return
    from triton.runtime.interpreter import InterpretedFunction
    original = InterpretedFunction.run

    def run(self, *args, **kwargs):
        _check_launch(self, args, {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")})
        return original(self, *args, **kwargs)

    _state["depth"] += 1
    if _state["depth"] == 1:
        InterpretedFunction.run = run
    try:
        with _Rules():
            yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0:
            InterpretedFunction.run = original
            _state["devices"].clear()
            _state["storages"].clear()
