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

# -- the fp8 section --------------------------------------------------------------------------------------------------
WRONG += [
    WrongSolution(_A, "fp8_value", "fn-bias-for-fnuz", "decodes the fnuz formats with the fn formats' bias (7 and 15)",
                  edits=(('"e4m3fnuz": (4, 3, 8, True), "e5m2fnuz": (5, 2, 16, True)',
                          '"e4m3fnuz": (4, 3, 7, True), "e5m2fnuz": (5, 2, 15, True)'),),
                  hint="exponent bias is one more"),
    WrongSolution(_A, "fp8_value", "negative-zero-in-fnuz", "reads 0x80 as -0 in the fnuz formats",
                  edits=(("    if fnuz and bits == 0x80:\n        return math.nan", "    if False:\n        return math.nan"),),
                  hint="0x80 (sign set, all else zero) is the one NaN"),
    WrongSolution(_A, "fp8_value", "fn-specials-in-fnuz", "gives the fnuz formats the fn formats' infinities and NaNs",
                  edits=(("    if not fnuz and exponent_bits == 5 and e == top:", "    if exponent_bits == 5 and e == top:"),
                         ("    if not fnuz and exponent_bits == 4 and e == top", "    if exponent_bits == 4 and e == top")),
                  hint="fnuz has no infinities and no NaN but 0x80"),
    WrongSolution(_A, "fp8_scale", "e4m3-everywhere", "scales every tensor onto e4m3, also one whose values need e5m2",
                  edits=(("return (448.0 if fits_e4m3 else 57344.0) / amax", "return 448.0 / amax"),),
                  hint="also those whose values need e5m2's range"),
    WrongSolution(_A, "fp8_scale", "e5m2-max-clips", "scales onto e5m2's largest number even for tensors that take e4m3",
                  edits=(("return (448.0 if fits_e4m3 else 57344.0) / amax", "return 57344.0 / amax"),),
                  hint="everything above 448 would clip"),
    WrongSolution(_A, "fp8_scale", "no-scale", "casts without a scale, so values beyond the format's maximum clip",
                  edits=(("return (448.0 if fits_e4m3 else 57344.0) / amax", "return 1.0"),),
                  hint="values beyond the format's largest number clip"),
    WrongSolution(_A, "fp8_scale", "descale-returned", "returns amax / max, the descale",
                  edits=(("return (448.0 if fits_e4m3 else 57344.0) / amax", "return amax / (448.0 if fits_e4m3 else 57344.0)"),),
                  hint="this is the descale"),
    WrongSolution(_A, "score_error", "one-operand-rounded", "counts the rounding of only one of q and k",
                  edits=(("return ((1 + u) ** 2 - 1) * abs_dot", "return u * abs_dot"),),
                  hint="both q and k are rounded"),
    WrongSolution(_A, "score_error", "first-order", "keeps only the first-order term 2u",
                  edits=(("return ((1 + u) ** 2 - 1) * abs_dot", "return 2 * u * abs_dot"),),
                  hint="2u is the first-order bound"),
    WrongSolution(_A, "score_error", "full-step", "takes the whole step 2^-M as the rounding error",
                  edits=(("u = 2.0 ** -(mantissa_bits + 1)", "u = 2.0 ** -mantissa_bits"),),
                  hint="half of it"),
    WrongSolution(_A, "fp8_choices", "size-not-spread", "answers that e5m2 is needed for the larger values",
                  edits=(('return ("b", "c")', 'return ("a", "c")'),), hint="size alone never needs e5m2"),
    WrongSolution(_A, "fp8_choices", "fnuz-no-nan", "answers that fnuz has no NaN",
                  edits=(('return ("b", "c")', 'return ("b", "a")'),), hint="exactly one NaN"),
    WrongSolution(_A, "fp8_choices", "fnuz-byte-order", "answers that fnuz reorders the bytes",
                  edits=(('return ("b", "c")', 'return ("b", "b")'),), hint="the bit layout is the same"),
] + kernel_answers(_A, "fp8_forward", {"triton": ("08.fp8_forward_triton", (
    "missing-qk-descale", "missing-v-descale", "qk-descale-twice", "v-descale-twice"))})
