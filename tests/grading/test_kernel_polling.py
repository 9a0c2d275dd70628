"""Replies are awaited in short polls (autograder.kernel_polling): a reply a long poll slept through is
picked up at the next slice, a kernel that holds its reply is nudged, and the cell's time limit still holds."""
from __future__ import annotations

import asyncio
from queue import Empty
from types import SimpleNamespace

import pytest

from autograder.kernel_polling import poll_shell_in_slices


class FakeChannel:
    """A shell channel whose first ``misses`` polls return nothing, as a poll that missed its wake-up does."""

    def __init__(self, misses: int | None):
        self.misses, self.polls = misses, []

    async def get_msg(self, timeout=None):
        self.polls.append(timeout)
        if self.misses is None or len(self.polls) <= self.misses:
            raise Empty
        return {"msg_type": "execute_reply"}


def _client(misses, first_nudge_s=60.0):
    client = SimpleNamespace(shell_channel=FakeChannel(misses), nudges=[])
    client.kernel_info = lambda: client.nudges.append(len(client.shell_channel.polls))
    poll_shell_in_slices(client, slice_s=0.01, first_nudge_s=first_nudge_s)
    return client


def test_a_reply_is_found_by_a_later_slice_within_the_limit():
    client = _client(misses=3)
    assert asyncio.run(client.shell_channel.get_msg(timeout=60)) == {"msg_type": "execute_reply"}
    assert len(client.shell_channel.polls) == 4 and max(client.shell_channel.polls) <= 0.01


def test_no_reply_still_times_out():
    client = _client(misses=None)
    with pytest.raises(Empty):
        asyncio.run(client.shell_channel.get_msg(timeout=0.05))
    assert len(client.shell_channel.polls) >= 2


def test_waiting_without_a_limit_polls_in_slices_too():
    client = _client(misses=2)
    assert asyncio.run(client.shell_channel.get_msg()) == {"msg_type": "execute_reply"}
    assert client.shell_channel.polls == [0.01, 0.01, 0.01]


def test_installing_twice_wraps_once():
    client = _client(misses=0)
    wrapped = client.shell_channel.get_msg
    poll_shell_in_slices(client, slice_s=0.01)
    assert client.shell_channel.get_msg is wrapped


def test_a_kernel_that_holds_its_reply_is_nudged_at_doubling_intervals():
    """A kernel_info request wakes a kernel whose reply sits in its send queue; while nothing comes the
    nudges space out (0.02 s, then 0.04 s, 0.08 s, ...), so a long cell is not flooded with them."""
    client = _client(misses=None, first_nudge_s=0.02)
    with pytest.raises(Empty):
        asyncio.run(client.shell_channel.get_msg(timeout=0.5))
    assert 3 <= len(client.nudges) <= 5, client.nudges
    replied = _client(misses=1, first_nudge_s=0.02)
    asyncio.run(replied.shell_channel.get_msg(timeout=5))
    assert replied.nudges == []
