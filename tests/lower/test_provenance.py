"""The generated program's node lines (`provenance.describe_group`'s text, in kernel headers
and the report): op, inputs, source line, and each rule behind the node once, where its
file names it."""

from __future__ import annotations

from cuvil.ir.graph import Node
from cuvil.ir.types import TensorType
from cuvil.lower.provenance import describe_node


def test_a_rule_that_acted_twice_on_a_chain_is_named_once():
    node = Node("v3", "conv2d_bias", ("x", "w", "b"), {}, TensorType((1, 4, 8, 8), "f32"),
                source="resnet.py:94",
                origin=("conv_bias", "conv_batch_norm", "conv_batch_norm", "conv_bias"))
    where = {"conv_bias": "rules/fusion/conv.cvr:31"}
    assert describe_node(node, where) == (
        "v3 = conv2d_bias(x, w, b) at resnet.py:94; "
        "rules: conv_bias (rules/fusion/conv.cvr:31), conv_batch_norm")
