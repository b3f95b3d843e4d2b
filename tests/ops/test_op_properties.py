"""Property tests of the op catalog: on random valid inputs, each op's inferred type is the
type torch produces, its reference implementation computes what the torch expression it
stands for computes, and inference over symbolic dims agrees with inference on sizes."""

from __future__ import annotations

import opcases_index
import opcases_math
import opcases_quantized
import opcases_recurrent
import opcases_tensor
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cuvil.ir.types import DType, TensorType, sym
from cuvil.ops import all_ops, element, registry

CASES = {**opcases_math.CASES, **opcases_tensor.CASES, **opcases_quantized.CASES,
         **opcases_recurrent.CASES, **opcases_index.CASES}
LEAVES = {"input", "const", "scalar", "torch_op"}  # tested in test_leaf_ops.py


def type_of(t: torch.Tensor) -> TensorType:
    return TensorType(tuple(t.shape), DType.from_torch(t.dtype))


def test_every_catalog_op_has_a_property_case():
    assert set(all_ops()) - LEAVES == set(CASES)


@pytest.mark.parametrize("op", sorted(CASES))
@given(data=st.data())
def test_inference_and_reference_agree_with_torch(op, data):
    case = CASES[op]
    inputs, attrs = case.draw(data)
    want = case.expect(inputs, attrs)
    attrs = registry.get(op).complete_attrs(attrs)
    inferred = registry.infer(op, [type_of(t) for t in inputs], attrs)
    assert (inferred.shape, inferred.dtype) == (tuple(want.shape), DType.from_torch(want.dtype))
    got = registry.get(op).ref(inputs, attrs)
    torch.testing.assert_close(got, want, rtol=case.tol, atol=case.tol, equal_nan=True)


def _symbolic(value, sizes: set[int]):
    """`value` with each batch size (11, 13) replaced by its symbol `b11`, `b13`."""
    if isinstance(value, tuple):
        return tuple(_symbolic(v, sizes) for v in value)
    if isinstance(value, int) and not isinstance(value, bool) and value in (11, 13):
        sizes.add(value)
        return sym(f"b{value}")
    return value


@pytest.mark.parametrize("op", sorted(CASES))
@given(data=st.data())
def test_symbolic_inference_agrees_with_concrete(op, data):
    case = CASES[op]
    inputs, attrs = case.draw(data)
    attrs = registry.get(op).complete_attrs(attrs)
    types = [type_of(t) for t in inputs]
    sizes: set[int] = set()
    sym_types = [t.with_(shape=_symbolic(t.shape, sizes), layout=t.layout) for t in types]
    sym_attrs = {k: _symbolic(v, sizes) if k in case.shape_attrs else v
                 for k, v in attrs.items()}
    concrete = registry.infer(op, types, attrs)
    symbolic = registry.infer(op, sym_types, sym_attrs)
    env = {f"b{n}": n for n in sizes}
    assert symbolic.concrete_shape(env) == concrete.shape
    assert (symbolic.dtype, symbolic.layout, symbolic.device) == (
        concrete.dtype, concrete.layout, concrete.device)


ELEMENT_OPS = sorted(op for op in CASES if registry.get(op).element)


def test_the_simple_elementwise_ops_are_defined_by_element_expressions():
    assert {"add", "relu", "where", "masked_fill", "silu", "logical_not"} <= set(ELEMENT_OPS)


@pytest.mark.parametrize("op", ELEMENT_OPS)
@given(data=st.data())
def test_element_expression_computes_what_the_reference_computes(op, data):
    """The kernel is generated from `OpDef.element`; it must mean what `ref` means."""
    opdef = registry.get(op)
    inputs, attrs = CASES[op].draw(data)
    attrs = opdef.complete_attrs(attrs)
    want = opdef.ref(inputs, attrs)
    got = element.evaluate(opdef.element, {**dict(zip(opdef.inputs, inputs, strict=True)), **attrs})
    got = torch.as_tensor(got).to(want.dtype).expand(want.shape)
    tol = CASES[op].tol
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


def test_the_reshapes_are_the_views_that_keep_the_element_order():
    """`OpDef.reshapes` (asked by lowering and ONNX export): each such op, applied to a
    contiguous tensor, gives a view with the same elements in the same order."""
    import torch

    from cuvil.ops import all_ops, registry

    reshapes = {name for name, op in all_ops().items() if op.reshapes}
    assert reshapes == {"reshape", "view", "flatten", "squeeze", "unsqueeze"}
    x = torch.arange(24.0).reshape(2, 1, 3, 4)
    attrs = {"reshape": {"shape": (6, 4)}, "view": {"shape": (3, 8)},
             "flatten": {"start_dim": 1, "end_dim": -1}, "squeeze": {"dim": (1,)},
             "unsqueeze": {"dim": 0}}
    for name in reshapes:
        op = registry.get(name)
        y = op.ref([x], op.complete_attrs(attrs[name]))
        assert torch.equal(y.reshape(-1), x.reshape(-1)), name
    assert not registry.is_reshape("permute") and not registry.is_reshape("linear_relu")
