"""A hint only with evidence: every hint appears for its mistake, and not for another mistake that gives
the same wrong ratio, a number that only some values fit, or an output two mistakes explain equally.

The learners' mistakes are written out here as the functions a learner would hand in; the checks are
the real ones (course.check and the comparisons of course.grading.compare_attention and compare_values).
"""
from __future__ import annotations

import math
import re

import pytest
import torch

import course
from course.models import roofline
from course.grading.compare_attention import check_attention, check_backward
from course.grading.compare_values import check_merge_states, check_softmax
from course.errors import CheckFailed
from course.inputs import Case


def failure(exercise: str, fn, **options) -> str:
    with pytest.raises(CheckFailed) as info:
        course.check(exercise, fn, **options)
    return str(info.value)


def hint_of(message: str) -> str | None:
    lines = [line.strip()[len("hint:"):].strip() for line in message.splitlines() if line.strip().startswith("hint:")]
    assert len(lines) <= 1, message
    return lines[0] if lines else None


def ratio_of(message: str) -> float:
    return float(re.search(r"\(([0-9.e+-]+)× the right value\)", message).group(1))


# ------------------------------------------------------------------------------------------------
# Numbers: a mistake is a formula, and its hint needs every value the learner's function returned
# ------------------------------------------------------------------------------------------------

def flops(factor, lengths="qk", d_power=1):
    def attention_flops(n_q, n_k, d):
        a, b = {"qk": (n_q, n_k), "qq": (n_q, n_q), "kk": (n_k, n_k)}[lengths]
        return factor * a * b * d ** d_power
    return attention_flops


@pytest.mark.parametrize("wrong, words", [
    (flops(2), "either a matmul is missing or a multiply-add was counted as 1 FLOP"),
    (flops(1), "multiply-adds of one matmul"),
    (flops(4, d_power=2), "grows as D²"),
    (flops(4, d_power=0), "D is missing"),
    (flops(4, "qq"), "Nq is used for both lengths"),
    (flops(4, "kk"), "Nk is used for both lengths"),
])
def test_each_flop_mistake_gets_its_hint(wrong, words):
    assert words in hint_of(failure("00.attention_flops", wrong))


def test_one_matmul_and_one_flop_per_multiply_add_share_one_true_hint():
    """The two mistakes give the same number for every argument: the one hint names both."""
    one_matmul = flops(2)

    def macs_as_flops(n_q, n_k, d):
        return (n_q * n_k * d) + (n_q * n_k * d)  # two matmuls, one FLOP per multiply-add
    assert hint_of(failure("00.attention_flops", one_matmul)) == hint_of(failure("00.attention_flops", macs_as_flops))
    text = hint_of(failure("00.attention_flops", one_matmul))
    assert "a matmul is missing" in text and "1 FLOP" in text


def intensity(elements=lambda n, d: 4 * n * d, per_element=True, flop_factor=4):
    def flash_intensity(n, d, bytes_per_element):
        moved = elements(n, d) * (bytes_per_element if per_element else 1)
        return flop_factor * n * n * d / moved
    return flash_intensity


ONLY_KV = intensity(elements=lambda n, d: 2 * n * d)
NO_BYTES_PER_ELEMENT = intensity(per_element=False)


@pytest.mark.parametrize("wrong, words", [
    (NO_BYTES_PER_ELEMENT, "remember the bytes per element"),
    (ONLY_KV, "Q is read and O is written too"),
    (intensity(elements=lambda n, d: 3 * n * d), "O is written once too"),
    (intensity(elements=lambda n, d: 4 * n * d + n * n), "S never reaches global memory"),
    (intensity(flop_factor=2), "FLOPs are half"),
    (lambda n, d, bytes_per_element: 4 * n * d * bytes_per_element / (4 * n * n * d), "FLOPs per byte"),
])
def test_each_intensity_mistake_gets_its_hint(wrong, words):
    assert words in hint_of(failure("00.flash_intensity", wrong))


def test_only_k_and_v_is_not_told_to_remember_the_bytes_per_element():
    """Both mistakes return 2× the right intensity where bytes_per_element = 2 (the first case): the ratio
    is the same, the hints are not."""
    kv, elements = failure("00.flash_intensity", ONLY_KV), failure("00.flash_intensity", NO_BYTES_PER_ELEMENT)
    assert ratio_of(kv) == ratio_of(elements) == 2
    assert "bytes per element" not in hint_of(kv) and "Q is read" in hint_of(kv)
    assert "Q is read" not in hint_of(elements) and "bytes per element" in hint_of(elements)


