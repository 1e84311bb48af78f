"""Why a kernel compiled (issue 14 item 6): HKJIT_LOG=compile and `hkjit cache explain` name the
nearest cached key of the same op and the parts that differ: a dtype, a tile size, a header's hash,
the compiler or its flags."""

import pytest

import hkjit
from hkjit import cli, explain
from hkjit import spec as spec_mod

from conftest import needs_clang

ROWS = dict(rows=64, hidden=128)


def _build(**params):
    return hkjit.build("rms_norm", target="gfx950", **ROWS, **params)


def _log(capsys):
    return capsys.readouterr().err


@needs_clang
def test_log_names_dtype_and_tile_changes(cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("HKJIT_LOG", "compile")
    _build()
    first = _log(capsys)
    assert "compiling rms_norm for gfx950" in first and "the first of this op here" in first
    _build(dtype="float16")
    text = _log(capsys)
    assert "1 part differ" in text and "param dtype: bfloat16 -> float16" in text
    _build(vec=4)
    text = _log(capsys)
    assert "param vec: 8 -> 4" in text and "param dtype" not in text and "unit" not in text
    _build()                                       # cached: no compile, no log
    assert _log(capsys) == ""


@needs_clang
def test_log_names_a_changed_header(cache_dir, monkeypatch, capsys):
    _build()
    real = spec_mod.closure

    def edited(source):               # as if include/hk/common/rt_row.hpp had been edited on disk:
        known = real(source)          # its stamp moves (the key index re-hashes) and its hash changes
        files = dict(known.files)
        name = next(n for n in sorted(files) if n.endswith("rt_row.hpp"))
        files[name] = "0" * 64
        return spec_mod.Closure(files, known.stamp)
    monkeypatch.setattr(spec_mod, "closure", edited)
    monkeypatch.setattr(spec_mod, "stamp_holds", lambda stamp: False)
    monkeypatch.setenv("HKJIT_LOG", "compile")
    hkjit.reset_state()
    _build()
    text = _log(capsys)
    assert "1 part differ" in text
    line = next(ln for ln in text.splitlines() if "header " in ln)
    assert "rt_row.hpp" in line and line.endswith("-> 000000000000")


def test_differences_order_and_flags():
    old = explain.flat_parts({"dtype": "bfloat16", "block_m": 128}, {"include/a.hpp": "1" * 64}, "nvrtc 12.8",
                             ["-O3"], "sm_90a", "0.1.0", "gemm_hopper.cuh", "a" * 64)
    new = explain.flat_parts({"dtype": "bfloat16", "block_m": 64}, {"include/a.hpp": "2" * 64}, "nvrtc 13.0",
                             ["-O3", "-lineinfo"], "sm_90a", "0.1.0", "gemm_hopper.cuh", "b" * 64)
    diff = explain.differences(old, new)
    assert [d[0] for d in diff] == ["compiler", "flags", "header include/a.hpp", "param block_m"]
    assert diff[1][1:] == ("-O3", "-O3 -lineinfo")
    same = dict(old, unit="c" * 12)
    assert explain.differences(old, same) == [("unit", "a" * 12, "c" * 12)]


def test_old_entries_compare_on_what_they_recorded():
    old = explain.flat_parts({"dtype": "bfloat16"}, None, "clang 22", [], "gfx950", "0.1.0")
    new = explain.flat_parts({"dtype": "float16"}, {"include/a.hpp": "1" * 64}, "clang 22", [], "gfx950", "0.1.0",
                             "rms_norm.cuh", "a" * 64)
    assert explain.differences(old, new, complete=False) == [("param dtype", "bfloat16", "float16")]


@needs_clang
def test_cli_explains_without_compiling(cache_dir, capsys):
    _build()
    entries = sorted(cache_dir.rglob("*.hkc"))
    assert cli.main(["cache", "explain", "rms_norm", "--arch", "gfx950", "rows=64", "hidden=128"]) == 0
    assert "is cached" in capsys.readouterr().out
    assert cli.main(["cache", "explain", "rms_norm", "--arch", "gfx950", "rows=64", "hidden=128",
                     "dtype=float32", "threads=512"]) == 0
    out = capsys.readouterr().out
    assert "would compile rms_norm" in out and "param dtype: bfloat16 -> float32" in out
    assert "param threads" in out
    assert sorted(cache_dir.rglob("*.hkc")) == entries, "explain compiles nothing"


def test_cli_refuses_bad_parameters(cache_dir, capsys):
    assert cli.main(["cache", "explain", "rms_norm", "--arch", "gfx950", "rows"]) == cli.USAGE
    assert "NAME=VALUE" in capsys.readouterr().err
    assert cli.main(["cache", "explain", "nope", "--arch", "gfx950"]) == cli.USAGE


def test_log_is_off_unless_asked(monkeypatch):
    monkeypatch.delenv("HKJIT_LOG", raising=False)
    assert not explain.logging_compiles()
    monkeypatch.setenv("HKJIT_LOG", "cache, compile")
    assert explain.logging_compiles()
    monkeypatch.setenv("HKJIT_LOG", "all")
    assert explain.logging_compiles()


@pytest.fixture(autouse=True)
def _no_log(monkeypatch):
    monkeypatch.delenv("HKJIT_LOG", raising=False)
