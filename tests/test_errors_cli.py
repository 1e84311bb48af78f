"""Every CLI error is one line on stderr with exit status 2 (the command line was wrong) or 1 (the
work failed), never a traceback (issue 12, item 13)."""

import os
import subprocess
import sys

import pytest

from conftest import needs_clang


def _hkjit(*args, stdout=subprocess.PIPE, cwd=None):
    return subprocess.run([sys.executable, "-m", "hkjit", *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=300, cwd=cwd, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def _one_line_error(proc, status):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], proc.stderr
    return lines[0]


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[[kernels]]\nop = "gemm"\nshape = [256, 256, 256]\n')
    return path


@pytest.mark.parametrize("args, words", [
    (["inspect", "gemm", "--arch", "gfx950", "--shape", "a,b,c"], "--shape"),
    (["inspect", "gemm", "--arch", "gfx950", "--shape", "1,2"], "--shape"),
    (["inspect", "gemm", "--arch", "gfx950", "block_m"], "NAME=VALUE"),
    (["inspect", "gemm", "--arch", "gfx950", "--bogus"], "unrecognized"),
    (["inspect", "gemm", "--arch", "gfx950:sramecc+:sramecc-"], "twice"),
    (["inspect", "gemm", "--arch", "gfx950", "group_m=4294967296"], "group_m"),
    (["inspect", "nope", "--arch", "gfx950"], "unknown op"),
    (["inspect", "gemm"], "--arch"),
    (["nope"], "invalid choice"),
    (["cache", "prune", "--max-size", "1Q"], "size"),
])
def test_usage_errors_exit_2(cache_dir, args, words):
    assert words in _one_line_error(_hkjit(*args), 2)


@pytest.mark.parametrize("jobs", ["-1", "0", "x", "99999"])
def test_precompile_jobs_must_be_positive(cache_dir, manifest, tmp_path, jobs):
    line = _one_line_error(_hkjit("precompile", "--manifest", str(manifest), "--arch", "gfx950", "-j", jobs,
                                  "-o", str(tmp_path / "out")), 2)
    assert "--jobs" in line


@needs_clang
def test_unwritable_outputs_exit_1(cache_dir, manifest):
    _one_line_error(_hkjit("precompile", "--manifest", str(manifest), "--arch", "gfx950", "-o", "/proc/nope/x"), 1)
    _one_line_error(_hkjit("cache", "export", "/proc/x.zip"), 1)


@needs_clang
@pytest.mark.parametrize("args", [["info"], ["inspect", "gemm", "--arch", "gfx950", "--shape", "256,256,256"]])
def test_stdout_on_a_full_device_exits_1(cache_dir, args):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        line = _one_line_error(_hkjit(*args, stdout=full), 1)
    assert "No space left" in line


@needs_clang
def test_name_value_parameters_after_options(cache_dir):
    proc = _hkjit("inspect", "gemm", "--arch", "gfx950", "--shape", "256,256,256", "block_m=128", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"block_m": 128' in proc.stdout