def test_two_mistakes_that_fit_every_value_get_no_hint():
    """With bytes_per_element = 2 everywhere, counting only K and V and forgetting the bytes per element
    give the same numbers: no hint names either."""
    arguments = [dict(n=128, d=64, bytes_per_element=2), dict(n=300, d=32, bytes_per_element=2)]
    for wrong in (ONLY_KV, NO_BYTES_PER_ELEMENT):
        message = failure("00.flash_intensity", wrong, arguments=arguments)
        assert "returned" in message and hint_of(message) is None


def test_a_mistake_that_fits_only_some_values_gets_no_hint():
    def half_sometimes(n_q, n_k, d):  # half when Nq = Nk, right otherwise: no one mistake gives that
        return 2 * n_q * n_k * d if n_q == n_k else 4 * n_q * n_k * d
    message = failure("00.attention_flops", half_sometimes)
    assert ratio_of(message) == 0.5 and hint_of(message) is None


def test_a_later_error_leaves_the_wrong_value_and_no_hint():
    def breaks_later(n_q, n_k, d):
        if n_q > 1000:
            raise ZeroDivisionError("later")
        return 2 * n_q * n_k * d
    message = failure("00.attention_flops", breaks_later)
    assert "returned" in message and "ZeroDivisionError" not in message and hint_of(message) is None


