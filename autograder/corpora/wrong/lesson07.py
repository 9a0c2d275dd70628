"""Wrong answers for lesson 07 (the backward pass)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "07_backward_pass"

# Three mistakes per track from the kernel-file corpora, each also tested there against the file. The
# Triton file holds both designs in one cell: its picks break both (a mistake of one design only, such as
# a non-atomic dQ, would leave the other step passing beside a wrong CUDA or Metal answer in one pack). The atomic
# steps add a fourth, a plain store where several blocks add into the same dQ rows (a race on dq).
_ATOMIC = {
    "cuda": ("07.backward_atomic_cuda", ("non-atomic-dq", "missing-delta", "mask-off-by-one", "dq-plain-store")),
    "metal": ("07.backward_atomic_metal", ("non-atomic-dq", "missing-delta", "cas-stores-instead-of-adds",
                                           "dq-plain-store")),
}
# Each split design also gets the atomic dQ of the other design (the walkthrough's mistake): its NaN rows must say
# that the block owns its rows and dq is not zeroed.
_SPLIT = {
    "cuda": ("07.backward_split_cuda", ("missing-syncthreads", "missing-delta-in-dq", "dq-loop-to-the-end",
                                        "dq-added-atomically")),
    "metal": ("07.backward_split_metal", ("dq-missing-barrier", "dq-loop-to-the-end", "p-without-lse",
                                          "dq-added-atomically")),
}
# dkdv-loop-from-zero gives right gradients in both designs; the checks measure the query blocks it loads.
_TRITON_ATOMIC = {"triton": ("07.backward_atomic_triton", ("missing-delta", "dkdv-loop-from-zero"))}
_TRITON_SPLIT = {"triton": ("07.backward_split_triton", ("p-without-lse",))}

WRONG = [
    # -- exercise 1: the backward in PyTorch ------------------------------------------------------------
    WrongSolution(_A, "backward_torch", "missing-delta", "computes dS = P ∘ dP without the row term Δ",
                  edits=(("ds = p * (dp - delta)", "ds = p * dp"),), hint="the Δ term is missing"),
    WrongSolution(_A, "backward_torch", "nan-on-empty-rows", "subtracts an LSE of -inf, so rows with no key give NaN",
                  edits=(("lse = torch.where(torch.isinf(lse), math.inf, lse.float())", "lse = lse.float()"),),
                  hint="the rows that see no key"),
    WrongSolution(_A, "backward_torch", "renormalised-p", "renormalises P row by row instead of rebuilding it from the LSE",
                  edits=(("p = torch.exp(s - lse[:, None])", "p = torch.softmax(s, dim=-1).nan_to_num(0.0)"),),
                  hint=None),
    WrongSolution(_A, "backward_torch", "dk-dv-swapped", "returns dV where dK belongs and the other way round",
                  edits=(("return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)",
                          "return dq.to(q.dtype), dv.to(k.dtype), dk.to(v.dtype)"),), hint="dK and dV are swapped"),
    # -- exercise 2: FLOPs --------------------------------------------------------------------------------
    WrongSolution(_A, "backward_flops", "no-recompute", "forgets that the atomic design recomputes S",
                  edits=(('"atomic": 5', '"atomic": 4'),), hint="recompute S = Q Kᵀ"),
    WrongSolution(_A, "backward_flops", "split-six", "counts 2 products for the dQ kernel instead of 3",
                  edits=(('"split": 7', '"split": 6'),), hint="3 products"),
    WrongSolution(_A, "backward_flops", "multiply-adds", "counts multiply-adds, not FLOPs",
                  edits=(("return 2 * products * n_q * n_k * d", "return products * n_q * n_k * d"),),
                  hint="a multiply-add is 2 FLOPs"),
    # -- exercise 5: bits that differ ------------------------------------------------------------------------
    WrongSolution(_A, "differing_elements", "values-not-bits", "compares values, so ±0 match and NaN differs",
                  edits=(("bits = torch.stack([r.view(torch.int32) for r in runs])", "bits = torch.stack(list(runs))"),),
                  hint="compare bits, not values"),
    WrongSolution(_A, "differing_elements", "first-two-runs", "compares only the first two runs",
                  edits=(("(bits != bits[0]).any(dim=0).sum()", "(bits[1] != bits[0]).sum()"),), hint="every run"),
    WrongSolution(_A, "differing_elements", "pairs", "counts (run, element) pairs, not elements",
                  edits=(("(bits != bits[0]).any(dim=0).sum()", "(bits != bits[0]).sum()"),), hint="count elements"),
    # -- exercises 3 and 4: the kernels, graded on the best track; each entry attempts one track
] + (kernel_answers(_A, "backward", _TRITON_ATOMIC) + kernel_answers(_A, "backward", _TRITON_SPLIT)
     + kernel_answers(_A, "backward_atomic", _ATOMIC)
     + kernel_answers(_A, "backward_split", _SPLIT))
