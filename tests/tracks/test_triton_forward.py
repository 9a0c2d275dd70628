"""Lessons 02-04 in Triton: online softmax and merged states, the tiled forward pass, the pipelined one.

Every kernel runs on this machine's tier (the interpreter on CPU) and is graded by the same
``course.check`` a learner's notebook calls, against the float64 oracle within the error budget.
"""
from __future__ import annotations

import pytest
import torch

import course
from course import Case, tiers
from course.grading.budget import attention_budget
from course.kernels import load_triton_module, read_region
from track_support import device, qkv

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]

F16 = torch.float16
EPS32 = torch.finfo(torch.float32).eps


@pytest.fixture(scope="module")
def softmax_module():
    return load_triton_module("triton/02_online_softmax")


@pytest.fixture(scope="module")
def tiled_module():
    return load_triton_module("triton/03_tiled")


@pytest.fixture(scope="module")
def pipelined_module():
    return load_triton_module("triton/04_double_buffer")


# -- lesson 02: online softmax and merged states ------------------------------------------------

def _rows(shape: tuple[int, ...], kind: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random rows; "peaky" ones reach the hundreds, where exp() overflows without the max."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (x * 150.0 if kind == "peaky" else x).to(dtype)


@pytest.mark.parametrize("case", [
    Case(4, 1, 16), Case(3, 17, 16, kind="peaky", seed=1), Case(5, 129, 32, dtype=F16, seed=2),
    Case(2, 300, 16, kind="peaky", seed=3), Case(3, 300, 16, dtype=F16, kind="peaky", seed=4),
], ids=lambda c: f"N={c.n_k}-{c.kind}-{str(c.dtype)[6:]}")
def test_online_softmax_check(softmax_module, case):
    course.check("02.online_softmax_triton", softmax_module.online_softmax, cases=[case])


@pytest.mark.parametrize("shape,kind,dtype", [
    ((1,), "normal", torch.float32), ((300,), "peaky", torch.float32), ((2, 3, 17), "peaky", F16),
    ((4, 129), "normal", F16), ((2, 1, 300), "peaky", F16), ((3, 1), "peaky", torch.float32),
])
def test_online_softmax_against_float64(softmax_module, shape, kind, dtype):
    x = _rows(shape, kind, dtype, seed=len(shape) * 1000 + shape[-1])
    y = softmax_module.online_softmax(x.to(device())).cpu()
    assert y.shape == x.shape and y.dtype == dtype
    ref = torch.softmax(x.double(), dim=-1)
    budget = attention_budget(ref, torch.softmax(x, dim=-1), dtype)
    error = float((y.double() - ref).abs().max())
    assert error <= budget.allowed, f"error {error:.3g} over budget {budget.allowed:.3g}"


def _lse(m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    return m.double() + torch.log(l.double())


def _fold(merge, m: torch.Tensor, l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge the states along the last axis, left to right."""
    acc_m, acc_l = m[..., 0], l[..., 0]
    for i in range(1, m.shape[-1]):
        acc_m, acc_l = merge(acc_m, acc_l, m[..., i], l[..., i])
    return acc_m, acc_l


@pytest.mark.parametrize("n,n_splits,kind", [(1, 1, "normal"), (17, 3, "peaky"), (129, 7, "normal"),
                                             (300, 4, "peaky"), (300, 40, "normal"), (17, 40, "peaky")])
def test_partial_states_merge_to_the_row_logsumexp(softmax_module, n, n_splits, kind):
    x = _rows((2, 3, n), kind, torch.float32, seed=n + n_splits)
    m, l = softmax_module.partial_states(x.to(device()), n_splits)
    assert m.shape == l.shape == (2, 3, n_splits) and m.dtype == l.dtype == torch.float32
    ref = torch.logsumexp(x.double(), dim=-1)
    error = (_lse(*_fold(softmax_module.merge, m, l)).cpu() - ref).abs()
    assert bool((error <= 8 * EPS32 * ref.abs().clamp(min=1)).all()), f"worst error {float(error.max()):.3g}"


def test_partial_states_of_empty_chunks(softmax_module):
    # 5 columns in 4 chunks of ceil(5/4) = 2: [0, 2), [2, 4), [4, 5) and an empty one.
    x = _rows((3, 5), "normal", torch.float32, seed=7)
    m, l = (t.cpu() for t in softmax_module.partial_states(x.to(device()), 4))
    assert bool(torch.isneginf(m[:, 3]).all()) and bool((l[:, 3] == 0).all())
    assert torch.allclose(m[:, 2], x[:, 4]) and torch.allclose(l[:, 2], torch.ones(3))
    assert torch.allclose(m[:, 0], x[:, :2].amax(dim=-1))


def test_merging_is_associative_and_commutative(softmax_module):
    merge = softmax_module.merge
    x = _rows((64, 300), "peaky", torch.float32, seed=11).to(device())
    m, l = softmax_module.partial_states(x, 3)
    a, b, c = ((m[:, i], l[:, i]) for i in range(3))
    left = _lse(*merge(*merge(*a, *b), *c))
    right = _lse(*merge(*a, *merge(*b, *c)))
    budget = 4 * EPS32 * left.abs().clamp(min=1)
    assert bool(((left - right).abs() <= budget).all()), f"worst gap {float((left - right).abs().max()):.3g}"
    # Commutative: max is symmetric and float addition is commutative, bit for bit on the interpreter. Compiled
    # for a GPU, l_a·e_a + l_b·e_b becomes one fused multiply-add, fma(l_a, e_a, l_b·e_b), which rounds one
    # product fewer times than the other order does: the two orders may then differ in the last bit.
    ab, ba = merge(*a, *b), merge(*b, *a)
    assert torch.equal(ab[0], ba[0])
    if tiers.triton_interpreted():
        assert torch.equal(ab[1], ba[1])
    else:
        assert torch.allclose(ab[1], ba[1], rtol=2 * EPS32, atol=0)
    # The empty state (-inf, 0) is the identity.
    empty = (torch.full_like(a[0], float("-inf")), torch.zeros_like(a[1]))
    same = merge(*empty, *a)
    assert torch.equal(same[0], a[0]) and torch.allclose(same[1], a[1], rtol=0, atol=0)


def test_merging_two_empty_states_is_empty(softmax_module):
    empty = (torch.full((2, 5), float("-inf"), device=device()), torch.zeros(2, 5, device=device()))
    m, l = softmax_module.merge(*empty, *empty)
    assert m.shape == (2, 5) and bool(torch.isneginf(m).all()) and bool((l == 0).all())


def test_merge_states_check(softmax_module):
    course.check("02.online_softmax_merge_triton", softmax_module.merge)


def test_softmax_wrappers_reject_bad_input(softmax_module):
    with pytest.raises(ValueError, match="at least one dimension"):
        softmax_module.online_softmax(torch.tensor(1.0))
    with pytest.raises(ValueError, match="last dimension is 0"):
        softmax_module.online_softmax(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        softmax_module.online_softmax(torch.ones(3, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="n_splits"):
        softmax_module.partial_states(torch.zeros(3, 4), 0)
    with pytest.raises(ValueError, match="one shape"):
        softmax_module.merge(torch.zeros(3), torch.zeros(3), torch.zeros(4), torch.zeros(4))


# -- lessons 03 and 04: the forward pass --------------------------------------------------------

# Together: N in {1, 17, 129, 300}, D in {16, 32, 64, 128}, Nq != Nk both ways, normal and peaky,
# float32 and float16, leading batch dims, and two head dims that need padding (5 and 200).
FORWARD_CASES = [
    Case(1, 1, 16),
    Case(17, 17, 32, kind="peaky", seed=1),
    Case(129, 129, 64, seed=2),
    Case(300, 300, 128, kind="peaky", seed=3),
    Case(1, 300, 64, seed=4),
    Case(300, 1, 32, kind="peaky", seed=5),
    Case(17, 129, 128, dtype=F16, seed=6),
    Case(129, 17, 16, kind="peaky", dtype=F16, seed=7),
    Case(300, 129, 16, dtype=F16, seed=8),
    Case(129, 300, 32, kind="peaky", seed=9),
    Case(17, 300, 64, kind="peaky", dtype=F16, batch=(2, 3), seed=10),
    Case(33, 20, 5, seed=11),
    Case(20, 33, 200, dtype=F16, seed=12),
]

KERNELS = {"03.tiled_triton": ("triton/03_tiled", "tiled_attention"),
           "04.double_buffer_triton": ("triton/04_double_buffer", "pipelined_attention")}


@pytest.mark.parametrize("case", FORWARD_CASES, ids=lambda c: c.describe())
@pytest.mark.parametrize("exercise", list(KERNELS))
def test_forward_within_budget(exercise, case):
    ref, name = KERNELS[exercise]
    course.check(exercise, getattr(load_triton_module(ref), name), cases=[case])


@pytest.mark.parametrize("exercise", list(KERNELS))
def test_forward_shapes_and_dtypes(exercise):
    ref, name = KERNELS[exercise]
    fn = getattr(load_triton_module(ref), name)
    q, k, v = qkv(17, 16, n_k=9, dtype=F16, batch=(2, 1), seed=3)
    o, lse = fn(q, k, v)
    assert o.shape == (2, 1, 17, 16) and o.dtype == F16
    assert lse.shape == (2, 1, 17) and lse.dtype == torch.float32
    o, lse = fn(q[:0], k[:0], v[:0])  # an empty batch is not an error
    assert o.shape == (0, 1, 17, 16) and lse.shape == (0, 1, 17)


@pytest.mark.parametrize("exercise", list(KERNELS))
def test_forward_rejects_bad_input(exercise):
    ref, name = KERNELS[exercise]
    fn = getattr(load_triton_module(ref), name)
    q, k, v = qkv(4, 16, seed=0)
    with pytest.raises(ValueError, match="same rank"):
        fn(q[None], k, v)
    with pytest.raises(ValueError, match="batch"):
        fn(q.expand(2, 4, 16), k.expand(3, 4, 16), v.expand(3, 4, 16))
    with pytest.raises(ValueError, match="zero keys"):
        fn(q, k[:0], v[:0])
    with pytest.raises(ValueError, match="one D"):
        fn(q, k[:, :8], v[:, :8])
    with pytest.raises(ValueError, match="dtype"):
        fn(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="between 1 and 256"):
        fn(*qkv(2, 300, seed=0))


def test_pipelined_has_a_check_config_and_an_autotune_list_for_the_benchmarks(pipelined_module):
    """The same lists on both tiers: a check runs check_config (tests/tracks/test_triton_tier.py shows it never
    reaches the autotuner), a benchmark the autotuner over its list, whose first entry is the check config."""
    configs = pipelined_module.pipelined_attention_tuned.configs
    assert len(configs) > 1
    first = pipelined_module.check_config(64, F16)
    assert (configs[0].kwargs, configs[0].num_warps, configs[0].num_stages) == (first.kwargs, first.num_warps,
                                                                                first.num_stages)


@pytest.mark.parametrize("ref,regions", [
    ("triton/02_online_softmax", ["online_softmax_update", "merge_states"]),
    ("triton/03_tiled", ["load_kv_tile", "online_softmax_update", "write_o_and_lse"]),
    ("triton/04_double_buffer", ["tensor_descriptors", "load_kv_tile", "online_softmax_update", "write_o_and_lse"]),
])
def test_slide_regions_exist(ref, regions):
    for region in regions:
        assert read_region(ref, region).strip()
