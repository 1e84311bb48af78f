"""Playing the other local user: what another account on the same machine can plant in a cache or a
bundle must never make hkjit run the wrong kernel, write outside its own files, or leave debris.

Forged and damaged key index records; world-writable and foreign-owned cache folders (foreign
ownership simulated by patching the uid the checks compare against); hostile bundles (traversal,
links, zip bombs, wrong toolchains); a full disk (an injected ENOSPC)."""

import json
import warnings

import numpy as np
import pytest

import hkjit
from hkjit import jit
from hkjit.cache import Cache, index as index_mod
from hkjit.errors import CacheWarning

from conftest import needs_clang

ml_dtypes = pytest.importorskip("ml_dtypes")


def _gemm_spec(layout):
    return hkjit.ops.get("gemm").plan("gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                                      a_layout="row", b_layout=layout).spec


def _records(cache_dir):
    return index_mod.record_files(cache_dir)


# ---------------------------------------------------------------------------------- key index

@needs_clang
def test_forged_index_record_never_runs_the_other_layouts_kernel(cache_dir):
    """The review's case: the row-layout GEMM's index record edited (checksum recomputed, as an
    attacker who read this file would) to name the column-layout kernel's key."""
    row_key = jit.cache_key(_gemm_spec("row"))
    hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    col = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                      b_layout="col")
    assert col.key != row_key
    forged = 0
    for path in _records(cache_dir):
        record = index_mod.read_record(path)
        if record["key"] == row_key:
            path.write_bytes(index_mod.encode_record(col.key, record["fingerprint"], record["expect"]))
            forged += 1
    assert forged == 1
    hkjit.reset_state()
    assert jit.cache_key(_gemm_spec("row")) == row_key   # the forged shortcut is not taken

    rng = np.random.default_rng()
    a = rng.standard_normal((37, 29)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((29, 50)).astype(ml_dtypes.bfloat16)
    hkjit.reset_state()
    out = np.full((37, 50), np.nan, np.float32)
    hkjit.gemm(a, b, out=out, device="sim:gfx950")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


@needs_clang
def test_forged_record_and_damaged_record_are_reported_by_verify(cache_dir):
    row = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    col = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                      b_layout="col")
    paths = {index_mod.read_record(p)["key"]: p for p in _records(cache_dir)}
    row_path, col_path = paths[row.key], paths[col.key]
    record = index_mod.read_record(row_path)
    row_path.write_bytes(index_mod.encode_record(col.key, record["fingerprint"], record["expect"]))
    col_path.write_bytes(col_path.read_bytes().replace(b'"waves":4', b'"waves":8'))   # checksum now fails
    problems = dict(Cache(cache_dir, bundle_paths=[]).verify())
    assert set(problems) == {row_path, col_path}, problems
    assert "b_kmajor" in problems[row_path] or "params" in problems[row_path]
    assert "checksum" in problems[col_path]
    assert not row_path.exists() and not col_path.exists()   # bad shortcuts are dropped
    assert Cache(cache_dir, bundle_paths=[]).verify() == []


@needs_clang
def test_damaged_index_record_is_a_miss_with_one_warning(cache_dir):
    built = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    (path,) = _records(cache_dir)
    path.write_bytes(path.read_bytes()[:-7])
    hkjit.reset_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jit.cache_key(_gemm_spec("row")) == built.key
    assert sum("key index record" in str(w.message) for w in caught if w.category is CacheWarning) == 1
    assert json.loads(path.read_bytes())["key"] == built.key   # rewritten whole


@needs_clang
def test_entry_that_is_not_the_specialisation_is_set_aside_and_rebuilt(cache_dir):
    """A planted entry file under the right key (valid entry checksum) holding another kernel."""
    from hkjit.cache import encode_entry
    row = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    col = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                      b_layout="col")
    cache = Cache(cache_dir, bundle_paths=[])
    cache.entry_path(row.key).write_bytes(encode_entry(row.key, col.code, col.meta))
    hkjit.reset_state()
    with pytest.warns(CacheWarning, match="not the kernel its key names"):
        again = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    assert again.compiled and again.meta["params"] == row.meta["params"] != col.meta["params"]
