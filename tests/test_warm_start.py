"""Warm start: a fresh process with a populated cache finds its kernel's key without hashing a
header or asking a compiler (the key index's stamp of the header files), and imports only what a
call needs. The key itself stays the content hash: every change to a header's bytes, or to where an
#include resolves, gives the key of the new contents."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hkjit
from hkjit import compiler, jit, spec as spec_mod, targets
from hkjit.cache import default_cache, index as index_mod, make_key

from conftest import needs_clang

KERNELS = Path(__file__).parent / "kernels"
REPO = Path(__file__).resolve().parent.parent


def _spec():
    return spec_mod.Specialization("scale", targets.parse("gfx950"), "scale.cuh", "scale_kernel<3, 256>",
                                   "hkjit_scale", spec_mod.make_params({"s": 3, "threads": 256}))


@pytest.fixture
def sources(editable_sources, monkeypatch, cache_dir):
    """The editable copies; their stamps count as settled at once (spec.SETTLE_NS: see
    test_files_changed_just_now_are_not_stamped)."""
    monkeypatch.setattr(spec_mod, "SETTLE_NS", 0)
    return editable_sources


def _prime(spec) -> str:
    """A cold process: the key from the compiler's identity and the hashed headers, recorded in
    the index; an entry under it (the index trusts only a key whose entry exists and is this
    specialisation; its code is never run here)."""
    key = jit.cache_key(spec)
    default_cache().put(key, b"code", jit._expectation(spec))
    return key


def _fresh():
    hkjit.reset_state()   # as a new process: no memoised keys, closures, loaded kernels or cache object


def _content_key(spec) -> str:
    """The key computed from scratch, as a process with no index would."""
    comp = compiler.find_compiler(spec.target)
    closure = spec_mod.scan(spec.source)
    flags = comp.flags(spec.target, [spec_mod.include_dir(), spec_mod.kernel_sources_dir()])
    return make_key(spec_mod.key_parts(spec, comp.identity, flags, closure.files))


def _forbid(monkeypatch, *what):
    def refuse(*args, **kwargs):
        raise AssertionError("a warm start must neither hash headers nor ask a compiler")
    for name in what:
        module, attr = {"hashing": (spec_mod, "scan"), "compiler": (compiler, "find_compiler")}[name]
        monkeypatch.setattr(module, attr, refuse)


def _edit_keeping_size_and_mtime(path: Path) -> None:
    st = path.stat()
    text = path.read_bytes()
    time.sleep(0.05)   # the edit lands on a later tick of the file system's clock than the stamp
    i = text.index(b"hk")
    path.write_bytes(text[:i] + b"HK" + text[i + 2:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))     # mtime set back
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@needs_clang
def test_warm_lookup_hashes_no_header_and_asks_no_compiler(sources, monkeypatch):
    spec = _spec()
    key = _prime(spec)
    (path,) = index_mod.record_files(default_cache().root)
    record = index_mod.read_record(path)
    stamped = {Path(p).name for p, *_ in record["stamp"]}
    assert {"scale.cuh", "platform.hpp", "kernel_sources", "include"} <= stamped
    _fresh()
    _forbid(monkeypatch, "hashing", "compiler")
    assert jit.cache_key(spec) == key


@needs_clang
def test_header_edit_keeping_size_and_mtime_gives_the_new_contents_key(sources):
    src, inc = sources
    spec = _spec()
    key = _prime(spec)
    _edit_keeping_size_and_mtime(inc / "hk/common/platform.hpp")
    _fresh()
    new = jit.cache_key(spec)
    assert new != key and new == _content_key(spec)
    (path,) = index_mod.record_files(default_cache().root)
    assert index_mod.read_record(path)["key"] == new     # the record now names the new contents


@needs_clang
def test_header_replaced_by_rename_gives_the_new_contents_key(sources):
    src, inc = sources
    spec = _spec()
    key = _prime(spec)
    header = inc / "hk/common/platform.hpp"
    st = header.stat()
    tmp = header.with_name("platform.hpp.new")
    tmp.write_bytes(header.read_bytes().replace(b"hk", b"HK", 1))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, header)                                 # as editors save: same size, same mtime
    _fresh()
    new = jit.cache_key(spec)
    assert new != key and new == _content_key(spec)


@needs_clang
def test_a_new_header_shadowing_an_include_gives_a_new_key(sources):
    """scale.cuh includes "hk/common/platform.hpp", found under include/; the same path created
    beside scale.cuh is found first from now on. No file of the old closure changed."""
    src, inc = sources
    spec = _spec()
    key = _prime(spec)
    time.sleep(0.05)
    shadow = src / "hk/common/platform.hpp"
    shadow.parent.mkdir(parents=True)
    shutil.copy(inc / "hk/common/platform.hpp", shadow)
    _fresh()
    new = jit.cache_key(spec)
    assert new != key and new == _content_key(spec)
    assert "kernel_sources/hk/common/platform.hpp" in spec_mod.header_closure("scale.cuh")


@needs_clang
def test_touched_headers_keep_their_key_without_asking_the_compiler(sources, monkeypatch):
    """A checkout or copy moves every stamp but no content: the headers are hashed once, match the
    record's digest, and the record is stamped again, so the next process hashes nothing."""
    src, inc = sources
    spec = _spec()
    key = _prime(spec)
    os.utime(inc / "hk/common/platform.hpp")
    _fresh()
    _forbid(monkeypatch, "compiler")
    assert jit.cache_key(spec) == key
    _fresh()
    _forbid(monkeypatch, "hashing")
    assert jit.cache_key(spec) == key


