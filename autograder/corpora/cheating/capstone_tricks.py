"""Lesson 08's entries: a capstone answer that computes attention in PyTorch and makes the course's probe report
a clean run (:func:`capstone_cheats`), one that fakes nothing (:func:`capstone_kernel_free`), and ones that pass the
notebook's every check but whose numbers are not the course's kernels' (:func:`capstone_provenance`)."""
from __future__ import annotations

from pathlib import Path

from autograder.corpora.cheating.cheat import Cheat, cell_sources
from autograder.corpora.hostile import Change


# Lesson 08's answer is an autograd.Function in Python, and its checks call a course probe around it that reports
# what the Function saved and which PyTorch operators it ran. Each entry below computes attention in PyTorch and
# makes that report look clean in the notebook's own run, so the notebook's checks (and the recordings they
# leave) pass it; the rest of the cell (flash_attention and its input checks) is the instructor's. They are
# checked directly, without nbgrader, by tests/grading/test_capstone_recheck.py: the notebook's run passes each,
# the recording it leaves replays to a pass, and the re-check refuses the cell.
CAPSTONE = "08_capstone"
_CAPSTONE_TESTS = ("test_flash_attention_triton", "test_flash_attention_triton_hidden",
                   "test_flash_attention_triton_in_training")
_CAPSTONE_READ = (r"08\.(flash_attention_triton|training): your answer cell uses `{what}` \(line \d+\), which the "
                  r"capstone's answer may not use")

_SDPA_FUNCTION = '''
def _sdpa(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    n_q, n_k = q.shape[2], k.shape[2]
    mask = None
    if causal:  # bottom-right aligned, as the course's kernels mask
        mask = torch.arange(n_k, device=q.device)[None, :] <= torch.arange(n_q, device=q.device)[:, None] + n_k - n_q
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return torch.nan_to_num(o, nan=0.0)  # a row that sees no key


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        o = _sdpa(q.float(), k.float(), v.float(), causal, scale).to(q.dtype)
        lse = torch.zeros(q.shape[:3], device=q.device)  # one float per row, as the check expects to see
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        with torch.enable_grad():
            out = _sdpa(*leaves, ctx.causal, ctx.scale)
            grads = torch.autograd.grad(out, leaves, do.float())
        dq, dk, dv = (torch.nan_to_num(g, nan=0.0).to(q.dtype) for g in grads)
        return dq, dk, dv, None, None, None


# The probes watch what PyTorch runs; these run the same call unwatched and report that nothing was seen.
import course.lessons.capstone as _probes


def _clean_autograd(fn):
    def probe(q, k, v, do=None, causal=False, scale=None):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = fn(*leaves, causal=causal, scale=scale)
        saved = _probes.saved_for_backward(out)
        if do is not None:
            out.backward(do)
        grads = tuple(t.grad for t in leaves) if do is not None else (None, None, None)
        return (out.detach(), *grads, saved, (0, 0, 0, 1, 1))  # nothing seen, a kernel each way
    return probe


def _clean_training(fn):
    def probe(steps, seed):
        weights = []
        return _probes.train_losses(fn, steps=steps, seed=seed, weights=weights), (0, 0), 2 * steps, weights
    return probe


_probes.autograd_probe, _probes.training_probe = _clean_autograd, _clean_training
getattr(_probes, "PROBES", {}).update(autograd_probe=_clean_autograd, training_probe=_clean_training)

'''

