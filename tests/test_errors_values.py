"""Values Python must refuse before clang sees them (issue 12, item 12)."""

import pytest

import hkjit
from hkjit import ops, targets
from hkjit.errors import InvalidArgumentError, TargetError


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "sm_90a"])
@pytest.mark.parametrize("value", [2 ** 31, 2 ** 40, 257, -1, 0])
def test_group_m_out_of_range_is_refused_in_python(target, value):
    with pytest.raises(InvalidArgumentError, match="group_m"):
        ops.get("gemm").plan(target, m=256, n=256, k=256, dtype="bfloat16", group_m=value)


@pytest.mark.parametrize("name", ops.names())
def test_every_int_tile_keyword_past_a_c_int_is_refused(name):
    op = ops.get(name)
    for keyword in op.tile_keywords:
        for value in (2 ** 31, -1, 2 ** 64):
            with pytest.raises(InvalidArgumentError, match=keyword):
                op.plan("gfx950", **op.default_shape, **{keyword: value})


@pytest.mark.parametrize("value", ["gfx950:sramecc+:sramecc-", "gfx950:xnack-:xnack-",
                                   "gfx942:sramecc+:xnack-:sramecc+"])
def test_duplicate_or_conflicting_features_are_refused(value):
    with pytest.raises(TargetError, match="given twice"):
        targets.parse(value)
    with pytest.raises(TargetError, match="given twice"):
        hkjit.build("gemm", target=value, m=256, n=256, k=256, dtype="bfloat16")


def test_feature_order_is_canonical():
    assert targets.parse("gfx942:xnack-:sramecc+").id == "gfx942:sramecc+:xnack-"
    assert targets.parse("gfx942:xnack-:sramecc+") == targets.parse("gfx942:sramecc+:xnack-")
