"""Lesson 08: what the checks of the capstone need from a learner's ``flash_attention``, as data.

The capstone's answer is Python (an autograd.Function around the course's kernels), so under the grader
it is checked like every Python exercise: the notebook records what the checks asked of it and the
grade comes from replaying those answers elsewhere (:mod:`course.recording`). Gradients and a
training run cannot be replayed from outputs alone, so each check calls a *probe* instead: one
forward and backward of the learner's function, returned as plain tensors and numbers together with
what the run saved for its backward and what it built in PyTorch.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["autograd_probe", "saved_for_backward", "TinyAttentionModel", "train_losses", "sdpa_attention",
           "training_probe"]


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


def autograd_probe(fn: Callable[..., torch.Tensor]) -> Callable[..., tuple]:
    """``probe(q, k, v, do, causal=, scale=)`` → (o, dq, dk, dv, saved shapes, (largest, products, fused)).

    One call of ``fn`` and, when ``do`` is given, one backward. ``largest`` is the most elements a PyTorch
    operator returned during the call, ``products`` the matrix products PyTorch made, ``fused`` the fused
    attention operators called (course.footprint); the kernels' own work is not PyTorch's and is not seen.
    """
    def probe(q, k, v, do=None, causal=False, scale=None):
        from course.footprint import watch
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

        saved = []

        def run():
            out = fn(*leaves, causal=causal, scale=scale)
            if isinstance(out, torch.Tensor):
                saved.append(saved_for_backward(out))  # before the backward frees them
                if do is not None and out.requires_grad:
                    out.backward(do)
            return out

        o, seen = watch(run)
        built = (seen.largest, seen.products, len(seen.fused_attention))
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
                 length: int = 24, device: str | torch.device | None = None) -> list[float]:
    """Next-token cross-entropy of each training step of a fresh TinyAttentionModel using ``attention``.

    Same seed, same initial weights and data for any ``attention``: two attentions that compute the same
    function with the same gradients give the same losses, step for step, up to float rounding. The model
    and its data live on ``device``, by default the tier's (:func:`course.tiers.device`): the GPU where
    the course's kernels run natively. The weights are drawn on the CPU first, so every device starts alike."""
    from course.tiers import device as tier_device
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
    return losses


def training_probe(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """``probe(steps, seed)`` → (the losses of a training run with ``fn`` as the model's attention,
    (matrix products, fused attention calls) PyTorch made inside ``fn``'s calls)."""
    def probe(steps: int, seed: int) -> tuple[list[float], tuple[int, int]]:
        from course.footprint import Footprint, _Enough
        built = [0, 0]

        def watched(*args, **kwargs):
            mode = Footprint()
            try:
                with mode:  # stops the call at a fused attention operator: the run ends there
                    return fn(*args, **kwargs)
            finally:
                built[0] += mode.seen.products
                built[1] += len(mode.seen.fused_attention)
        try:
            losses = train_losses(watched, steps=steps, seed=seed)
        except _Enough:
            losses = []
        return losses, tuple(built)
    probe.__name__ = getattr(fn, "__name__", "flash_attention")
    return probe
