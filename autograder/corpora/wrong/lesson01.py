"""Wrong answers for lesson 01 (naive attention)."""
from autograder.corpora.wrong import WrongSolution

_A = "01_naive_attention"

WRONG = [
    # -- exercise 1: attention in PyTorch -------------------------------------------------------
    WrongSolution(_A, "attention_torch", "all-zeros", "returns an empty result", source='''
def attention_torch(q, k, v, scale=None):
    return torch.zeros_like(q)
'''),
    WrongSolution(_A, "attention_torch", "missing-scale", "forgets the 1/sqrt(D) scale",
                  edits=(("s = (q @ k.transpose(-1, -2)) * scale", "s = q @ k.transpose(-1, -2)"),)),
    WrongSolution(_A, "attention_torch", "no-max-subtraction", "exponentiates raw scores, which overflows on peaky inputs",
                  edits=(("    s = s - s.amax(dim=-1, keepdim=True)\n", ""),)),
    WrongSolution(_A, "attention_torch", "softmax-over-queries", "normalises over the wrong axis",
                  edits=(("p = p / p.sum(dim=-1, keepdim=True)", "p = p / p.sum(dim=0, keepdim=True)"),)),
    WrongSolution(_A, "attention_torch", "ignores-scale-argument", "always uses 1/sqrt(D), even when a scale is given",
                  edits=(("if scale is None:\n        scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0 / math.sqrt(q.shape[-1])"),)),
    # -- exercise 2: bytes read by the naive kernel ----------------------------------------------
    WrongSolution(_A, "naive_bytes_read", "elements-not-bytes", "returns elements instead of bytes",
                  edits=(("return n * per_program * torch.empty((), dtype=dtype).element_size()", "return n * per_program"),)),
    WrongSolution(_A, "naive_bytes_read", "forgets-q", "leaves out each program's own query row",
                  edits=(("per_program = d + 2 * n * d", "per_program = 2 * n * d"),)),
    WrongSolution(_A, "naive_bytes_read", "kv-read-once", "counts K and V once for the whole kernel",
                  edits=(("return n * per_program *", "return (n * d + 2 * n * d) *"),)),
    WrongSolution(_A, "naive_bytes_read", "only-k", "reads K but forgets V",
                  edits=(("per_program = d + 2 * n * d", "per_program = d + n * d"),)),
    # -- exercise 3: the naive Triton kernel ------------------------------------------------------
    WrongSolution(_A, "naive_triton", "missing-rescale", "never rescales l and acc when the max grows",
                  edits=(("correction = tl.exp(m - m_new)", "correction = 1.0"),)),
    WrongSolution(_A, "naive_triton", "stale-max", "computes a new max but never stores it",
                  edits=(("        m = m_new\n", ""),)),
    WrongSolution(_A, "naive_triton", "last-key-skipped", "stops the key loop one early",
                  edits=(("for j in range(0, n_keys):", "for j in range(0, n_keys - 1):"),)),
    WrongSolution(_A, "naive_triton", "missing-scale", "forgets the softmax scale",
                  edits=(("score = tl.sum(q * k, axis=0) * scale", "score = tl.sum(q * k, axis=0)"),)),
    WrongSolution(_A, "naive_triton", "no-running-max", "sums exp(score) with no max at all, overflowing on peaky rows",
                  edits=(("p = tl.exp(score - m_new)", "p = tl.exp(score)"),
                         ("correction = tl.exp(m - m_new)", "correction = 1.0"))),
    WrongSolution(_A, "naive_triton", "head-dim-truncated", "loads only the first 16 columns of each row",
                  edits=(("in_row = cols < head_dim", "in_row = cols < 16"),)),
    # -- exercise 4: the naive kernel in CUDA C (run on the CPU runtime with memcheck and racecheck) --
    WrongSolution(_A, "naive_cuda", "missing-rescale", "never rescales l and acc when the max grows",
                  edits=(("const float correction = expf(m - m_new);", "const float correction = 1.0f;"),)),
    WrongSolution(_A, "naive_cuda", "unguarded-row", "lets the spare threads of the last block read past the end of q",
                  edits=(("    if (row >= n_q) return;  // the last block may have more threads than rows\n", ""),)),
    WrongSolution(_A, "naive_cuda", "stale-max", "computes a new max but never stores it",
                  edits=(("        m = m_new;\n", ""),)),
    WrongSolution(_A, "naive_cuda", "does-not-compile", "leaves a syntax error in the kernel",
                  edits=(("score *= scale;", "score *= scale"),)),
    # -- exercise 5: the naive kernel in Metal ----------------------------------------------------
    WrongSolution(_A, "naive_metal", "missing-rescale", "never rescales l and acc when the max grows",
                  edits=(("const float correction = exp(m - m_new);", "const float correction = 1.0f;"),)),
    WrongSolution(_A, "naive_metal", "unguarded-row", "lets the spare threads of the rounded-up dispatch read past q",
                  edits=(("    if (row >= n_q) return;  // the dispatch is rounded up to whole threadgroups\n", ""),)),
    WrongSolution(_A, "naive_metal", "last-key-skipped", "stops the key loop one early",
                  edits=(("for (uint j = 0; j < n_k; ++j) {", "for (uint j = 0; j + 1 < n_k; ++j) {"),)),
]