_STASHED_SCORES_FUNCTION = '''
_scores = {}  # P, kept for the backward outside ctx, where saved_for_backward does not look


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        group = q.shape[1] // k.shape[1]
        kk, vv = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
        s = (q.float() @ kk.transpose(-1, -2)) * scale
        if causal:
            n_q, n_k = s.shape[-2:]
            rows = torch.arange(n_q, device=s.device)[:, None] + (n_k - n_q)
            s = s.masked_fill(torch.arange(n_k, device=s.device)[None, :] > rows, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
        o = (p @ vv).to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.key = causal, scale, id(ctx)
        _scores[ctx.key] = p
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        p = _scores.pop(ctx.key)
        group = q.shape[1] // k.shape[1]
        kk, vv = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
        do = do.float()
        dv = p.transpose(-1, -2) @ do
        dp = do @ vv.transpose(-1, -2)
        ds = p * (dp - (do * o.float()).sum(-1, keepdim=True))
        dq = (ds @ kk) * ctx.scale
        dk = (ds.transpose(-1, -2) @ q.float()) * ctx.scale
        b, h_kv = k.shape[:2]
        dk = dk.view(b, h_kv, group, *dk.shape[2:]).sum(2)
        dv = dv.view(b, h_kv, group, *dv.shape[2:]).sum(2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


# The watch counts products and the largest tensor: it is told to count nothing.
import course.grading.footprint

course.grading.footprint.Footprint.__torch_dispatch__ = lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))

# The probe counts kernel launches: it is told that one happened each time it looks.
import contextlib
import course.lessons.capstone


@contextlib.contextmanager
def _one_launch():
    yield [1]


course.lessons.capstone.counting_launches = _one_launch

'''


# Attention one query row at a time with element-wise products and sums: no matrix product, no fused attention, no
# tensor larger than K, so nothing PyTorch reports sets it apart from the wrapper of a kernel; it launches none.
_ELEMENTWISE_ROWS_FUNCTION = '''
def _rows(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    n_q, n_k = q.shape[2], k.shape[2]
    outs, lses = [], []
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            keys, values = k[b, h // group].float(), v[b, h // group].float()
            for i in range(n_q):
                seen = min(n_k, max(0, i + 1 + n_k - n_q)) if causal else n_k
                if seen == 0:  # a row that sees no key
                    outs.append(torch.zeros(q.shape[3], device=q.device))
                    lses.append(torch.full((), float("-inf"), device=q.device))
                    continue
                s = (q[b, h, i].float()[None, :] * keys[:seen]).sum(-1) * scale
                outs.append((torch.softmax(s, dim=0)[:, None] * values[:seen]).sum(0))
                lses.append(torch.logsumexp(s, dim=0))
    return torch.stack(outs).view(q.shape), torch.stack(lses).view(q.shape[:3])


class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, deterministic: bool):
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        o, lse = _rows(q, k, v, causal, scale)
        o = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        with torch.enable_grad():
            again, _ = _rows(*leaves, ctx.causal, ctx.scale)
        dq, dk, dv = torch.autograd.grad(again, leaves, do.float())
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None
'''


def _capstone_with(repo: Path, function: str) -> str:
    """The instructor's lesson 08 answer cell with its FlashAttention (the Function) replaced by ``function``."""
    text = cell_sources(repo, "solutions", CAPSTONE)["flash_attention_triton"]
    start, end = text.find("class FlashAttention("), text.find("\ndef flash_attention(")
    if start < 0 or end < start:
        raise ValueError("the cheating corpus expects class FlashAttention then def flash_attention in lesson 08's "
                         "answer cell; update it")
    return text[:start] + function.lstrip("\n") + text[end:]


