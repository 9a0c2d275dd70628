"""Wrong answers for lesson 01 (naive attention)."""
from autograder.corpora.wrong import WrongSolution

_A = "01_naive_attention"

WRONG = [
    # -- exercise 1: attention in PyTorch -------------------------------------------------------
    WrongSolution(_A, "attention_torch", "all-zeros", "returns an empty result", source='''
def attention_torch(q, k, v, scale=None):
    return torch.zeros_like(q)
''', hint="the output is all zeros"),
    WrongSolution(_A, "attention_torch", "missing-scale", "forgets the 1/sqrt(D) scale",
                  edits=(("s = (q @ k.transpose(-1, -2)) * scale", "s = q @ k.transpose(-1, -2)"),),
                  hint="this is attention without the scale"),
    WrongSolution(_A, "attention_torch", "no-max-subtraction", "exponentiates raw scores, which overflows on peaky inputs",
                  edits=(("    s = s - s.amax(dim=-1, keepdim=True)\n", ""),), hint="exp() leaves float32's range"),
    WrongSolution(_A, "attention_torch", "softmax-over-queries", "normalises over the wrong axis",
                  edits=(("p = p / p.sum(dim=-1, keepdim=True)", "p = p / p.sum(dim=0, keepdim=True)"),),
                  hint="normalised over the wrong axis"),
    WrongSolution(_A, "attention_torch", "ignores-scale-argument", "always uses 1/sqrt(D), even when a scale is given",
                  edits=(("if scale is None:\n        scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0 / math.sqrt(q.shape[-1])"),),
                  hint="the scale you were given (0.5) is ignored"),
    # -- exercise 2: bytes read by the naive kernel ----------------------------------------------
    WrongSolution(_A, "naive_bytes_read", "elements-not-bytes", "returns elements instead of bytes",
                  edits=(("return n * per_program * torch.empty((), dtype=dtype).element_size()", "return n * per_program"),),
                  hint="elements, not bytes"),
    WrongSolution(_A, "naive_bytes_read", "forgets-q", "leaves out each program's own query row",
                  edits=(("per_program = d + 3 * n * d", "per_program = 3 * n * d"),), hint="its own query row"),
    WrongSolution(_A, "naive_bytes_read", "kv-read-once", "counts K and V once for the whole kernel",
                  edits=(("return n * per_program *", "return (n * d + 3 * n * d) *"),), hint="not once in total"),
    WrongSolution(_A, "naive_bytes_read", "k-read-once", "counts one sweep over K, not two",
                  edits=(("per_program = d + 3 * n * d", "per_program = d + 2 * n * d"),),
                  hint="all of K twice"),
    # -- exercise 3: the naive kernel, graded on the learner's best track. Each entry below is the
    # only track its submission attempts (the other two cells hold their stubs): a learner who studies
    # that language.
    WrongSolution(_A, "naive_triton", "pass2-without-max", "forgets to subtract m in the second sweep",
                  edits=(("p = tl.exp(scores - m)", "p = tl.exp(scores)"),),
                  hint="exp() leaves float32's range"),
    WrongSolution(_A, "naive_triton", "max-of-unscaled-scores", "takes the max of the scores before scaling them",
                  edits=(("s = tl.sum(q[None, :] * k, axis=1) * scale\n", "s = tl.sum(q[None, :] * k, axis=1)\n"),),
                  hint=None),
    WrongSolution(_A, "naive_triton", "padding-counts", "lets the padded keys of the last block into the sums",
                  edits=(("        scores = tl.where(key_ok, scores, float(\"-inf\"))\n", ""),),
                  hint="the padding keys of the last block count"),
    WrongSolution(_A, "naive_triton", "head-dim-truncated", "loads only the first 16 columns of each row",
                  edits=(("in_row = cols < head_dim", "in_row = cols < 16"),),
                  hint=None),
    WrongSolution(_A, "naive_cuda", "pass2-without-max", "forgets to subtract m in the second sweep",
                  edits=(("const float p = expf(score * scale - m);", "const float p = expf(score * scale);"),),
                  hint="exp() leaves float32's range"),
    WrongSolution(_A, "naive_cuda", "unguarded-row", "lets the spare threads of the last block read past the end of q",
                  edits=(("    if (row >= n_q) return;  // the last block may have more threads than rows\n", ""),),
                  hint=None),
    WrongSolution(_A, "naive_cuda", "sum-not-reset", "divides by a sum that also counts the first sweep",
                  edits=(("m = fmaxf(m, dot * scale);", "m = fmaxf(m, dot * scale);\n        l += 1.0f;"),),
                  hint=None),
    WrongSolution(_A, "naive_cuda", "does-not-compile", "leaves a syntax error in the kernel",
                  edits=(("l += p;", "l += p"),),
                  hint=None),
    WrongSolution(_A, "naive_metal", "pass2-without-max", "forgets to subtract m in the second sweep",
                  edits=(("const float p = exp(score * scale - m);", "const float p = exp(score * scale);"),),
                  hint="exp() leaves float32's range"),
    WrongSolution(_A, "naive_metal", "unguarded-row", "lets the spare threads of the rounded-up dispatch read past q",
                  edits=(("    if (row >= n_q) return;  // the dispatch is rounded up to whole threadgroups\n", ""),),
                  hint=None),
    WrongSolution(_A, "naive_metal", "last-key-skipped", "stops the second sweep one key early",
                  edits=(("    for (uint j = 0; j < n_k; ++j) {\n        device const float* k_row = k + j * d;\n        float score",
                          "    for (uint j = 0; j + 1 < n_k; ++j) {\n        device const float* k_row = k + j * d;\n        float score"),),
                  hint=None),
]
