"""hkjit.build end to end with the real compilers: gemm for gfx942 and gfx950 (clang-22) and
sm_90a (NVRTC), the cache's miss → hit, and key sensitivity."""
import pytest

import hkjit
from hkjit import codeobj, compiler, jit

from conftest import needs_clang, needs_nvrtc

SMALL = dict(m=512, n=512, k=512, dtype="bfloat16")


def _target_param():
    return [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang),
            pytest.param("sm_90a", marks=needs_nvrtc)]


@pytest.mark.parametrize("target", _target_param())
def test_build_gives_a_loadable_object_with_no_spills(target, cache_dir):
    built = hkjit.build("gemm", target=target, **SMALL)
    assert built.code[:4] == b"\x7fELF" and "hkjit_gemm" in codeobj.symbols(built.code)
    assert built.compiled and len(built.key) == 64 and built.meta["spills"] == 0
    if target.startswith("gfx"):
        assert codeobj.amd_metadata(built.code)["amdhsa.target"].endswith(target)
        for field in ("vgprs", "agprs", "sgprs", "lds_bytes"):
            assert field in built.meta
    else:
        assert built.meta["registers"] > 0 and "smem_bytes" in built.meta


@needs_clang
def test_second_build_is_a_cache_hit_with_no_compile(cache_dir, monkeypatch):
    first = hkjit.build("gemm", target="gfx950", **SMALL)
    assert first.compiled

    def no_compile(*a, **k):
        raise AssertionError("compiled on a cache hit")
    monkeypatch.setattr(compiler.ClangCompiler, "compile", no_compile)
    again = hkjit.build("gemm", target="gfx950", **SMALL)
    assert not again.compiled and again.key == first.key and again.code == first.code
    # A new process has an empty memory table: the entry must come from disk, still without compiling.
    hkjit.reset_state()
    from_disk = hkjit.build("gemm", target="gfx950", **SMALL)
    assert not from_disk.compiled and from_disk.code == first.code


@needs_clang
def test_key_changes_with_target_tiles_and_dtype(cache_dir):
    base = jit.cache_key(hkjit.ops.get("gemm").plan("gfx950", **SMALL).spec)
    other_target = jit.cache_key(hkjit.ops.get("gemm").plan("gfx942", **SMALL).spec)
    other_dtype = jit.cache_key(hkjit.ops.get("gemm").plan("gfx950", **{**SMALL, "dtype": "float16"}).spec)
    assert len({base, other_target, other_dtype}) == 3


@needs_clang
def test_runtime_extents_do_not_change_the_kernel(cache_dir):
    """M, N, K are kernel arguments: two sizes in one shape class share one compiled kernel."""
    a = jit.cache_key(hkjit.ops.get("gemm").plan("gfx950", m=4096, n=4096, k=4096).spec)
    b = jit.cache_key(hkjit.ops.get("gemm").plan("gfx950", m=4096, n=4096, k=4160).spec)
    c = jit.cache_key(hkjit.ops.get("gemm").plan("gfx950", m=4096, n=4096, k=4096,
                                                       specialize_shapes=True).spec)
    assert a == b and c != a


def _fresh_process_state():
    """What a new process has: no memory table, no memoised keys."""
    hkjit.reset_state()


@needs_clang
def test_warm_start_resolves_keys_without_asking_the_compiler(cache_dir, monkeypatch):
    first = hkjit.build("gemm", target="gfx950", **SMALL)
    _fresh_process_state()

    def no_compiler(*a, **k):
        raise AssertionError("the compiler was consulted on a warm start")
    monkeypatch.setattr(compiler, "find_compiler", no_compiler)
    again = hkjit.build("gemm", target="gfx950", **SMALL)
    assert again.key == first.key and not again.compiled


@needs_clang
def test_index_is_ignored_once_the_compiler_changes(cache_dir, monkeypatch, tmp_path):
    fake_binary = tmp_path / "clang-binary"
    fake_binary.write_bytes(b"v1")
    monkeypatch.setattr(compiler.ClangCompiler, "_files", lambda self: [str(fake_binary)])
    hkjit.build("gemm", target="gfx950", **SMALL)
    _fresh_process_state()
    fake_binary.write_bytes(b"version 2")  # an upgraded compiler: size and mtime change
    asked = []
    real = compiler.find_compiler
    monkeypatch.setattr(compiler, "find_compiler", lambda *a, **k: asked.append(1) or real(*a, **k))
    hkjit.build("gemm", target="gfx950", **SMALL)
    assert asked, "a stale index entry was trusted after the compiler changed"


@needs_nvrtc
def test_generated_source_never_goes_through_a_shared_predictable_path(cache_dir, tmp_path):
    """With the cache's sources/ unwritable, the unit goes to a fresh private folder that is removed
    after the compile: a link planted at the old shared /tmp path is not followed, and nothing is
    left behind."""
    import tempfile
    from pathlib import Path
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "sources").write_text("not a folder")          # mkdir of sources/ fails
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    shared = Path(tempfile.gettempdir()) / "hkjit-sources"
    shared.mkdir(exist_ok=True)
    plant = hkjit.ops.get("gemm").plan("sm_90a", m=96, n=96, k=96).spec
    key = jit.cache_key(plant)
    link = shared / f"gemm-sm_90a-{key[:16]}.cu"
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    before = set(Path(tempfile.gettempdir()).glob("hkjit-src-*"))
    try:
        assert hkjit.build("gemm", target="sm_90a", m=96, n=96, k=96).compiled
    finally:
        link.unlink()
    assert victim.read_text() == "precious"
    assert set(Path(tempfile.gettempdir()).glob("hkjit-src-*")) == before
