"""Replies are awaited in short polls (autograder.kernel_polling): a reply a long poll slept through is
picked up at the next slice, and the cell's time limit still holds."""
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


def _client(misses):
    client = SimpleNamespace(shell_channel=FakeChannel(misses))
    poll_shell_in_slices(client, slice_s=0.01)
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
