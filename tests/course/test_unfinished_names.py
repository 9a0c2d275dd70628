"""The sentence for an unfinished exercise names the function as the learner knows it: a method with its class
(lesson 08's stub is ``FlashAttention.forward``, and "This cell uses `forward`" says nothing), a function nested in
another by its own name (course.grading.answers)."""
from __future__ import annotations

import torch

from course.grading import answers
from course.grading.answers import unfinished_sentence


class FlashAttention(torch.autograd.Function):
    """Lesson 08's Function as handed out: forward still the stub."""

    @staticmethod
    def forward(ctx, q):
        raise NotImplementedError()

    @staticmethod
    def backward(ctx, do):
        raise NotImplementedError()


class Model:
    def method(self):
        raise NotImplementedError()

    @classmethod
    def build(cls):
        raise NotImplementedError()


def _sentence(call) -> str:
    try:
        call()
    except NotImplementedError as error:
        return unfinished_sentence(error)
    raise AssertionError("the stub did not raise")


def test_a_method_stub_is_named_with_its_class():
    text = _sentence(lambda: FlashAttention.apply(torch.ones(2, requires_grad=True)))
    assert text.startswith("This cell uses `FlashAttention.forward`, which is not finished yet"), text
    assert "`Model.method`" in _sentence(lambda: Model().method())
    assert "`Model.build`" in _sentence(Model.build)


def test_a_nested_stub_is_named_by_its_own_name():
    def outer():
        def stub():
            raise NotImplementedError()
        stub()
    assert "uses `stub`," in _sentence(outer)


def test_without_qualified_names_the_class_is_found_where_the_function_was_defined():
    """Python 3.10's code objects have no co_qualname: the class that holds the code names it there."""
    namespace = {"FlashAttention": FlashAttention, "Model": Model, "torch": torch}
    assert answers._qualified_name(FlashAttention.forward.__code__, namespace) == "FlashAttention.forward"
    assert answers._qualified_name(Model.build.__func__.__code__, namespace) == "Model.build"
    assert answers._qualified_name(Model.method.__code__, {"torch": torch}) == "method"
