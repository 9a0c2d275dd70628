"""Lesson 08: what the checks of the capstone need from a learner's ``flash_attention``, as data.

The capstone's answer is Python (an autograd.Function around the course's kernels). Its checks need more
than return values: the gradients, a short training run, what the Function saved for its backward and
what it built in PyTorch. So each check calls a *probe* (:data:`PROBES`) around the learner's function:
one forward and backward (or a training run) of it, returned as plain tensors and numbers together with
what the run saved for its backward and what PyTorch operators it ran (:mod:`course.grading.footprint`).

Where the grade is decided (:mod:`course.grading.recheck`) the probe runs inside the answer process
(:mod:`course.grading.answer_process`), around the function the handed-in answer cell defines, on arguments the
checker chose; only its data comes back. The probes are imported there before any answer cell runs, and
the cell is read first (:func:`refused_reach`): one that reaches for what observes it (the course's checks
and watches, PyTorch's dispatch and saved-tensor hooks, Python's modules, frames and threads) is refused
with one sentence naming the line, and never runs.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import math
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

# Bound when this module is imported: in the answer process that is before any answer cell runs.
from course.grading.footprint import Footprint, SeenEnough, watch
from course.errors import CheckFailed
from course.kernels import load_triton_module
from course.tiers import device as tier_device
from course.tracks.triton import autotune

__all__ = ["PROBES", "KernelAnswers", "DQ_MODES", "kernel_attention", "kernel_training_losses", "autograd_probe", "counting_launches", "saved_for_backward", "TinyAttentionModel", "train_losses", "sdpa_attention",
           "training_probe", "refused_reach", "refuse_reach"]


def saved_for_backward(o: torch.Tensor) -> list[tuple[int, ...]] | None:
    """Shapes of every tensor the autograd.Function behind ``o`` kept for its backward (``save_for_backward``
    and tensors stored on ``ctx``), or None when no autograd.Function made ``o``. Views and copies made
    after the Function (``o.view(...)``) are looked through."""
    node = o.grad_fn
    while node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction):
        parents = [f for f, _ in node.next_functions if f is not None]
        node = parents[0] if len(parents) == 1 else None
    if node is None:
        return None
    tensors = list(node.saved_tensors)
    tensors += [t for value in vars(node).values() for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]
    return [tuple(t.shape) for t in tensors]


@contextlib.contextmanager
def counting_launches() -> Iterator[list[int]]:
    """``with counting_launches() as launches:`` counts in ``launches[0]`` the Triton kernels launched inside the
    block (on the interpreter or compiled). The answer cell can neither import Triton nor assign an attribute of
    what it did not make (:func:`refused_reach`), so the count is the probe's own."""
    launches = [0]
    originals = {cls: cls.run for cls in (InterpretedFunction, JITFunction)}

    def counted(cls):
        def run(self, *args, **kwargs):
            launches[0] += 1
            return originals[cls](self, *args, **kwargs)
        return run

    for cls in originals:
        cls.run = counted(cls)
    try:
        yield launches
    finally:
        for cls, run in originals.items():
            cls.run = run


def autograd_probe(fn: Callable[..., torch.Tensor]) -> Callable[..., tuple]:
    """``probe(q, k, v, do, causal=, scale=)`` → (o, dq, dk, dv, saved shapes,
    (largest, products, fused, forward launches, backward launches)).

    One call of ``fn`` and, when ``do`` is given, one backward. ``largest`` is the most elements a PyTorch
    operator returned during the call, ``products`` the matrix products PyTorch made, ``fused`` the fused
    attention operators called (course.grading.footprint); the kernels' own work is not PyTorch's and is not seen,
    but their launches are counted, in the call and in its backward.
    """
    def probe(q, k, v, do=None, causal=False, scale=None):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

        saved = []

        launched = [0, 0]

        def run():
            with counting_launches() as forward:
                out = fn(*leaves, causal=causal, scale=scale)
            launched[0] = forward[0]
            if isinstance(out, torch.Tensor):
                saved.append(saved_for_backward(out))  # before the backward frees them
                if do is not None and out.requires_grad:
                    with counting_launches() as backward:
                        out.backward(do)
                    launched[1] = backward[0]
            return out

        o, seen = watch(run)
        built = (seen.largest, seen.products, len(seen.fused_attention), *launched)
        if not isinstance(o, torch.Tensor):
            return (o, None, None, None, None, built)
        grads = tuple(t.grad for t in leaves) if do is not None else (None, None, None)
        return (o.detach(), *grads, saved[0], built)
    probe.__name__ = getattr(fn, "__name__", "flash_attention")
    return probe


