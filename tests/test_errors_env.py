"""Environment values and missing drivers give hkjit's own errors; killed or starved compiles leave
nothing behind outside hkjit's folders (issue 12, items 11 and 14)."""

import errno
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest

import hkjit
from hkjit.errors import CompileError, CompilerNotFoundError, DeviceError, HKJitError, InvalidArgumentError

from conftest import needs_clang

BUILD = dict(target="gfx950", m=256, n=256, k=256, dtype="bfloat16")


def _build_in_subprocess(env, cache):
    """`import hkjit` and a build in a fresh process (module-level parsing happens at import)."""
    code = textwrap.dedent("""
        import hkjit
        try:
            hkjit.build("gemm", target="gfx950", m=256, n=256, k=256, dtype="bfloat16")
            print("OK")
        except hkjit.HKJitError as e:
            print(type(e).__name__, str(e).splitlines()[0])
    """)
    full = dict(os.environ, HKJIT_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "inf", "0"])
def test_bad_compile_timeout_fails_the_compile_not_the_import(tmp_path, value):
    proc = _build_in_subprocess({"HKJIT_COMPILE_TIMEOUT": value}, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CompileError HKJIT_COMPILE_TIMEOUT="), proc.stdout + proc.stderr


@pytest.mark.parametrize("program", ["/bin/echo", "/etc/hostname", "/tmp", "/nonexistent/clang"])
def test_hkjit_clang_that_is_not_a_clang(cache_dir, monkeypatch, program):
    monkeypatch.setenv("HKJIT_CLANG", program)
    monkeypatch.setenv("HKJIT_COMPILER", "clang")
    hkjit.reset_state()
    with pytest.raises(CompilerNotFoundError, match="HKJIT_CLANG"):
        hkjit.build("gemm", **BUILD)


def test_cuda_device_without_a_driver():
    try:
        from cuda.bindings import driver
        driver.cuInit(0)
        pytest.skip("an NVIDIA driver is installed here")
    except ImportError:
        pytest.skip("cuda-python is not installed")
    except Exception:
        pass
    a = np.random.default_rng().standard_normal((40, 24)).astype(ml_dtypes.bfloat16)
    b = np.random.default_rng().standard_normal((24, 56)).astype(ml_dtypes.bfloat16)
    for spec in ("cuda:0", "cuda:7"):
        with pytest.raises(DeviceError, match="NVIDIA driver"):
            hkjit.gemm(a, b, device=spec)


@pytest.mark.parametrize("value", ["x", 2 ** 40, -1, 1.5, [4], True])
def test_num_sms_values(value):
    with pytest.raises(InvalidArgumentError, match="num_sms"):
        hkjit.build("gemm", **BUILD, num_sms=value)


@needs_clang
def test_full_disk_leaves_no_index_temp_files(cache_dir, monkeypatch):
    real = pathlib.Path.write_text

    def starved(self, text, *args, **kwargs):
        if self.suffix == ".tmp":
            real(self, text[: len(text) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "write_text", starved)
    hkjit.build("gemm", **BUILD)
    assert not list(cache_dir.rglob("*.tmp"))


@needs_clang
def test_compile_killed_by_sigkill_leaves_nothing_outside_the_cache(tmp_path):
    """A compiler that kills its caller (as the OOM killer would) after starting its output: the
    only leftover is inside the cache's 0700 sources/, and the next compile sweeps it once stale."""
    fake = tmp_path / "clang-killer"
    fake.write_text(textwrap.dedent("""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then exec clang-22 --version; fi
        while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then echo partial > "$2"; fi; shift; done
        kill -9 $PPID
        sleep 5
    """))
    fake.chmod(0o755)
    cache, private_tmp = tmp_path / "cache", tmp_path / "tmp"
    private_tmp.mkdir()
    # HKJIT_PCH=0: one compiler process, so one leftover (a precompiled header built beside the
    # compile writes its own scratch file into the same folder, swept the same way)
    proc = _build_in_subprocess({"HKJIT_CLANG": str(fake), "HKJIT_COMPILER": "clang",
                                 "TMPDIR": str(private_tmp), "HKJIT_PCH": "0"}, cache)
    assert proc.returncode == -9
    assert not list(private_tmp.iterdir()), "a killed compile left a temporary folder"
    leftovers = list((cache / "sources").glob("*.hkjit-out"))
    assert len(leftovers) == 1
    old = time.time() - 2 * 3600
    os.utime(leftovers[0], (old, old))
    proc = _build_in_subprocess({}, cache)
    assert proc.stdout.strip() == "OK", proc.stdout + proc.stderr
    assert not list((cache / "sources").glob("*.hkjit-out"))


def test_every_error_here_is_an_hkjit_error():
    for cls in (CompileError, CompilerNotFoundError, DeviceError, InvalidArgumentError):
        assert issubclass(cls, HKJitError)


def _hkjit_version():
    from hkjit._version import __version__
    return __version__


@pytest.mark.parametrize("manifest", [
    [], "x", 7,
    {"entries": [{"path": "entries/x.hkc"}]},                # a record without a key
    {"entries": ["abc"]},                                    # a string record
    {"entries": {"k": {}}},                                  # entries not a list
    {"entries": [], "toolchains": ["x"]},
    {"entries": [], "toolchains": "x"},
])
def test_malformed_bundle_manifest_is_a_bundle_error_on_every_gemm(cache_dir, tmp_path, monkeypatch, manifest):
    import json
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    if isinstance(manifest, dict):
        manifest = {"format": "hkjit-bundle", "version": 1, "hkjit_version": _hkjit_version(), **manifest}
    (bundle / "hkjit-bundle.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("HKJIT_BUNDLE_PATH", str(bundle))
    hkjit.reset_state()
    a = np.random.default_rng().standard_normal((40, 24)).astype(ml_dtypes.bfloat16)
    b = np.random.default_rng().standard_normal((24, 56)).astype(ml_dtypes.bfloat16)
    for _ in range(2):
        with pytest.raises(hkjit.errors.BundleError, match="not an hkjit bundle manifest|is malformed"):
            hkjit.gemm(a, b, device="sim:gfx950")


@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "stats"], ["cache", "verify"], ["info"]])
def test_cache_entry_path_that_is_a_directory(cache_dir, command):
    planted = cache_dir / "entries" / "ab" / ("ab" + "0" * 62 + ".hkc")
    planted.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "hkjit", *command], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
