"""The manifest format hkjit writes: what tomllib reads back is what was written."""
import math
import tomllib

import pytest
from hypothesis import given, settings, strategies as st

from hkjit import deploy, manifest
from hkjit.errors import InvalidArgumentError

VALUES = ["plain", 'quote " and backslash \\ and \t tab', "newline\nand\rreturn", "unicode ünï 中文 😀",
          "\x00\x01\x1f\x7f controls", "", 0, -17, 2**62, 1.5, -0.0, 1e300, 5e-324, True, False]


@pytest.mark.parametrize("value", VALUES + [[1, 2, 3], ["a", "b"], [[1, 2], [3]], [],
                                            {"inline": 1, "nested": {"x": "y"}}, {}])
def test_values_round_trip(value):
    assert tomllib.loads(manifest.dumps({"v": value}))["v"] == value


def test_special_floats_and_bad_values():
    doc = tomllib.loads(manifest.dumps({"a": math.inf, "b": -math.inf, "c": math.nan}))
    assert doc["a"] == math.inf and doc["b"] == -math.inf and math.isnan(doc["c"])
    with pytest.raises(InvalidArgumentError, match="TOML"):
        manifest.dumps({"v": object()})


def test_document_round_trip():
    doc = {"version": 1, "weird key = 1": "v", "defaults": {"dtype": "bfloat16", "sub": {"deep": [1, 2]}},
           "kernel": [{"op": "gemm", "m": 1, "shape.with.dots": "x"}, {"op": "gemm", "targets": ["gfx942"]}]}
    assert tomllib.loads(manifest.dumps(doc)) == doc


class _DType:   # what numpy/torch dtypes look like to plain_params: an object with a .name
    name = "bfloat16"


def test_manifest_line_format():
    line = manifest.manifest_line("gemm", "gfx950", {"m": 8192, "dtype": _DType(), "bias": True,
                                                     "num_sms": None, "alpha": 0.5})
    assert line == '{ op = "gemm", target = "gfx950", alpha = 0.5, bias = true, dtype = "bfloat16", m = 8192 },'


@pytest.mark.parametrize("value", VALUES + [math.inf, -math.inf])
def test_manifest_line_is_one_line_that_reads_back(value):
    line = manifest.manifest_line("gemm", "gfx942:sramecc+:xnack-", {"p": value, "weird key": 1})
    assert "\n" not in line and line.startswith("{ ") and line.endswith(" },")
    entry, = tomllib.loads(f"kernels = [\n  {line}\n]\n")["kernels"]
    assert entry == {"op": "gemm", "target": "gfx942:sramecc+:xnack-", "p": value, "weird key": 1}


_scalars = st.one_of(st.text(), st.integers(-2**63, 2**63 - 1), st.booleans(),
                     st.floats(allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(params=st.dictionaries(st.text(min_size=1), _scalars, max_size=6))
def test_manifest_line_and_kernel_table_round_trip_any_scalars(params):
    params = {k: v for k, v in params.items() if k not in ("op", "target")}
    expected = {"op": "gemm", "target": "sm_90a", **params}
    line = manifest.manifest_line("gemm", "sm_90a", params)
    assert "\n" not in line
    assert tomllib.loads(f"kernels = [{line}]")["kernels"] == [expected]
    assert tomllib.loads(manifest.kernel_table("gemm", "sm_90a", params))["kernel"] == [expected]


def test_kernel_tables_append_into_one_valid_manifest():
    """What a recording does: a header, then one [[kernel]] block per specialisation."""
    text = f"version = {manifest.MANIFEST_VERSION}\n"
    entries = [("gemm", "gfx950", {"m": 64, "n": 64, "k": 64}), ("gemm", "sm_90a", {"dtype": _DType(), "m": 1})]
    for op, target, params in entries:
        text += "\n" + manifest.kernel_table(op, target, params)
        assert tomllib.loads(text)["version"] == 1   # valid after every append
    jobs = deploy.jobs_from_manifest(tomllib.loads(text))
    assert jobs == [deploy.Job("gemm", "gfx950", (("k", 64), ("m", 64), ("n", 64))),
                    deploy.Job("gemm", "sm_90a", (("dtype", "bfloat16"), ("m", 1)))]
