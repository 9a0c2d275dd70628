"""Wrong answers for lesson 02 (online softmax)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
from autograder.corpora.wrong.triton import WRONG_KERNELS

_A = "02_online_softmax"

WRONG = [
    # -- exercise 1: traffic of the two softmaxes -------------------------------------------------
    WrongSolution(_A, "softmax_bytes", "three-passes-always", "counts three passes for the online softmax too",
                  edits=(("passes = 2 if online else 3", "passes = 3"),),
                  hint="reads the matrix twice, not three times"),
    WrongSolution(_A, "softmax_bytes", "no-write", "forgets the write of the result",
                  edits=(("(passes + 1) * rows", "passes * rows"),),
                  hint="one sweep of the matrix short in both versions"),
    WrongSolution(_A, "softmax_bytes", "elements-not-bytes", "counts elements instead of bytes",
                  edits=(("rows * cols * bytes_per_element", "rows * cols"),), hint="elements, not bytes"),
    # -- exercise 2: merging two states in PyTorch --------------------------------------------------
    WrongSolution(_A, "merge_torch", "second-sum-not-rescaled", "rescales only the first state's sum",
                  edits=(("l_b * torch.exp(m_b - m_safe)", "l_b"),), hint="l_b is not rescaled"),
    WrongSolution(_A, "merge_torch", "nan-on-empty", "does not guard two empty states",
                  edits=(("m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)", "m_safe = m"),),
                  hint="exp(−inf − (−inf)) = NaN"),
    WrongSolution(_A, "merge_torch", "sums-added-raw", "adds the sums as if they shared a max",
                  edits=(("l = l_a * torch.exp(m_a - m_safe) + l_b * torch.exp(m_b - m_safe)", "l = l_a + l_b"),),
                  hint="the sums are added as they are"),
] + [
    # -- exercise 3: the kernel, with the same mistakes the Triton-track corpus makes in the file ----
    WrongSolution(_A, "online_softmax_kernel", w.name, w.mistake, edits=w.edits, hint=w.hint)
    for w in WRONG_KERNELS if w.exercise in ("02.online_softmax_triton", "02.online_softmax_merge_triton")
] + [
    # -- exercise 4: one sweep over the keys, graded on the best track; each entry attempts one track --
    WrongSolution(_A, f"online_attention_{track}", w.name, w.mistake, edits=w.edits, hint=w.hint)
    for track, entries in (("triton", WRONG_KERNELS), ("cuda", WRONG_CUDA_KERNELS), ("metal", WRONG_METAL_KERNELS))
    for w in entries if getattr(w, "exercise", getattr(w, "key", "")) in
    ("02.online_softmax_attention_triton", "02.online_softmax_cuda", "02.online_softmax_metal")
]
