"""hkjit's host helpers built on first use: one build per key, reuse across processes, refusal of
planted files, a clear error (for the caller's fallback) where no compiler works."""

import ctypes
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from hkjit import hostcc
from hkjit.cache import reset_default_cache

pytestmark = pytest.mark.skipif(not any(os.path.exists(os.path.join(d, "cc")) for d in
                                        os.environ.get("PATH", "").split(os.pathsep)),
                                reason="no C compiler on PATH")

PLAIN = "int hk_twice(int x) { return 2 * x; }\n__attribute__((visibility(\"default\"))) int hk_add(int a, int b) { return a + b; }\n"
EXTENSION = textwrap.dedent("""
    #define PY_SSIZE_T_CLEAN
    #include <Python.h>
    static PyObject *triple(PyObject *self, PyObject *arg) { return PyLong_FromLong(3 * PyLong_AsLong(arg)); }
    static PyMethodDef methods[] = {{"triple", triple, METH_O, NULL}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hk_probe", NULL, -1, methods};
    PyMODINIT_FUNC PyInit_hk_probe(void) { return PyModule_Create(&module); }
""")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HKJIT_CACHE_DIR", str(tmp_path / "cache"))
    reset_default_cache()
    hostcc._built.clear()
    yield tmp_path / "cache"
    reset_default_cache()
    hostcc._built.clear()


def _source(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_plain_library_builds_once_and_loads(cache_dir, tmp_path):
    src = _source(tmp_path, "plain.c", PLAIN)
    path = hostcc.build("probe_plain", [src])
    assert path.parent == cache_dir / "native" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert ctypes.CDLL(str(path)).hk_add(20, 22) == 42
    mtime = path.stat().st_mtime_ns
    hostcc._built.clear()                     # a later process: found on disk, not rebuilt
    assert hostcc.build("probe_plain", [src]) == path and path.stat().st_mtime_ns == mtime
    src.write_text(PLAIN.replace("a + b", "a + b + 1"))
    changed = hostcc.build("probe_plain", [src])     # new bytes, new key
    assert changed != path and ctypes.CDLL(str(changed)).hk_add(20, 22) == 43


def test_python_extension_loads(cache_dir, tmp_path):
    path = hostcc.build("hk_probe", [_source(tmp_path, "ext.c", EXTENSION)], python_extension=True)
    loader = importlib.machinery.ExtensionFileLoader("hk_probe", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("hk_probe", loader))
    loader.exec_module(module)
    assert module.triple(14) == 42


def test_same_key_in_another_process(cache_dir, tmp_path):
    src = _source(tmp_path, "plain.c", PLAIN)
    here = hostcc.build("probe_plain", [src])
    code = f"from hkjit import hostcc; from pathlib import Path; print(hostcc.build('probe_plain', [Path({str(src)!r})]))"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "HKJIT_CACHE_DIR": str(cache_dir)}).stdout.strip()
    assert there == str(here)


def test_planted_link_is_not_loaded(cache_dir, tmp_path):
    src = _source(tmp_path, "plain.c", PLAIN)
    path = hostcc.build("probe_plain", [src])
    evil = tmp_path / "evil.so"
    os.replace(path, evil)
    os.symlink(evil, path)
    hostcc._built.clear()
    rebuilt = hostcc.build("probe_plain", [src])     # the link is replaced by a fresh build of ours
    assert not os.path.islink(rebuilt) and ctypes.CDLL(str(rebuilt)).hk_add(1, 2) == 3


def test_no_compiler_is_a_native_build_error(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HKJIT_HOST_CC", "no-such-cc-hkjit")
    with pytest.raises(hostcc.NativeBuildError, match="no C compiler"):
        hostcc.build("probe_plain", [_source(tmp_path, "plain.c", PLAIN)])


def test_compile_failure_is_a_native_build_error(cache_dir, tmp_path):
    with pytest.raises(hostcc.NativeBuildError, match="failed building"):
        hostcc.build("probe_bad", [_source(tmp_path, "bad.c", "this is not C;\n")])
    assert not [p for p in (cache_dir / "native").iterdir() if p.name.endswith(".tmp.so")]


def test_bad_name_refused(cache_dir, tmp_path):
    with pytest.raises(hostcc.NativeBuildError, match="bad library name"):
        hostcc.build("../x", [_source(tmp_path, "plain.c", PLAIN)])


def test_the_benchmarks_launch_loop_builds(cache_dir):
    """hkjit bench's driver floor (bench/launch_loop.c) builds with hostcc's strict C11 flags and
    runs its loop (a stand-in launch function that counts its calls)."""
    from pathlib import Path
    import hkjit.bench
    lib = ctypes.CDLL(str(hostcc.build("bench_launch_loop", [Path(hkjit.bench.__file__).with_name("launch_loop.c")])))
    lib.hk_launch_loop.restype = ctypes.c_double
    lib.hk_launch_loop.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    calls = []
    launch = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)(
        lambda *args: calls.append(args[4]) or 0)
    error = ctypes.c_int(0)
    seconds = lib.hk_launch_loop(ctypes.cast(launch, ctypes.c_void_p), None, None, None, 5, ctypes.byref(error))
    assert seconds >= 0 and error.value == 0 and calls == [32] * 5