# -- a tiny model to train ------------------------------------------------------------------------

def sdpa_attention(q, k, v, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """PyTorch's attention with K/V heads shared by groups of query heads (the yardstick of the training run)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


class TinyAttentionModel(torch.nn.Module):
    """One causal attention layer with grouped-query heads between an embedding and a classifier."""

    def __init__(self, attention: Callable[..., torch.Tensor], vocab: int = 16, d_model: int = 64, heads: int = 4,
                 kv_heads: int = 2, max_len: int = 32):
        super().__init__()
        self.attention, self.heads, self.kv_heads = attention, heads, kv_heads
        self.head_dim = d_model // heads
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.position = torch.nn.Parameter(0.1 * torch.randn(max_len, d_model))
        self.query = torch.nn.Linear(d_model, d_model, bias=False)
        self.key_value = torch.nn.Linear(d_model, 2 * kv_heads * self.head_dim, bias=False)
        self.mix = torch.nn.Linear(d_model, d_model, bias=False)
        self.classify = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        x = self.embed(tokens) + self.position[:n]
        q = self.query(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.key_value(x).view(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        o = self.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
        return self.classify(x + self.mix(o.transpose(1, 2).reshape(b, n, -1)))


def _sequences(batch: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """Sequences where each token is the sum of the two before it (mod vocab): learnable by one attention layer."""
    gen = torch.Generator().manual_seed(seed)
    out = torch.zeros(batch, length, dtype=torch.long)
    out[:, :2] = torch.randint(0, vocab, (batch, 2), generator=gen)
    for t in range(2, length):
        out[:, t] = (out[:, t - 1] + out[:, t - 2]) % vocab
    return out


def train_losses(attention: Callable[..., torch.Tensor], steps: int = 8, seed: int = 0, batch: int = 4,
                 length: int = 24, device: str | torch.device | None = None,
                 weights: list[torch.Tensor] | None = None) -> list[float]:
    """Next-token cross-entropy of each training step of a fresh TinyAttentionModel using ``attention``.

    Same seed, same initial weights and data for any ``attention``: two attentions that compute the same
    function with the same gradients give the same losses, step for step, up to float rounding. The model
    and its data live on ``device``, by default the tier's (:func:`course.tiers.device`): the GPU where
    the course's kernels run natively. The weights are drawn on the CPU first, so every device starts alike.
    ``weights``, when given, receives the trained parameters."""
    device = tier_device() if device is None else device
    torch.manual_seed(seed)
    model = TinyAttentionModel(attention).to(device)
    tokens = _sequences(batch, length + 1, 16, seed).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if not math.isfinite(loss.item()):
            losses.append(float("nan"))
            break
        losses.append(loss.item())
    if weights is not None:  # the trained model's parameters: every bit of every gradient left its mark on them
        weights.extend(p.detach().cpu().clone() for p in model.parameters())
    return losses


def training_probe(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """``probe(steps, seed)`` → (the losses of a training run with ``fn`` as the model's attention,
    (matrix products, fused attention calls) PyTorch made inside ``fn``'s calls, Triton kernels launched in the run,
    the trained parameters)."""
    def probe(steps: int, seed: int) -> tuple[list[float], tuple[int, int], int, list[torch.Tensor]]:
        built = [0, 0]
        weights: list[torch.Tensor] = []

        def watched(*args, **kwargs):
            mode = Footprint()
            try:
                with mode:  # stops the call at a fused attention operator: the run ends there
                    return fn(*args, **kwargs)
            finally:
                built[0] += mode.seen.products
                built[1] += len(mode.seen.fused_attention)
        with counting_launches() as launches:
            try:
                losses = train_losses(watched, steps=steps, seed=seed, weights=weights)
            except SeenEnough:
                losses = []
        return losses, tuple(built), launches[0], weights
    probe.__name__ = getattr(fn, "__name__", "flash_attention")
    return probe


# -- the course's kernels, run by the grader itself ------------------------------------------------------------
# Where the grade is decided the probes above run in the answer process, beside the learner's code, which can
# reach them; what they return is data the grader cannot trust to say how it was made. So the grader runs the
# course's own kernels (lesson 06's forward, the capstone's backward in kernels/triton/08_backward.py) in its own
# process on the same inputs, and the learner's numbers must be theirs: bit for bit on Triton's interpreter. A
# Function that calls lesson 07's backward instead (either dQ design) made its numbers with course kernels too.

@functools.lru_cache(maxsize=None)
def _kernel_files() -> tuple[Any, Any]:
    return load_triton_module("triton/06_causal"), load_triton_module("triton/08_backward")


@functools.lru_cache(maxsize=None)
def _lesson07() -> Any:
    return load_triton_module("triton/07_backward")


DQ_MODES = ("capstone", "atomic", "split")
"""The backward designs whose gradients the grader accepts, the solution's first: the capstone's own backward
(kernels/triton/08_backward.py, deterministic), then lesson 07's with the atomic and with the split dQ."""


class KernelAnswers:
    """What the course's kernels give for one case (``q, k, v`` as the learner's Function received them), run here,
    on the check configs: O and the LSE at once, the gradients for a ``do`` and a dQ design when asked."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None):
        forward, _ = _kernel_files()
        self.q, self.k, self.v = q.contiguous(), k.contiguous(), v.contiguous()
        self.causal = bool(causal)
        self.scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        with autotune(False):
            self.o, self.lse = forward.causal_attention_forward(self.q, self.k, self.v, self.causal, self.scale)
        self._gradients: dict[str, tuple[torch.Tensor, ...]] = {}

    def gradients(self, do: torch.Tensor, dq_mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dQ, dK, dV of the backward design ``dq_mode`` (one of DQ_MODES; "capstone" is the solution's)."""
        if dq_mode not in self._gradients:
            args = (self.q, self.k, self.v, self.o, self.lse, do.contiguous())
            with autotune(False):
                if dq_mode == "capstone":
                    self._gradients[dq_mode] = _kernel_files()[1].attention_backward_bhnd(
                        *args, causal=self.causal, scale=self.scale)
                else:
                    self._gradients[dq_mode] = _lesson07().attention_backward_bhnd(
                        *args, causal=self.causal, scale=self.scale, dq_mode=dq_mode)
        return self._gradients[dq_mode]


class _CourseKernels(torch.autograd.Function):
    """FlashAttention made of the course's kernels, for the grader's own training run (the capstone's design)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, dq_mode):
        answers = KernelAnswers(q, k, v, causal, scale)
        ctx.answers, ctx.dq_mode = answers, dq_mode
        return answers.o

    @staticmethod
    def backward(ctx, do):
        return (*ctx.answers.gradients(do, ctx.dq_mode), None, None, None)


def kernel_attention(dq_mode: str) -> Callable[..., torch.Tensor]:
    """``attention(q, k, v, causal=, scale=)`` computed by the course's kernels with the backward ``dq_mode``."""
    def attention(q, k, v, causal=False, scale=None):
        return _CourseKernels.apply(q, k, v, bool(causal), scale, dq_mode)
    return attention


def kernel_training_losses(steps: int, seed: int, dq_mode: str) -> tuple[list[float], list[torch.Tensor]]:
    """The losses and trained parameters of :func:`train_losses` with the course's kernels as the attention, computed
    on one thread as the answer process computes (PyTorch's reductions sum in another order on more threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    weights: list[torch.Tensor] = []
    try:
        return train_losses(kernel_attention(dq_mode), steps=steps, seed=seed, weights=weights), weights
    finally:
        torch.set_num_threads(threads)


PROBES: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "autograd_probe": autograd_probe, "training_probe": training_probe}
"""The probes a check may ask the answer process to run around a learner's function, by name."""


# -- what the answer cell may reach -------------------------------------------------------------------
# Read from the cell's text before the answer process runs it. A probe runs in the same process as the cell,
# so a cell that rebinds the watch, wraps the probe or hooks PyTorch's dispatch would decide what the probe
# reports. Why not an allowlist of what forward and backward may call: the cell is a whole file (imports, the
# Function, flash_attention, the input checks), a patch can sit on any of its lines, and the honest
# forward/backward call the launchers, tensor methods, ctx, and whatever torch function a learner reasonably
# shapes tensors with; listing those would refuse honest variants while still leaving module level open. So
# the allowlist is what the cell may *reach*: the modules it may import (and of os only os.environ), the
# course's kernel loaders by name, torch's public functions and classes but only its submodules below. Around
# it, the ways past such a list are refused wherever they appear: private attributes and dunders (torch._C,
# __class__, __dict__, __globals__), the builtins that turn strings into objects or reach namespaces
# (getattr, __import__, eval, globals, ...), assigning an attribute of anything but a method's first
# parameter (ctx), the names of the machinery itself (course.grading.footprint, course.lessons.capstone, sys.modules, gc,
# inspect, threading, saved_tensors_hooks, ...) and leaving PyTorch for numpy or Python numbers (.numpy(),
# .tolist(), .item()), where the watch sees no arithmetic.

_IMPORTS = frozenset({"__future__", "math", "typing", "os", "torch", "torch.nn", "torch.nn.functional",
                      "torch.autograd", "torch.cuda", "torch.linalg", "torch.special", "torch.fft",
                      "course.kernels", "course.tracks.common", "course.tracks.triton"})
_FROM_COURSE = {"course.kernels": {"load_triton_module"},
                "course.tracks.common": {"KERNEL_DTYPES", "MAX_HEAD_DIM", "Tiles", "check_qkv", "blocks_for"},
                "course.tracks.triton": {"autotune", "autotuning", "load_triton_module"}}
_ONLY = {"os": {"environ"}}  # of these modules, only these names
_SETUP_MODULES = {"torch": "torch", "math": "math"}  # names the instructor's setup cell binds
_BUILTINS = frozenset({"getattr", "setattr", "delattr", "vars", "globals", "locals", "eval", "exec", "compile",
                       "open", "breakpoint", "memoryview", "course"})
# Attributes, on whatever object they are read (a module the cell loaded holds torch and the course too). Bare names
# need no such list: what the cell can name is what it imports, the setup's torch and math, and the builtins.
_MACHINERY = frozenset({"footprint", "capstone", "exercises", "recording", "answer_process", "recheck",
                        "comparison", "compare_attention", "compare_values", "known_mistakes",
                        "techniques", "measuring", "causal_tiles", "causal_masks", "matrix_units", "pipelining",
                        "model_policy", "Footprint", "watch", "TorchDispatchMode", "TorchFunctionMode", "overrides",
                        "library", "utils", "graph", "jit", "ops", "saved_tensors_hooks", "save_on_cpu",
                        "register_hook", "register_prehook", "sys", "modules", "gc", "inspect", "threading",
                        "multiprocessing", "subprocess", "signal", "builtins", "importlib", "ctypes", "course", "os",
                        "numpy", "tolist", "item", "data_ptr", "untyped_storage"})
_WHY = {
    "import": "lesson 08's answer imports only math, typing, os, torch (and torch.nn.functional, torch.autograd) "
              "and the course's kernel loaders (course.kernels, course.tracks.common, course.tracks.triton)",
    "os": "of os the answer reads only os.environ",
    "private": "private attributes and dunders reach past the API into what watches your function",
    "builtin": "it turns names into objects or reaches namespaces, past what the answer may use",
    "assign": "an answer changes only its own objects: attributes are set on ctx, nothing else",
    "machinery": "it reaches the machinery that watches your function (the course's checks, PyTorch's hooks, "
                 "Python's modules, frames and threads) or leaves PyTorch where no watch sees the arithmetic",
    "module": "of torch the answer uses the functions and classes, and only the submodules torch.nn.functional, "
              "torch.autograd, torch.cuda, torch.linalg, torch.special and torch.fft",
}


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a module that does not import here is one the answer may not use
        return None


def _chain(node: ast.Attribute) -> tuple[ast.AST, list[str]]:
    """The innermost value of ``a.b.c`` and the names after it, outermost last."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return node, names[::-1]


def _first_parameters(tree: ast.AST) -> dict[ast.AST, str]:
    """Each attribute target inside a function whose value is that function's first parameter (ctx, self)."""
    allowed = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and (fn.args.posonlyargs or fn.args.args):
            first = (fn.args.posonlyargs or fn.args.args)[0].arg
            for n in ast.walk(fn):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == first:
                    allowed[n] = first
    return allowed


def refused_reach(source: str) -> tuple[str, int, str] | None:
    """(what, line, why) for the first thing in lesson 08's answer cell that reaches past what the answer may
    use, or None. A cell that does not parse is the answer process's to report (it raises when it runs)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    roots = dict(_SETUP_MODULES)  # name in the cell → the module it is bound to
    found: list[tuple[int, int, str, str]] = []

    def refuse(node: ast.AST, what: str, why: str) -> None:
        found.append((getattr(node, "lineno", 0), getattr(node, "col_offset", 0), what, why))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in _IMPORTS:
                    refuse(node, f"import {alias.name}", "import")
                elif alias.asname:
                    roots[alias.asname] = alias.name
                else:
                    roots[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if base not in _IMPORTS and full not in _IMPORTS:
                    refuse(node, f"from {base} import {alias.name}", "import")
                elif alias.name == "*" or alias.name.startswith("_") and base != "__future__":
                    refuse(node, f"from {base} import {alias.name}", "import" if alias.name == "*" else "private")
                elif base in _FROM_COURSE and alias.name not in _FROM_COURSE[base]:
                    refuse(node, f"from {base} import {alias.name}", "import")
                elif base in _ONLY and alias.name not in _ONLY[base]:
                    refuse(node, f"from {base} import {alias.name}", "os")
                elif full in _IMPORTS or inspect.ismodule(getattr(_module(base), alias.name, None)):
                    if full not in _IMPORTS:
                        refuse(node, f"from {base} import {alias.name}", "module")
                    else:
                        roots[alias.asname or alias.name] = full
    own = _first_parameters(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id.startswith("__"):
                refuse(node, node.id, "private")
            elif node.id in _BUILTINS:
                refuse(node, node.id, "builtin" if node.id != "course" else "machinery")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") and node.attr != "__name__":
                refuse(node, f".{node.attr}", "private")
            elif node.attr in _MACHINERY:
                refuse(node, f".{node.attr}", "machinery")
            if isinstance(node.ctx, (ast.Store, ast.Del)) and node not in own:
                refuse(node, ast.unparse(node), "assign")
            base, names = _chain(node)
            if isinstance(base, ast.Name) and base.id in roots:
                path, value = roots[base.id], _module(roots[base.id])
                for name in names:
                    if path in _ONLY and name not in _ONLY[path]:
                        refuse(node, f"{path}.{name}", "os")
                        break
                    value = getattr(value, name, None)
                    if not inspect.ismodule(value):
                        break
                    path = value.__name__
                    if path not in _IMPORTS:
                        refuse(node, path, "module")
                        break
    if not found:
        return None
    line, _, what, why = min(found)
    return what, line, _WHY[why]


def refuse_reach(exercise: str, source: str | None) -> None:
    """CheckFailed, one sentence naming the line, when lesson 08's answer cell reaches past what it may use."""
    found = refused_reach(source) if isinstance(source, str) else None
    if found is not None:
        what, line, why = found
        raise CheckFailed(f"{exercise}: your answer cell uses `{what}` (line {line}), which the capstone's answer may "
                          f"not use: {why}.")
