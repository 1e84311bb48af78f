"""Specialisation (generated source, key parts) and the compiler drivers on real targets."""
from pathlib import Path

import pytest

from hkjit import codeobj, compiler, spec as spec_mod, targets
from hkjit.errors import CompileError, CompilerNotFoundError, InvalidArgumentError

from conftest import needs_clang, needs_nvrtc

KERNELS = Path(__file__).parent / "kernels"


def _spec(target="gfx950", s=3, source="scale.cuh"):
    return spec_mod.Specialization("scale", targets.parse(target), source, f"scale_kernel<{s}, 256>",
                                   "hkjit_scale", spec_mod.make_params({"s": s, "threads": 256}))


@pytest.fixture
def test_sources(editable_sources):
    return editable_sources


def test_rendered_unit_names_only_validated_values():
    text = spec_mod.render(_spec())
    assert '#include "scale.cuh"' in text and "using hkjit_kernel = scale_kernel<3, 256>;" in text
    assert "HK_ENTRY(hkjit_scale, hkjit_kernel)" in text


@pytest.mark.parametrize("evil", ['scale_kernel<3, 256>; system("x")', "scale_kernel<3>\n#include </etc/passwd>",
                                  "scale_kernel<3, 256> /* */"])
def test_injection_in_kernel_type_is_refused(evil):
    with pytest.raises(InvalidArgumentError):
        spec_mod.Specialization("scale", targets.parse("gfx950"), "scale.cuh", evil, "hkjit_scale", ())


@pytest.mark.parametrize("value", ["a b", "x;y", 1.5, None, "../etc", 2**70])
def test_param_values_are_checked(value):
    with pytest.raises(InvalidArgumentError):
        spec_mod.make_params({"p": value})


def test_key_parts_cover_headers_params_target_and_flags(test_sources):
    src, inc = test_sources
    base = spec_mod.key_parts(_spec(), "clang 22", ["-O3"])
    assert "include/hk/common/platform.hpp" in base["files"] and "kernel_sources/scale.cuh" in base["files"]
    assert spec_mod.key_parts(_spec(s=4), "clang 22", ["-O3"]) != base        # a template parameter
    assert spec_mod.key_parts(_spec("gfx942"), "clang 22", ["-O3"]) != base   # the target
    assert spec_mod.key_parts(_spec(), "clang 22", ["-O2"]) != base           # a flag
    assert spec_mod.key_parts(_spec(), "clang 21", ["-O3"]) != base           # the compiler
    header = inc / "hk/common/platform.hpp"
    header.write_text(header.read_text() + "\n// changed\n")
    assert spec_mod.key_parts(_spec(), "clang 22", ["-O3"])["files"] != base["files"]  # a header


def _compile(target, test_sources, tmp_path, name=None):
    src, inc = test_sources
    spec = _spec(target)
    path = tmp_path / "unit.src"
    path.write_text(spec_mod.render(spec))
    comp = compiler.find_compiler(spec.target, name)
    return comp, comp.compile(path.read_text(), path, spec.target, [inc, src], "hkjit_scale")


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx942:sramecc+:xnack-"])
def test_clang_builds_amd_code_objects(arch, test_sources, tmp_path):
    comp, result = _compile(arch, test_sources, tmp_path, "clang")
    assert comp.identity.startswith("clang") and "clang version" in comp.identity
    assert result.code[:4] == b"\x7fELF" and "hkjit_scale" in codeobj.symbols(result.code)
    assert codeobj.amd_metadata(result.code)["amdhsa.target"].endswith(arch)
    assert result.meta["spills"] == 0 and result.meta["vgprs"] > 0


@needs_nvrtc
def test_nvrtc_builds_a_cubin(test_sources, tmp_path):
    comp, result = _compile("sm_90a", test_sources, tmp_path, "nvrtc")
    assert result.code[:4] == b"\x7fELF" and "hkjit_scale" in codeobj.symbols(result.code)
    assert result.meta["registers"] > 0 and result.meta["spills"] == 0


@needs_clang
def test_compile_error_carries_diagnostics_command_and_source(tmp_path):
    bad = tmp_path / "bad.hip"
    bad.write_text("this is not C++;\n")
    comp = compiler.find_compiler(targets.parse("gfx950"), "clang")
    with pytest.raises(CompileError) as e:
        comp.compile(bad.read_text(), bad, targets.parse("gfx950"), [], "k")
    msg = str(e.value)
    assert "error" in e.value.log and str(bad) in msg and "--offload-arch=gfx950" in msg


def test_missing_or_wrong_compiler(monkeypatch):
    with pytest.raises(CompilerNotFoundError, match="cannot build for gfx950"):
        compiler.find_compiler(targets.parse("gfx950"), "nvrtc")
    monkeypatch.setitem(compiler._FINDERS, "hipcc", lambda: None)
    compiler._found.cache_clear()
    try:
        with pytest.raises(CompilerNotFoundError, match="not available"):
            compiler.find_compiler(targets.parse("gfx950"), "hipcc")
    finally:
        compiler._found.cache_clear()