def test_a_wrong_number_never_looks_like_the_right_one():
    """Off by 128 bytes in 69 million: both numbers in full, not "6.92e+07" twice, and the ratio is not "1"."""
    def right(n_q, n_k, d, block_m, bytes_per_element):  # written out: an answer may not use the course's count
        return bytes_per_element * (2 * n_q * d + -(-n_q // block_m) * 2 * n_k * d) + 4 * n_q

    def off_by_a_little(n_q, n_k, d, block_m, bytes_per_element):
        return right(n_q, n_k, d, block_m, bytes_per_element) + (128 if n_q == 4096 else 0)
    message = failure("03.tiled_bytes", off_by_a_little)
    got, want = re.search(r"returned ([\d,]+), expected ([\d,]+) \(([\d.]+)× the right value\)", message).group(1, 2)
    assert int(got.replace(",", "")) - int(want.replace(",", "")) == 128, message
    assert ratio_of(message) != 1, message

    def a_little_high(n, d, bytes_per_element):  # not whole numbers: as many digits as it takes
        return roofline.arithmetic_intensity(roofline.attention_flops(n, n, d), 4 * n * d * bytes_per_element) * 1.00001
    message = failure("00.flash_intensity", a_little_high)
    got, want = re.search(r"returned ([\d.e+]+), expected ([\d.e+]+)", message).group(1, 2)
    assert got != want and float(got) > float(want), message


def test_counting_the_sector_each_lane_starts_in_fails_on_the_straddle_with_a_sentence():
    """Offset 8, stride 16, 16 bytes: every lane's bytes end in the next sector. 17 is right, start sectors give 16."""
    def start_sectors(offset_bytes, stride_bytes, access_bytes):
        return len({(offset_bytes + lane * stride_bytes) // 32 for lane in range(32)})
    message = failure("04.warp_sectors", start_sectors)
    assert "offset_bytes=8, stride_bytes=16, access_bytes=16) returned 16, expected 17" in message
    assert "straddle a sector boundary" in hint_of(message)


_KV_READS = roofline.naive_kernel_bytes_read(1, 1, 1, 1) - 1  # counted here: an answer may not use the course's count


def naive_bytes(q_row=1, kv=None, programs=None, per_element=True):
    reads = roofline.naive_kernel_bytes_read(1, 1, 1, 1) - 1  # N × D tensors of K and V per program

    def naive_bytes_read(n, d, dtype):
        size = torch.empty((), dtype=dtype).element_size() if per_element else 1
        return size * (n if programs is None else programs) * (q_row * d + (reads if kv is None else kv(reads)) * n * d)
    return naive_bytes_read


@pytest.mark.parametrize("wrong, words", [
    (naive_bytes(per_element=False), "elements, not bytes"),
    (naive_bytes(q_row=0), "its own query row"),
    (naive_bytes(kv=lambda r: r - 1), "every program reads"),
    (naive_bytes(programs=1), "one program reads"),
    (naive_bytes(q_row=2), "O is written, not read"),
    (lambda n, d, dtype: torch.empty((), dtype=dtype).element_size() * (n * d + _KV_READS * n * d),
     "not once in total"),
])
def test_each_naive_bytes_mistake_gets_its_hint(wrong, words):
    assert words in hint_of(failure("01.naive_bytes_read", wrong))


def softmax_bytes(online_passes, safe_passes, write=1, per_element=True):
    def count(rows, cols, bytes_per_element, online):
        passes = online_passes if online else safe_passes
        return (passes + write) * rows * cols * (bytes_per_element if per_element else 1)
    return count


ONLINE_ONE_PASS = softmax_bytes(1, 3)
NO_WRITE = softmax_bytes(2, 3, write=0)
SAFE_TWO_PASSES = softmax_bytes(2, 2)


@pytest.mark.parametrize("wrong, words", [
    (softmax_bytes(2, 3, per_element=False), "elements, not bytes"),
    (NO_WRITE, "one sweep of the matrix short in both versions"),
    (softmax_bytes(3, 3), "reads the matrix twice, not three times"),
    (ONLINE_ONE_PASS, "still reads the matrix twice"),
    (SAFE_TWO_PASSES, "safe softmax reads the matrix three times"),
    (softmax_bytes(3, 2), "swapped"),
])
def test_each_softmax_bytes_mistake_gets_its_hint(wrong, words):
    assert words in hint_of(failure("02.softmax_bytes", wrong))


def test_online_as_one_pass_is_not_told_to_count_the_write():
    """On an online argument set both return 2/3 of the right count; only the values for the safe softmax
    tell the two apart."""
    online_only = [dict(rows=4096, cols=4096, bytes_per_element=2, online=True)]
    one_pass, no_write = (failure("02.softmax_bytes", f, arguments=online_only) for f in (ONLINE_ONE_PASS, NO_WRITE))
    assert ratio_of(one_pass) == ratio_of(no_write) and hint_of(one_pass) is None and hint_of(no_write) is None
    one_pass, no_write = failure("02.softmax_bytes", ONLINE_ONE_PASS), failure("02.softmax_bytes", NO_WRITE)
    assert "write" not in hint_of(one_pass).split(":")[0] and "twice" in hint_of(one_pass)
    assert "short in both versions" in hint_of(no_write)
    safe_two = failure("02.softmax_bytes", SAFE_TWO_PASSES)
    assert "three times" in hint_of(safe_two) and "short in both" not in hint_of(safe_two)


# ------------------------------------------------------------------------------------------------
# Attention: the mistake recomputed, in float64, must give the learner's output
# ------------------------------------------------------------------------------------------------

def one_pass(block: int, rescale_l=True, rescale_acc=True, keep_max=True, second_pass_max=True):
    """Attention as a one-pass kernel does it, ``block`` keys per step, with parts of the update left out."""
    def attend(q, k, v, causal=False, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q @ k.transpose(-1, -2)) * scale
        m = torch.full(s.shape[:-1], float("-inf"))
        l = torch.zeros(s.shape[:-1])
        acc = torch.zeros(*s.shape[:-1], v.shape[-1])
        for j in range(0, s.shape[-1], block):
            sb = s[..., j:j + block]
            m_new = torch.maximum(m, sb.amax(-1))
            c = torch.exp(m - m_new)
            p = torch.exp(sb - m_new[..., None])
            l = (l * c if rescale_l else l) + p.sum(-1)
            acc = (acc * c[..., None] if rescale_acc else acc) + p @ v[..., j:j + block, :]
            if keep_max:
                m = m_new
        return acc / l[..., None]
    return attend


def two_pass_unshifted_acc(q, k, v, scale=None):
    """Pass 1 finds m; pass 2 sums l against it, but acc from exp(s) unshifted."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.T) * scale
    m = s.amax(-1, keepdim=True)
    return (torch.exp(s) @ v) / torch.exp(s - m).sum(-1, keepdim=True)


NORMAL = [Case(33, 70, 16, seed=3)]
PEAKY = [Case(17, 40, 16, kind="peaky", seed=4)]


def attention_failure(fn, cases=NORMAL, **options) -> str:
    with pytest.raises(CheckFailed) as info:
        check_attention("t", fn, cases, **options)
    return str(info.value)


@pytest.mark.parametrize("block", [1, 16, 32])
def test_missing_rescale_is_named_per_key_and_per_block(block):
    assert "l and acc are not rescaled" in hint_of(attention_failure(one_pass(block, rescale_l=False, rescale_acc=False)))
    assert hint_of(attention_failure(one_pass(block, rescale_acc=False))).startswith("acc is not rescaled")
    assert hint_of(attention_failure(one_pass(block, rescale_l=False))).startswith("l is not rescaled")


def test_a_block_size_no_kernel_uses_is_no_evidence():
    message = attention_failure(one_pass(12, rescale_acc=False))
    assert "wrong answer" in message and hint_of(message) is None


@pytest.mark.parametrize("wrong", [
    one_pass(16, keep_max=False),
    two_pass_unshifted_acc,
    lambda q, k, v, scale=None: torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=0) @ v,
    lambda q, k, v, scale=None: torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v * 1.3,
])
def test_other_mistakes_are_not_called_a_missing_rescale(wrong):
    message = attention_failure(wrong)
    assert "wrong answer" in message
    assert "not rescaled" not in (hint_of(message) or "")


@pytest.mark.parametrize("wrong, words", [
    (one_pass(16, keep_max=False), "only the last step's keys count"),
    (two_pass_unshifted_acc, "times exp(m)"),
    (lambda q, k, v, scale=None: torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=0) @ v, "wrong axis"),
    (lambda q, k, v, scale=None: torch.exp(q @ k.T / 4 - (q @ k.T / 4).amax(-1, keepdim=True)) @ v, "division by the row sum"),
    (lambda q, k, v, scale=None: torch.softmax(q @ k[:-1].T / 4, -1) @ v[:-1], "the last key is left out"),
    (lambda q, k, v, scale=None: torch.zeros_like(q), "all zeros"),
])
def test_attention_mistakes_get_their_hints(wrong, words):
    assert words in hint_of(attention_failure(wrong))


def test_all_zeros_names_the_mistake_the_case_points_to():
    """An all-zero output where the case itself names a likely cause: in a causal case whose rows see no key before
    their diagonal one (Nq = Nk = 1), the mask hiding the diagonal; in a case of one key, a key loop stopping one
    early. Elsewhere, and for a causal case with keys before the diagonal, the plain question."""
    zeros = lambda q, k, v, causal=False, scale=None: torch.zeros_like(q)  # noqa: E731
    causal_one = hint_of(attention_failure(zeros, [Case(1, 1, 16, causal=True, seed=5)]))
    assert causal_one.startswith("the output is all zeros") and "a causal mask that hides the diagonal" in causal_one
    one_key = hint_of(attention_failure(zeros, [Case(1, 1, 16, seed=5)]))
    assert one_key.startswith("the output is all zeros") and "stops one early never reaches it" in one_key
    for case in (Case(17, 17, 16, causal=True, seed=5), Case(3, 5, 16, seed=5)):
        plain = hint_of(attention_failure(zeros, [case]))
        assert plain.startswith("the output is all zeros") and "diagonal" not in plain and "one key" not in plain


def test_a_scaled_wrong_answer_gets_no_hint():
    """Nothing known gives 1.3 × the right answer: the check says what is wrong and guesses nothing."""
    message = attention_failure(lambda q, k, v, scale=None: 1.3 * torch.softmax(q @ k.T / 4, -1) @ v)
    assert "wrong answer" in message and hint_of(message) is None


def test_overflow_hint_only_where_exp_overflows():
    def no_max(q, k, v, scale=None):
        e = torch.exp(q @ k.T / math.sqrt(q.shape[-1]))
        return (e / e.sum(-1, keepdim=True)) @ v
    assert "range" in hint_of(attention_failure(no_max, PEAKY))

    def one_nan_row(q, k, v, scale=None):  # NaN for another reason, in one row of the same peaky case
        out = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1) @ v
        out[0] = float("nan")
        return out
    message = attention_failure(one_nan_row, PEAKY)
    assert "NaN in 1 of 17 rows" in message and hint_of(message) is None
    # Every row NaN in a normal case: the hint names the two ways a loop gets there (no key ever added, or the first
    # rescale inverted) as possibilities, not the overflow of exp, which this case cannot reach.
    all_nan = lambda q, k, v, scale=None: torch.full_like(q, float("nan"))  # noqa: E731
    message = attention_failure(all_nan, key_blocks=False)  # a normal case, no loop over key blocks to blame
    assert "NaN" in message and hint_of(message) is None
    # The tiled kernels' checks (lesson 03 on) name the two ways a loop over key blocks makes every row NaN.
    with pytest.raises(CheckFailed) as info:
        check_attention("03.tiled_torch", all_nan, NORMAL)
    assert hint_of(str(info.value)).startswith("every row is NaN") and "range" not in hint_of(str(info.value))


def test_rows_that_see_no_key_get_the_empty_row_hint_and_nothing_else_does():
    def unguarded(q, k, v, causal=False, scale=None):
        s = (q @ k.T) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(~course.reference.causal_mask(*s.shape), float("-inf"))
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)
    message = attention_failure(unguarded, [Case(20, 9, 16, causal=True, seed=2)], pass_causal=True, with_lse=True)
    assert "NaN" in message and "see no key" in hint_of(message)


def test_a_peaky_argmax_output_is_no_evidence_for_a_missing_scale():
    """On peaky rows the unscaled softmax and several other mistakes all give V at each row's argmax."""
    no_scale = lambda q, k, v, scale=None: torch.softmax(q @ k.T, -1) @ v  # noqa: E731
    assert "without the scale" in hint_of(attention_failure(no_scale))
    message = attention_failure(no_scale, [Case(17, 17, 16, kind="peaky", seed=1)])
    assert "wrong answer" in message and hint_of(message) is None


def test_an_ignored_scale_argument_is_named_with_the_scale():
    def default_scale(q, k, v, scale=None):
        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1) @ v
    message = attention_failure(default_scale, [Case(17, 20, 32, seed=11)], scale=0.5, pass_scale=True)
    assert "scale=0.5" in message.splitlines()[0] and "(0.5) is ignored" in hint_of(message)


@pytest.mark.parametrize("wrong_lse, words", [
    (lambda o, lse, m: lse * 1.4426950408889634, "base-2 units"),
    (lambda o, lse, m: lse - m, "the running max m_i is missing"),
    (lambda o, lse, m: m, "the log(l_i) term is missing"),
    (lambda o, lse, m: lse + m, "counted twice"),  # P = exp(S) with no max subtracted, then m + log(l)
    (lambda o, lse, m: lse + 0.5, None),
])
def test_lse_hints(wrong_lse, words):
    def forward(q, k, v, causal=False, scale=None):
        out = course.attention(q, k, v, causal, scale)
        s = (q.double() @ k.double().T) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(~course.reference.causal_mask(*s.shape), float("-inf"))
        return out.o.float(), wrong_lse(out.o, out.lse, s.amax(-1)).float()
    message = attention_failure(forward, [Case(17, 40, 16, causal=True, seed=5)], pass_causal=True, with_lse=True)
    assert "wrong LSE" in message
    assert (words in hint_of(message)) if words else hint_of(message) is None


# ------------------------------------------------------------------------------------------------
# Softmax: "rows do not sum to 1" only when that is what the output shows
# ------------------------------------------------------------------------------------------------

SOFTMAX = [Case(9, 300, 16, seed=6)]


def softmax_failure(fn, cases=SOFTMAX) -> str:
    with pytest.raises(CheckFailed) as info:
        check_softmax("t", fn, cases)
    return str(info.value)


def second_pass_without_max(x):
    m = x.amax(-1, keepdim=True)
    return torch.exp(x) / torch.exp(x - m).sum(-1, keepdim=True)


def online_without_rescale(block):
    def softmax(x):
        m, l = torch.full(x.shape[:-1] + (1,), float("-inf")), torch.zeros(x.shape[:-1] + (1,))
        for j in range(0, x.shape[-1], block):
            m = torch.maximum(m, x[..., j:j + block].amax(-1, keepdim=True))
            l = l + torch.exp(x[..., j:j + block] - m).sum(-1, keepdim=True)
        return torch.exp(x - m) / l
    return softmax


def test_second_pass_without_the_max_is_not_told_to_divide_by_the_running_sum():
    text = hint_of(softmax_failure(second_pass_without_max))
    assert "exp(m)" in text and "without subtracting the max" in text
    assert "rescale" not in text and "sum" not in text.split(":")[0]


@pytest.mark.parametrize("block", [32, 128])
def test_unrescaled_sum_is_named(block):
    assert "l is not rescaled" in hint_of(softmax_failure(online_without_rescale(block)))


def test_rows_that_do_not_sum_to_one_are_said_so_only_when_they_are_scaled_rows():
    assert "times a constant" in hint_of(softmax_failure(lambda x: torch.softmax(x, -1) * 1.3))
    message = softmax_failure(lambda x: torch.softmax(x * 1.1, -1))  # rows sum to 1 and are still wrong
    assert "wrong" in message and hint_of(message) is None


def test_softmax_overflow_hint_only_for_overflowing_entries():
    peaky = [Case(5, 40, 16, kind="peaky", seed=7)]
    no_max = lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)  # noqa: E731
    assert "overflows" in hint_of(softmax_failure(no_max, peaky))
    stale = lambda x: torch.exp(x + float("inf")) / 1.0  # noqa: E731  (inf everywhere, as with m stuck at -inf)
    message = softmax_failure(stale, peaky)
    assert "Inf" in message and hint_of(message) is None


# ------------------------------------------------------------------------------------------------
# Merged states and gradients
# ------------------------------------------------------------------------------------------------

def merge(rescale_a=True, rescale_b=True):
    def merge_states(m_a, l_a, m_b, l_b):
        m = torch.maximum(m_a, m_b)
        safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        return m, (l_a * torch.exp(m_a - safe) if rescale_a else l_a) + (l_b * torch.exp(m_b - safe) if rescale_b else l_b)
    return merge_states


@pytest.mark.parametrize("wrong, words", [
    (merge(rescale_b=False), "l_b is not rescaled"),
    (merge(rescale_a=False), "l_a is not rescaled"),
    (merge(False, False), "added as they are"),
])
def test_merge_hints(wrong, words):
    with pytest.raises(CheckFailed) as info:
        check_merge_states("t", wrong, [Case(7, 40, 16, seed=1)])
    assert words in hint_of(str(info.value))


def backward(q, k, v, o, lse, do, causal=False, scale=None):
    return tuple(g.to(q.dtype) for g in course.attention_backward(q, k, v, do, causal, scale))


def backward_failure(fn, cases=(Case(17, 40, 16, causal=True, seed=1),), **options) -> str:
    with pytest.raises(CheckFailed) as info:
        check_backward("t", fn, list(cases), **options)
    return str(info.value)


def without_delta(q, k, v, o, lse, do, causal=False, scale=None):
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(~course.reference.causal_mask(*s.shape), float("-inf"))
    p = torch.exp(s - lse[:, None])
    ds = p * (do @ v.T)
    return scale * ds @ k, scale * ds.T @ q, p.T @ do


def dq_one_key_short(q, k, v, o, lse, do, causal=False, scale=None, block=16):
    """dQ of a kernel whose sum over each block of keys stops one key early (j < BLOCK_N - 1)."""
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(~course.reference.causal_mask(*s.shape), float("-inf"))
    p = torch.where(torch.isfinite(lse[:, None]), torch.exp(s - lse[:, None]), torch.zeros_like(s))
    ds = p * (do @ v.T - (do * o).sum(-1, keepdim=True))
    keep = (torch.arange(k.shape[0]) % block != block - 1).to(ds.dtype)
    return scale * (ds * keep) @ k


@pytest.mark.parametrize("wrong, words", [
    (without_delta, "the Δ term is missing"),
    (lambda *a, **kw: (backward(*a, **kw)[0] / kw["scale"],) + backward(*a, **kw)[1:], "dQ is missing the factor scale"),
    (lambda *a, **kw: [backward(*a, **kw)[i] for i in (0, 2, 1)], "swapped"),
    (lambda *a, **kw: (torch.zeros_like(a[0]),) + backward(*a, **kw)[1:], "dq is all zeros"),
    (lambda *a, **kw: (dq_one_key_short(*a, **kw),) + backward(*a, **kw)[1:],
     "dQ leaves out one key of every block of keys, its last"),
])
def test_backward_hints(wrong, words):
    assert words in hint_of(backward_failure(wrong))


def unguarded_lse(q, k, v, o, lse, do, causal=False, scale=None, nan_elsewhere=False):
    """Lesson 07's backward in PyTorch with exp(S - LSE) taken where the LSE is -inf."""
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(~course.reference.causal_mask(*s.shape), float("-inf"))
    p = torch.exp(s - lse[:, None])
    if nan_elsewhere:  # a NaN for another reason: in the first row, which sees keys
        p = torch.where(torch.isnan(p), torch.zeros_like(p), p)
        p[0, 0] = float("nan")
    ds = p * (do @ v.T - (do * o).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.T @ q, p.T @ do


def test_nan_in_the_rows_that_see_no_key_gets_the_lse_guard_hint_and_nothing_else_does():
    no_key = [Case(33, 20, 16, causal=True, seed=3)]  # Nq > Nk, bottom-right: 13 rows see no key
    assert "rows that see no key" in hint_of(backward_failure(unguarded_lse, no_key))
    message = backward_failure(lambda *a, **kw: unguarded_lse(*a, **kw, nan_elsewhere=True), no_key)
    assert "NaN" in message and hint_of(message) is None


def test_a_gradient_wrong_for_no_known_reason_gets_the_facts_only():
    message = backward_failure(lambda *a, **kw: (backward(*a, **kw)[0] * 1.5,) + backward(*a, **kw)[1:])
    assert "wrong dq" in message and "dk and dv are right." in message and hint_of(message) is None


# ------------------------------------------------------------------------------------------------
# Every case is reproducible from its message
# ------------------------------------------------------------------------------------------------

def parse_case(message: str) -> dict:
    m = re.search(r"Nq=(\d+), Nk=(\d+), D=(\d+) \(([^)]*)\)(?: with scale=([0-9.e+-]+))?", message)
    assert m, message
    words = [w.strip() for w in m.group(4).split(",")]
    seed = next(int(w.split("=")[1]) for w in words if w.startswith("seed="))
    return dict(n_q=int(m.group(1)), n_k=int(m.group(2)), d=int(m.group(3)), kind=words[0], causal="causal" in words,
                dtype=getattr(torch, next(w for w in words if w.startswith(("float", "bfloat")))), seed=seed,
                scale=float(m.group(5)) if m.group(5) else None)


def test_the_scale_of_a_case_is_in_the_message_of_every_engine_that_takes_one():
    wrong = lambda q, k, v, scale=None: torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1) @ v  # noqa: E731
    case = Case(17, 20, 32, seed=11)
    found = parse_case(attention_failure(wrong, [case], scale=0.5, pass_scale=True))
    assert found == dict(n_q=17, n_k=20, d=32, kind="normal", causal=False, dtype=torch.float32, seed=11, scale=0.5)
    # The message is enough to rebuild the case and see the same wrong answer.
    rebuilt = Case(found["n_q"], found["n_k"], found["d"], kind=found["kind"], dtype=found["dtype"], seed=found["seed"])
    q, k, v = rebuilt.tensors()
    assert not torch.allclose(wrong(q, k, v, scale=found["scale"]).double(), course.attention(q, k, v, scale=0.5).o, atol=1e-3)

    def default_scale_backward(q, k, v, o, lse, do, causal=False, scale=None):
        return backward(q, k, v, o, lse, do, causal, None)
    found = parse_case(backward_failure(default_scale_backward, [Case(17, 20, 32, causal=True, seed=12)], scale=0.5))
    assert found["scale"] == 0.5 and found["seed"] == 12 and found["causal"]
    # Through course.check: lesson 01's explicit-scale case.
    message = failure("01.attention_torch", lambda q, k, v, scale=None: wrong(q, k, v))
    assert parse_case(message)["scale"] == 0.5


def test_every_engine_names_the_seed_and_sizes_of_a_failing_case():
    messages = [
        attention_failure(lambda q, k, v, scale=None: q, [Case(9, 12, 16, kind="peaky", dtype=torch.float16, seed=7)]),
        softmax_failure(lambda x: x, [Case(9, 12, 16, kind="peaky", dtype=torch.float16, seed=7)]),
        backward_failure(lambda *a, **kw: (a[0], a[1], a[2]), [Case(9, 12, 16, kind="peaky", dtype=torch.float16, seed=7)]),
    ]
    with pytest.raises(CheckFailed) as info:
        check_merge_states("t", lambda m_a, l_a, m_b, l_b: (m_a, l_a), [Case(9, 12, 16, kind="peaky", seed=7)])
    messages.append(str(info.value))
    for message in messages:
        found = parse_case(message)
        assert (found["n_q"], found["n_k"], found["d"], found["kind"], found["seed"]) == (9, 12, 16, "peaky", 7), message
