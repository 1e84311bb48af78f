import pytest

from hkjit import dtypes, targets
from hkjit.errors import DTypeError, TargetError


def test_parse_targets():
    t = targets.parse("gfx942:sramecc+:xnack-")
    assert t.arch == "gfx942" and t.id == "gfx942:sramecc+:xnack-" and t.is_amd and t.smem_per_block == 65536
    assert targets.parse("gfx950").smem_per_block == 160 * 1024
    assert targets.parse("sm_90a").is_nvidia and targets.parse("sm_90").id == "sm_90a"
    assert targets.parse("gfx942") != targets.parse("gfx942:xnack+")


@pytest.mark.parametrize("bad", ["gfx1100", "sm_80", "", "gfx942:foo+", "sm_90a:xnack+", None, 950])
def test_unsupported_targets_list_the_supported_ones(bad):
    with pytest.raises(TargetError) as e:
        targets.parse(bad)
    assert isinstance(e.value, ValueError)
    if isinstance(bad, str) and bad.startswith(("gfx1100", "sm_80")):
        assert "gfx942" in str(e.value) and "sm_90a" in str(e.value)


def test_compute_capability():
    assert targets.from_compute_capability(9, 0).arch == "sm_90a"
    with pytest.raises(TargetError, match="Hopper"):
        targets.from_compute_capability(8, 0)


def test_dtype_names():
    assert dtypes.dtype("torch.bfloat16").name == "bfloat16"
    assert dtypes.dtype("fp16").cpp == "hk::half"
    assert dtypes.from_dlpack_code(4, 16).name == "bfloat16"
    with pytest.raises(DTypeError):
        dtypes.dtype("complex64")