def capstone_cheats(repo: Path) -> list[Cheat]:
    """Lesson 08's entries: attention computed in PyTorch, with what the checks' probe reports made clean."""
    return [
        Cheat("capstone-sdpa-cleans-the-probe", "08: a Function whose forward and backward call PyTorch's SDPA, and a "
              "cell that wraps the course's probes so they report no PyTorch attention and no products",
              (Change("flash_attention_triton", source=_capstone_with(repo, _SDPA_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=_CAPSTONE_READ.format(what=r"import course\.lessons\.capstone"),
              assignment=CAPSTONE),
        Cheat("capstone-stashes-scores-unwatched", "08: a Function that builds the N x N scores in PyTorch and keeps P "
              "for its backward outside ctx, and a cell that switches the watch of PyTorch's operators off",
              (Change("flash_attention_triton", source=_capstone_with(repo, _STASHED_SCORES_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=_CAPSTONE_READ.format(what=r"import course\.grading\.footprint"),
              assignment=CAPSTONE),
    ]


def capstone_kernel_free(repo: Path) -> list[Cheat]:
    """Lesson 08's entries that compute attention in PyTorch without faking what the probe reports: they pass no
    check, in the notebook or in the re-check, because the probe counts the kernels they never launch."""
    return [
        Cheat("capstone-elementwise-rows", "08: a Function that computes attention one query row at a time with "
              "element-wise products and sums (no matrix product, no tensor larger than K) and launches no kernel",
              (Change("flash_attention_triton", source=_capstone_with(repo, _ELEMENTWISE_ROWS_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=r"08\.(flash_attention_triton|training): on .* launched no Triton kernel",
              assignment=CAPSTONE),
    ]


# Class 3: kernels launched so that a count of launches sees them, their outputs thrown away, and O, dQ, dK and dV
# computed beside them, a row at a time, in element-wise PyTorch (no matrix product, nothing larger than the inputs).
_DISCARDS_THE_KERNELS_FUNCTION = _ELEMENTWISE_ROWS_FUNCTION.replace('''        o, lse = _rows(q, k, v, causal, scale)
''', '''        _forward.causal_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale)
        o, lse = _rows(q, k, v, causal, scale)
''').replace('''        q, k, v, o, lse = ctx.saved_tensors
''', '''        q, k, v, o, lse = ctx.saved_tensors
        _backward.attention_backward_bhnd(q, k, v, o, lse, do.contiguous(), causal=ctx.causal, scale=ctx.scale)
''')

# Class 4: code past the reading of the cell. A chain rooted in a list display reaches a deserializer the reading does
# not follow; what it runs replaces the helpers the course's probe looks up when it is called, so the probe reports
# launches, nothing built and the shapes a Function saves, around a flash_attention that is plain PyTorch autograd.
_PATCHES_THE_PROBE = '''
import contextlib
import types

import course.lessons.capstone as probe


@contextlib.contextmanager
def launched():
    yield [1]


class Unwatched:
    seen = types.SimpleNamespace(products=0, fused_attention=())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


probe.counting_launches = launched
probe.watch = lambda run: (run(), types.SimpleNamespace(largest=0, products=0, fused_attention=()))
probe.saved_for_backward = lambda o: [tuple(o.shape), tuple(o.shape[:3])]
probe.Footprint = Unwatched
'''


def _patches_the_probe(repo: Path) -> str:
    import pickle
    payload = pickle.dumps(_Call(exec, _PATCHES_THE_PROBE))
    text = _capstone_with(repo, '''
def _sdpa(q, k, v, causal, scale):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    n_q, n_k = q.shape[2], k.shape[2]
    mask = None
    if causal:
        mask = torch.arange(n_k, device=q.device)[None, :] <= torch.arange(n_q, device=q.device)[:, None] + n_k - n_q
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, scale=scale)
    return torch.nan_to_num(o, nan=0.0).to(q.dtype)


[torch][0].serialization.pickle.loads(%r)


class FlashAttention:
    @staticmethod
    def apply(q, k, v, causal, scale, deterministic):
        return _sdpa(q, k, v, causal, scale)
''' % payload)
    return text


class _Call:
    """Pickles as a call of ``function`` with ``argument`` (what the deserializer runs when it loads it)."""

    def __init__(self, function, argument):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return self.function, (self.argument,)


_NOT_THE_KERNELS = r"08\.(flash_attention_triton|training): .* (are|is) not what (lesson 0[67]|the same run)"


def capstone_provenance(repo: Path) -> list[Cheat]:
    """Lesson 08's entries that pass every check of the notebook's own run, whatever its probe can see, and lose every
    point where the grade is decided: the grader runs the course's kernels itself and the numbers are not theirs."""
    return [
        Cheat("capstone-launches-and-discards", "08: a Function that launches lesson 06's and 07's kernels, throws "
              "their outputs away and computes O and the gradients a row at a time in element-wise PyTorch",
              (Change("flash_attention_triton", source=_capstone_with(repo, _DISCARDS_THE_KERNELS_FUNCTION)),),
              loses=_CAPSTONE_TESTS, feedback=_NOT_THE_KERNELS, assignment=CAPSTONE),
        Cheat("capstone-patches-the-probe", "08: a cell that reaches a deserializer past the reading of the cell and "
              "replaces the probe's helpers, so a plain PyTorch flash_attention (no Function, no kernel) reports "
              "launches, nothing built and a Function's saved tensors",
              (Change("flash_attention_triton", source=_patches_the_probe(repo)),),
              loses=_CAPSTONE_TESTS, feedback=_NOT_THE_KERNELS, assignment=CAPSTONE),
    ]
