"""Wrong answers for lesson 02 (online softmax)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.triton import WRONG_KERNELS

_A = "02_online_softmax"

WRONG = [
    # -- exercise 1: traffic of the two softmaxes -------------------------------------------------
    WrongSolution(_A, "softmax_bytes", "three-passes-always", "counts three passes for the online softmax too",
                  edits=(("passes = 2 if online else 3", "passes = 3"),)),
    WrongSolution(_A, "softmax_bytes", "no-write", "forgets the write of the result",
                  edits=(("(passes + 1) * rows", "passes * rows"),)),
    WrongSolution(_A, "softmax_bytes", "elements-not-bytes", "counts elements instead of bytes",
                  edits=(("rows * cols * bytes_per_element", "rows * cols"),)),
    # -- exercise 2: merging two states in PyTorch --------------------------------------------------
    WrongSolution(_A, "merge_torch", "second-sum-not-rescaled", "rescales only the first state's sum",
                  edits=(("l_b * torch.exp(m_b - m_safe)", "l_b"),)),
    WrongSolution(_A, "merge_torch", "nan-on-empty", "does not guard two empty states",
                  edits=(("m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)", "m_safe = m"),)),
    WrongSolution(_A, "merge_torch", "sums-added-raw", "adds the sums as if they shared a max",
                  edits=(("l = l_a * torch.exp(m_a - m_safe) + l_b * torch.exp(m_b - m_safe)", "l = l_a + l_b"),)),
] + [
    # -- exercise 3: the kernel, with the same mistakes the Triton-track corpus makes in the file ----
    WrongSolution(_A, "online_softmax_kernel", w.name, w.mistake, edits=w.edits)
    for w in WRONG_KERNELS if w.exercise in ("02.online_softmax_triton", "02.online_softmax_merge_triton")
]
