"""Wrong answers for lesson 08 (the capstone operator)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "08_capstone"
_SAVE = "ctx.save_for_backward(q, k, v, o, lse)"
# P as standard attention builds it, for one head per (batch, head): two spellings a learner reaches for.
_P_MATMUL = "torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)"
_P_BROADCAST = "torch.softmax((q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) * scale, dim=-1)"
# Every message that names P saved for the backward ends with this hint (course/lessons/lesson08.py).
_SAVES_P = "`ctx.save_for_backward(q, k, v, o, lse)` and nothing more; recompute P in the backward"

WRONG = [
    WrongSolution(_A, "flash_attention_triton", "saves-a-score-sized-tensor",
                  "keeps an Nq × Nk tensor per head for the backward, as standard attention keeps P",
                  edits=((_SAVE, "ctx.save_for_backward(q, k, v, o, lse, q.new_zeros(q.shape[:3] + k.shape[2:3]))"),),
                  hint=_SAVES_P),
    # The message names P and save_for_backward, not "1 matrix product(s) in PyTorch".
    WrongSolution(_A, "flash_attention_triton", "saves-p-from-a-matmul",
                  "builds P with a matrix product in the forward and saves it for the backward",
                  edits=((_SAVE, f"p = {_P_MATMUL}\n        ctx.save_for_backward(q, k, v, o, lse, p)"),),
                  hint=_SAVES_P),
    # The message names P, not "returned 55,488 elements, more than the inputs (13,056 bytes)".
    WrongSolution(_A, "flash_attention_triton", "saves-p-from-a-broadcast",
                  "builds P by broadcasting q against k (no matrix product) and keeps it on ctx for the backward",
                  edits=((_SAVE, f"{_SAVE}\n        ctx.p = {_P_BROADCAST}"),),
                  hint=_SAVES_P),
    # Recomputes P, but in PyTorch: the message counts elements against elements and says where P belongs.
    WrongSolution(_A, "flash_attention_triton", "recomputes-p-in-pytorch",
                  "recomputes P in the backward by broadcasting q against k in PyTorch",
                  edits=(("q, k, v, o, lse = ctx.saved_tensors",
                          "q, k, v, o, lse = ctx.saved_tensors\n            p = "
                          + _P_BROADCAST.replace("* scale", "* ctx.scale")),),
                  hint="the backward recomputes P in lesson 07's kernels. Neither builds P in PyTorch"),
    WrongSolution(_A, "flash_attention_triton", "kv-heads-expanded-not-summed",
                  "repeats K and V over the query heads for the backward and returns their gradients with H heads",
                  edits=(("_backward.attention_backward_bhnd(q, k, v, o, lse, do.contiguous(),",
                          "_backward.attention_backward_bhnd(q, k.repeat_interleave(q.shape[1] // k.shape[1], dim=1), "
                          "v.repeat_interleave(q.shape[1] // k.shape[1], dim=1), o, lse, do.contiguous(),"),),
                  hint=None),
] + kernel_answers(_A, "flash_attention", {"triton": ("08.flash_attention_triton", (
    "forward-ignores-causal", "backward-ignores-causal", "dk-dv-swapped", "backward-default-scale"))})
