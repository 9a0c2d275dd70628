"""What a learner's Python function answered, recorded in the notebook's run; and the data-only encoding of
values (:func:`encode`, :func:`decode`) that the answer process's pipe speaks too.

A Python exercise (``01.attention_torch``) is checked in the learner's own process, where any answer
cell can rebind ``course.check`` or patch torch. So under the grader the notebook's checks also
*record*: each call the check makes to the learner's function, keyed by a digest of its arguments,
with what the function returned (or raised), in an output of the test cell. The grade is decided
afterwards by :mod:`course.grading.recheck`, which runs the answer cells again in an answer process of their own
(:mod:`course.grading.answer_process`), lesson 08's probes included (they run there, around the cell's function), so
no grade is decided by a recording. :class:`Replay` still answers a check from one, call by call.

Forging the recording gains nothing. Its answers are only data: the checker compares them with its
own oracle on inputs it makes itself, so a recorded answer passes only where it is right for exactly
that input, which is what the exercise asks. A call with no recorded answer (a check that an answer
cell switched off or changed) fails.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from typing import Any, Callable

from course.errors import root_cause

__all__ = ["MIME", "Recorder", "Replay", "call_key", "encode", "decode", "autograding", "emit"]

MIME = "application/vnd.flashattention-course.answers+json"
_TENSOR, _DTYPE, _SEQ, _ERROR, _OTHER = "tensor", "dtype", "seq", "error", "other"


def _canonical(value: Any, out: "hashlib._Hash") -> None:
    import torch
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        out.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        out.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, (list, tuple)):
        out.update(f"S{type(value).__name__}{len(value)}(".encode())
        for item in value:
            _canonical(item, out)
        out.update(b")")
    elif isinstance(value, dict):
        out.update(f"D{len(value)}(".encode())
        for key in sorted(value):
            out.update(f"{key}=".encode())
            _canonical(value[key], out)
        out.update(b")")
    else:
        out.update(f"V{type(value).__name__}:{value!r};".encode())


def call_key(name: str, args: tuple, kwargs: dict) -> str:
    """A digest of a call: the function's name and the exact bytes of every argument."""
    digest = hashlib.sha256(name.encode())
    _canonical(tuple(args), digest)
    _canonical(dict(kwargs), digest)
    return digest.hexdigest()[:32]


def encode(value: Any) -> Any:
    """A JSON-able form of a return value (tensors as compressed bytes)."""
    import torch
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return {_TENSOR: base64.b64encode(zlib.compress(raw, 1)).decode(), "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape)}
    if isinstance(value, torch.dtype):
        return {_DTYPE: str(value).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return {_SEQ: [encode(v) for v in value], "tuple": isinstance(value, tuple)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {_OTHER: f"{type(value).__name__} {value!r}"[:200]}


class Unrecordable:
    """Stands in for a value the recording could not hold (shown by its description)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def decode(value: Any) -> Any:
    """The value :func:`encode` made, rebuilt from data only (nothing is unpickled or run)."""
    import numpy as np
    import torch
    if isinstance(value, dict):
        if _TENSOR in value:
            dtype = getattr(torch, str(value["dtype"]))
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"not a dtype: {value['dtype']!r}")
            raw = zlib.decompress(base64.b64decode(value[_TENSOR]))
            shape = [int(n) for n in value["shape"]]
            flat = torch.from_numpy(np.frombuffer(bytearray(raw), dtype=np.uint8))
            return flat.view(dtype).reshape(shape) if raw else torch.empty(shape, dtype=dtype)
        if _DTYPE in value:
            dtype = getattr(torch, str(value[_DTYPE]))
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"not a dtype: {value[_DTYPE]!r}")
            return dtype
        if _SEQ in value:
            items = [decode(v) for v in value[_SEQ]]
            return tuple(items) if value.get("tuple") else items
        return Unrecordable(str(value.get(_OTHER, "an unknown value")))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"not a recorded value: {type(value).__name__}")


class Recorder:
    """Calls ``fn`` and remembers each call's answer for the recording."""

    def __init__(self, exercise: str, fn: Callable[..., Any], name: str):
        self.exercise, self.fn, self.name = exercise, fn, name  # calls are keyed by exercise: names may differ
        self.calls: dict[str, Any] = {}
        self.__name__ = getattr(fn, "__name__", name)
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = call_key(self.exercise, args, kwargs)
        try:
            result = self.fn(*args, **kwargs)
        except Exception as exc:
            self.calls[key] = {_ERROR: type(exc).__name__, "message": str(exc)[:2000],
                               "not_implemented": isinstance(root_cause(exc), NotImplementedError)}
            raise
        self.calls[key] = encode(result)
        return result

    def bundle(self) -> dict:
        return {"exercise": self.exercise, "calls": self.calls}


class RecordedError(Exception):
    """What the learner's function raised when the notebook ran it."""


class Replay:
    """A stand-in for the learner's function ``name``: answers each call of a check from the recordings
    (exercise id → call digest → answer) the notebook's test cells made."""

    def __init__(self, name: str, recordings: dict[str, dict[str, Any]], exercise: str | None = None):
        self.name, self.recordings, self.exercise = name, recordings, exercise
        self.__name__ = name

    def for_exercise(self, exercise: str) -> "Replay":
        return Replay(self.name, self.recordings, exercise)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.exercise is None:
            raise RecordedError(f"this test calls `{self.name}` itself rather than through course.check, so the "
                                f"re-check has no answer for it: the grader's tests must go through the course's checks")
        calls = self.recordings.get(self.exercise, {})
        answer = calls.get(call_key(self.exercise, args, kwargs))
        if answer is None:
            raise RecordedError(f"the notebook holds no answer of `{self.name}` for this input: the check that should "
                                f"have recorded it did not run, or did not run as the course wrote it")
        if isinstance(answer, dict) and _ERROR in answer:
            message = f"{answer[_ERROR]}: {answer.get('message', '')}"
            if answer.get("not_implemented"):
                raise NotImplementedError(message)
            raise RecordedError(message)
        return decode(answer)


def autograding() -> bool:
    """Whether this is nbgrader's autograde run of a notebook: the checks record there (in a learner's lab a
    recording would only be clutter), the re-check compiles, and widgets draw nothing."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


def emit(recorder: Recorder) -> None:
    """Put the recording in the running cell's outputs (a data-only MIME bundle nothing renders)."""
    try:
        from IPython.display import display
    except ImportError:
        return
    display({MIME: json.dumps(recorder.bundle())}, raw=True)
