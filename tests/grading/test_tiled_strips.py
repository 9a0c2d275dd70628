"""Lesson 03's rule where the grade is decided: no score matrix, and no strip of it as wide as all the keys.

A learner can compute one block of rows against every key at once and take the softmax over it (right numbers,
no key tiles, no online softmax). The re-check runs the answer under a memory limit set from outside its process
(``course.lessons.lesson03._check_footprint_live``), on a case with many keys and D = 1, where such a strip costs many
times what the tiled loop holds; the notebook's watch refuses the same strips first.
"""
from __future__ import annotations

import math

import pytest
import torch

import course
from course.grading.answer_process import AnswerProcess, LiveAnswer
from course.errors import CheckFailed
from course.lessons.lesson03 import _check_footprint, _check_footprint_live

# Right answers (the tiled loop's numbers) whose scores are strips: `rows` rows by every key at once.
STRIPS = '''
import math
import torch


def strips(q, k, v, rows, scale):
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    o, lse = torch.empty_like(q), torch.empty(q.shape[0])
    for i0 in range(0, q.shape[0], rows):
        s = (q[i0:i0 + rows].float() @ k.float().T) * scale
        lse[i0:i0 + rows] = torch.logsumexp(s, dim=1)
        o[i0:i0 + rows] = (torch.softmax(s, dim=1) @ v.float()).to(q.dtype)
    return o, lse


def block_strips(q, k, v, block_m=16, block_n=16, scale=None):
    return strips(q, k, v, block_m, scale)


def eight_row_strips(q, k, v, block_m=16, block_n=16, scale=None):
    return strips(q, k, v, 8, scale)


def tiled_in_float64(q, k, v, block_m=16, block_n=16, scale=None):
    # Honest tiles, on float64 copies of the whole of Q, K and V: as wide as the inputs, never as the keys.
    n_q, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q64, k64, v64 = q.double(), k.double(), v.double()
    o, lse = torch.empty_like(q), torch.empty(n_q)
    for i0 in range(0, n_q, block_m):
        q_i = q64[i0:i0 + block_m]
        m = torch.full((q_i.shape[0],), -math.inf, dtype=torch.float64)
        l = torch.zeros(q_i.shape[0], dtype=torch.float64)
        acc = torch.zeros(q_i.shape[0], d, dtype=torch.float64)
        for j0 in range(0, k.shape[0], block_n):
            s = (q_i @ k64[j0:j0 + block_n].T) * scale
            m_new = torch.maximum(m, s.amax(dim=1))
            p = torch.exp(s - m_new[:, None])
            alpha = torch.exp(m - m_new)
            l, acc, m = l * alpha + p.sum(dim=1), acc * alpha[:, None] + p @ v64[j0:j0 + block_n], m_new
        o[i0:i0 + block_m] = (acc / l[:, None]).to(q.dtype)
        lse[i0:i0 + block_m] = (m + torch.log(l)).float()
    return o, lse
'''
NAMES = ["block_strips", "eight_row_strips", "tiled_in_float64"]

# Ways around a memory limit counted inside the process, or around the measured case itself: each computes the
# right numbers on every small case.
AROUND = '''
import math
import mmap
import subprocess
import sys
import threading

import torch

from course.reference import attention as _attention

def _whole(q, k, v, s):
    torch.matmul(q, k.T, out=s)
    s.mul_(1.0 / math.sqrt(q.shape[1]))
    lse = torch.logsumexp(s, dim=1)
    return (s.sub_(lse[:, None]).exp_() @ v), lse


def shared_on_a_thread(q, k, v, block_m=16, block_n=16, scale=None):
    # The score matrix in a shared anonymous mapping, which RLIMIT_DATA does not count, filled on a worker thread.
    out = {}

    def work():
        scores = mmap.mmap(-1, q.shape[0] * k.shape[0] * 4)
        out["o"] = _whole(q, k, v, torch.frombuffer(scores, dtype=torch.float32).view(q.shape[0], k.shape[0]))
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return out["o"]


def in_another_process(q, k, v, block_m=16, block_n=16, scale=None):
    if k.shape[0] > 4096:  # the measured case, in a fresh Python the limit was never set on
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    return _whole(q, k, v, torch.empty(q.shape[0], k.shape[0]))


def nothing_on_the_measured_case(q, k, v, block_m=16, block_n=16, scale=None):
    if k.shape[0] > 4096:
        return torch.zeros_like(q), torch.zeros(q.shape[0])
    return _whole(q, k, v, torch.empty(q.shape[0], k.shape[0]))


def fails_on_the_measured_case(q, k, v, block_m=16, block_n=16, scale=None):
    if k.shape[0] > 4096:
        raise NotImplementedError("not for this size")
    return _whole(q, k, v, torch.empty(q.shape[0], k.shape[0]))
'''
AROUND_NAMES = ["shared_on_a_thread", "in_another_process", "nothing_on_the_measured_case", "fails_on_the_measured_case"]
# In a cell of its own: the room for the scores, taken when the cell runs, before any call is measured.
RESERVED = '''
_RESERVED = bytearray(64 * (1 << 20) * 4)


def reserved_when_defined(q, k, v, block_m=16, block_n=16, scale=None):
    scores = torch.frombuffer(_RESERVED, dtype=torch.float32)[:q.shape[0] * k.shape[0]].view(q.shape[0], k.shape[0])
    return _whole(q, k, v, scores)
'''