@needs_clang
def test_files_changed_just_now_are_not_stamped(sources, monkeypatch):
    """A file changed within the file system's clock tick after its stamp was taken would keep that
    stamp; so a stamp holding anything younger than SETTLE_NS is not recorded, and the next process
    hashes the headers (still without asking the compiler)."""
    monkeypatch.setattr(spec_mod, "SETTLE_NS", 10 ** 12)      # every file counts as just changed
    spec = _spec()
    key = _prime(spec)
    (path,) = index_mod.record_files(default_cache().root)
    assert index_mod.read_record(path)["stamp"] == []
    _fresh()
    _forbid(monkeypatch, "compiler")
    assert jit.cache_key(spec) == key


def test_a_stamp_breaks_on_every_kind_of_change(tmp_path):
    f = tmp_path / "h.hpp"
    f.write_text("int x;\n")
    stamp = ((str(f), *spec_mod._stat(f)),)
    assert spec_mod.stamp_holds(stamp)
    time.sleep(0.05)
    os.chmod(f, 0o600)                                      # ctime moves: trusted no more
    assert not spec_mod.stamp_holds(stamp)
    assert not spec_mod.stamp_holds(((str(tmp_path / "gone.hpp"), 0, 0, 0, 0),))
    assert not spec_mod.stamp_holds((("bad",),))


# --------------------------------------------------------------------- the warm process, end to end
CHILD = r"""
import json, sys
import numpy as np
rng = np.random.default_rng()
a = rng.standard_normal((37, 29)).astype(np.float16)
b = rng.standard_normal((29, 50)).astype(np.float16)
out = np.full((37, 50), np.nan, np.float32)
before = set(sys.modules)
import hkjit
hkjit.gemm(a, b, out=out, device="sim:gfx950")
ref = a.astype(np.float64) @ b.astype(np.float64)
print(json.dumps({"err": float(np.linalg.norm(out - ref) / np.linalg.norm(ref)),
                  "imported": sorted(set(sys.modules) - before),
                  "headers_hashed": len(sys.modules["hkjit.spec"]._closures)}))
"""
# What the first result from a populated cache must not load: compiling, precompiled headers,
# deployment, the native repeat path (a signature's second call), bundles, eviction, locks, the
# other vendor's gemm half and runtime, and the standard library modules only those need.
NOT_ON_A_WARM_START = ("hkjit.compiler", "hkjit.pch", "hkjit.deploy", "hkjit.manifest", "hkjit.native",
                       "hkjit.hostcc", "hkjit.api", "hkjit.cache.bundle", "hkjit.cache.prune", "hkjit.cache.lock",
                       "hkjit.cache.pch", "hkjit.ops._hopper_gemm", "hkjit.runtime.cuda", "hkjit.runtime.hip",
                       "zipfile", "tempfile", "subprocess", "platformdirs", "tomli_w", "cuda.bindings.nvrtc",
                       "rocm.bindings.hiprtc")


@needs_clang
def test_a_warm_first_call_imports_only_what_it_needs(cache_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HKJIT_")}
    env.update(HKJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))

    def run():
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    cold = run()
    assert cold["err"] < 1e-2 and "hkjit.compiler" in cold["imported"]
    warm = run()
    assert warm["err"] < 1e-2
    assert warm["headers_hashed"] == 0
    assert not set(NOT_ON_A_WARM_START) & set(warm["imported"]), set(NOT_ON_A_WARM_START) & set(warm["imported"])
