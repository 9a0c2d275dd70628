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
    WrongSolution(_A, "flash_attention_triton", "kv-heads-expanded-not-summed",
                  "repeats K and V over the query heads for the backward and returns their gradients with H heads",
                  edits=(("_backward.attention_backward_bhnd(q, k, v, o, lse, do.contiguous(),",
                          "_backward.attention_backward_bhnd(q, k.repeat_interleave(q.shape[1] // k.shape[1], dim=1), "
                          "v.repeat_interleave(q.shape[1] // k.shape[1], dim=1), o, lse, do.contiguous(),"),),
                  hint=None),
] + kernel_answers(_A, "flash_attention", {"triton": ("08.flash_attention_triton", (
    "forward-ignores-causal", "backward-ignores-causal", "dk-dv-swapped", "backward-default-scale"))})