@pytest.fixture(scope="module")
def answers():
    process = AnswerProcess(["import math, torch, course"], [{"cell": "tiled_torch", "source": STRIPS, "names": NAMES}])
    yield process
    process.close()


@pytest.mark.parametrize("name", ["block_strips", "eight_row_strips"])
def test_a_strip_of_scores_is_refused_where_the_grade_is_decided(answers, name):
    with pytest.raises(CheckFailed) as refused:
        _check_footprint_live("03.tiled_torch", LiveAnswer(name, answers))
    message = str(refused.value)
    assert message.startswith("03.tiled_torch: on Nq=64, Nk=1,048,576, D=1 with block_m=32, block_n=1024, your "
                              "function needed more than 48 MiB for the call"), message
    assert "strips of it with the softmax taken over all the keys at once" in message
    assert message.splitlines()[-1].startswith("  hint: loop over K/V tiles of block_n keys")


def test_tiles_on_float64_copies_of_the_inputs_pass(answers):
    _check_footprint_live("03.tiled_torch", LiveAnswer("tiled_in_float64", answers))


def test_the_notebook_watch_refuses_the_same_strips():
    namespace: dict = {}
    exec(compile(STRIPS, "<strips>", "exec"), namespace)
    q, k, v = course.make_qkv(20, 16, seed=1)
    for name in NAMES:  # all three are right: only what they build can fail them
        o, lse = namespace[name](q, k, v, block_m=16, block_n=16)
        s = (q @ k.T) / math.sqrt(16)
        assert torch.allclose(o, torch.softmax(s, 1) @ v, atol=1e-5) and torch.allclose(lse, torch.logsumexp(s, 1))
    for name, rows in (("block_strips", 32), ("eight_row_strips", 8)):
        with pytest.raises(CheckFailed, match=rf"built a tensor of {rows} × 384 .*strip of (the score matrix|rows)"):
            _check_footprint("03.tiled_torch", namespace[name])


def test_the_watch_tells_a_strip_from_k_and_v_again():
    """As wide as all the keys: refused when a product made it or it is not shaped like K or V; K and V copied,
    converted or transposed pass, whatever D is (here D = 16, a strip of 16 rows included)."""
    from course.grading.footprint import watch
    q, k, v = course.make_qkv(40, 16, n_k=96, seed=2)

    def again(q, k, v):  # K and V in other forms, then one tile's scores
        kt, k64, vt = k.T.contiguous(), k.double(), torch.cat([v[:48], v[48:]]).float()
        return (q[:16] @ kt[:, :16]) @ vt[:16] + k64[:1].sum()

    strips = {
        "one row by a product": lambda q, k, v: q[0] @ k.T,
        "one row by a sum": lambda q, k, v: (q[0] * k).sum(dim=1),
        "16 rows (as many as D)": lambda q, k, v: torch.softmax(q[:16] @ k.T, dim=1) @ v,
        "rows broadcast against every key": lambda q, k, v: (q[:4, None, :] * k[None]).sum(-1),
    }
    assert watch(again, q, k, v, keys=(96, 16))[1].wide_shape == ()
    for name, fn in strips.items():
        assert watch(fn, q, k, v, keys=(96, 16))[1].wide_shape, name


@pytest.fixture(scope="module")
def tricks():
    process = AnswerProcess(["import math, torch, course"],
                            [{"cell": "tiled_torch", "source": AROUND, "names": AROUND_NAMES},
                             {"cell": "reserved", "source": RESERVED, "names": ["reserved_when_defined"]}])
    yield process
    process.close()


@pytest.mark.parametrize("name, says", [
    ("shared_on_a_thread", "did not return an answer"),  # its thread's mapping fails; what reaches the caller is a KeyError
    ("reserved_when_defined", "needed more than 48 MiB"),  # its cell ran under the limit too
    ("in_another_process", "did not return an answer: CalledProcessError|Operation not permitted"),
    ("nothing_on_the_measured_case", "your function's O or LSE is off by"),
    ("fails_on_the_measured_case", "did not return an answer: not for this size"),
])
def test_memory_is_what_the_operating_system_counts_on_an_answer_that_is_right_there(tricks, name, says):
    """Every mapping of every thread counts, from before the first answer cell runs; the process may start no other
    program; and the measured call must answer, rightly, or the rule fails."""
    import re
    namespace: dict = {}
    exec(compile(AROUND + RESERVED.replace("64 * (1 << 20) * 4", "16"), "<tricks>", "exec"), namespace)
    q, k, v = course.make_qkv(20, 16, seed=1)
    if name != "reserved_when_defined":  # each is right on the small cases (the reserved one needs its room)
        o, lse = namespace[name](q, k, v)
        assert torch.allclose(o, torch.softmax((q @ k.T) / 4, 1) @ v, atol=1e-5)
    with pytest.raises(CheckFailed) as refused:
        _check_footprint_live("03.tiled_torch", LiveAnswer(name, tricks))
    assert re.search(says, str(refused.value)), refused.value
