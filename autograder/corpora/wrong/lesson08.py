"""Wrong answers for lesson 08 (the capstone operator)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "08_capstone"

WRONG = [
    WrongSolution(_A, "flash_attention_triton", "saves-a-score-sized-tensor",
                  "keeps an Nq × Nk tensor per head for the backward, as standard attention keeps P",
                  edits=(("ctx.save_for_backward(q, k, v, o, lse)",
                          "ctx.save_for_backward(q, k, v, o, lse, q.new_zeros(q.shape[:3] + k.shape[2:3]))"),),
                  hint=None),
    WrongSolution(_A, "flash_attention_triton", "heads-tiled-not-grouped",
                  "repeats K/V heads as 0, 1, 0, 1 where query heads 0 and 1 share K/V head 0",
                  edits=(("t.repeat_interleave(group, dim=1)", "t.repeat(1, group, 1, 1)"),), hint=None),
    WrongSolution(_A, "flash_attention_triton", "groups-not-summed", "returns the expanded dK and dV without summing "
                  "over each group", edits=(("return grad if h == kv_heads else grad.view(b, kv_heads, h // kv_heads, "
                                             "n, d).sum(dim=2)", "return grad"),), hint=None),
] + kernel_answers(_A, "flash_attention", {"triton": ("08.flash_attention_triton", (
    "forward-ignores-causal", "backward-ignores-causal", "dk-dv-swapped", "backward-default-scale"))})
