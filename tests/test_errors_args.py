"""Every integer written into a kernel's argument struct is checked against its C type (issue 12,
item 10): ctypes would truncate an extent >= 2**31 silently and the kernel would see it wrapped."""

import ctypes

import pytest

import hkjit
from hkjit import ops
from hkjit.errors import InvalidArgumentError


def _gemm_arguments(**overrides):
    arguments = dict(a=0x1000, b=0x2000, out=0x3000, bias=0, c=0, a_strides=(256, 1), b_strides=(256, 1),
                     ldc=256, ldc_in=0, m=256, n=256, k=256, alpha=1.0, beta=0.0, workspace=0)
    arguments.update(overrides)
    return arguments


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("extent", ["m", "n", "k"])
def test_gemm_extent_past_int32_is_refused_naming_op_and_field(target, extent):
    plan = ops.get("gemm").plan(target, m=256, n=256, k=256, dtype="bfloat16")
    assert plan.fill(**_gemm_arguments()).M == 256
    with pytest.raises(InvalidArgumentError, match=rf"gemm: argument {extent.upper()}=2147483648 does not fit"):
        plan.fill(**_gemm_arguments(**{extent: 2 ** 31}))
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        plan.fill(**_gemm_arguments(**{extent: -2 ** 31 - 1}))


def test_pointer_limits():
    plan = ops.get("gemm").plan("gfx950", m=256, n=256, k=256, dtype="bfloat16")
    args = plan.fill(**_gemm_arguments(a=2 ** 64 - 16))
    assert args.a == 2 ** 64 - 16
    with pytest.raises(InvalidArgumentError, match="argument a="):
        plan.fill(**_gemm_arguments(a=2 ** 64))
    with pytest.raises(InvalidArgumentError, match="argument a="):
        plan.fill(**_gemm_arguments(a=-16))


def _int_fields(struct_type):
    for name, ctype in struct_type._fields_:
        if isinstance(ctype, type) and issubclass(ctype, ctypes._SimpleCData) and ctype._type_ in "bhilqBHILQP":
            yield name, ctype


@pytest.mark.parametrize("name", ops.names())
def test_every_op_args_struct_refuses_wrapped_values(name):
    """By construction: whatever an op's fill writes, its plan's struct type refuses a value that
    does not fit, for every integer field of every registered op."""
    op = ops.get(name)
    plan = op.plan("gfx950", **op.default_shape)
    fields = list(_int_fields(plan.args_type))
    assert fields, f"{name}: no integer fields found"
    args = plan.args_type()
    for field, ctype in fields:
        bits = 8 * ctypes.sizeof(ctype)
        too_big = 2 ** bits if ctype._type_.isupper() or ctype._type_ == "P" else 2 ** (bits - 1)
        with pytest.raises(InvalidArgumentError, match=field):
            setattr(args, field, too_big)
        with pytest.raises(InvalidArgumentError, match=field):
            setattr(args, field, "12")
        setattr(args, field, 7)
        assert getattr(args, field) == 7


def test_huge_extents_at_build_are_refused_before_clang():
    with pytest.raises(InvalidArgumentError, match="2\\*\\*31"):
        hkjit.build("gemm", target="gfx950", m=2 ** 31, n=256, k=256, dtype="bfloat16")


def test_float_fields_refuse_what_a_c_float_cannot_hold():
    plan = ops.get("gemm").plan("gfx950", m=256, n=256, k=256, dtype="bfloat16")
    assert plan.fill(**_gemm_arguments(alpha=3e38)).alpha == pytest.approx(3e38, rel=1e-6)
    for value in (1e39, -1e300):
        with pytest.raises(InvalidArgumentError, match="alpha"):
            plan.fill(**_gemm_arguments(alpha=value))
    with pytest.raises(InvalidArgumentError, match="beta"):
        plan.fill(**_gemm_arguments(beta=-4e38))
