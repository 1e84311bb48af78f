"""CPU-only checks of the Hopper GEMM: every default config compiles for sm_90a with NVRTC, with
no spills and with wgmma in the PTX; the ctypes Args mirror the C++ struct; override validation."""
import ctypes
import os
from pathlib import Path
import re
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import hkjit  # noqa: E402
from hkjit import compiler, spec as spec_mod, static, targets  # noqa: E402
from hkjit.errors import CompilerNotFoundError, InvalidArgumentError  # noqa: E402
from hkjit.ops import _hopper_gemm as hg  # noqa: E402

from conftest import needs_nvrtc, needs_sass  # noqa: E402

SMS = 132
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (128, 8192, 8192), (16, 4096, 4096), (1, 1, 1),
          (1000, 1000, 1000), (4097, 257, 63)]
LAYOUTS = [(True, True), (True, False), (False, True), (False, False)]


def _default_configs():
    seen = {}
    for (M, N, K) in SHAPES:
        for akm, bkm in LAYOUTS:
            cfg = hg.choose_config(M, N, K, akm, bkm, "bfloat16", "bfloat16", SMS, {})
            seen.setdefault(hg.template_args(cfg), cfg)
    for ov in (dict(block_m=128, block_n=128, split_k=3), dict(block_m=64, block_n=256, stages=4, split_k=8)):
        cfg = hg.choose_config(256, 512, 4096, True, False, "bfloat16", "float32", SMS, ov, has_c=True)
        seen.setdefault(hg.template_args(cfg), cfg)
    base = (1000, 1000, 1000, True, False)
    for ind in hg.IN_DTYPES:
        for outd in hg.OUT_DTYPES:
            cfg = hg.choose_config(*base, ind, outd, SMS, {}, has_bias=True, has_c=True)
            seen.setdefault(hg.template_args(cfg), cfg)
    for atma, btma in ((False, False), (True, False), (False, True)):
        cfg = hg.choose_config(4097, 257, 63, True, False, "float16", "float32", SMS, {},
                               a_tma=atma, b_tma=btma, has_bias=True)
        seen.setdefault(hg.template_args(cfg), cfg)
    return list(seen.items())


def _compile(targs):
    """(PTX, ptxas report) of gemm_hopper<targs> built the way hkjit builds it: the generated unit,
    hkjit's NVRTC driver and its pinned flags."""
    try:
        comp = compiler.find_compiler(targets.parse("sm_90a"), "nvrtc")
    except CompilerNotFoundError as e:
        pytest.skip(f"NVRTC not available: {e}")
    spec = spec_mod.Specialization("gemm", targets.parse("sm_90a"), "gemm_hopper.cuh", f"gemm_hopper<{targs}>",
                                   "hkjit_gemm", ())
    result = comp.compile(spec_mod.render(spec), Path("gemm_unit.cu"), spec.target,
                          [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)
    return result.ptx, result.log


@pytest.mark.parametrize("targs,cfg", _default_configs(), ids=lambda x: x if isinstance(x, str) else "")
def test_default_configs_compile_without_spills(targs, cfg):
    ptx, log = _compile(targs)
    assert "wgmma.mma_async" in ptx
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and spills.groups() == ("0", "0"), log
    assert re.search(r"0 bytes stack frame", log), log
    if cfg["consumers"] >= 2:
        assert "setmaxnreg" in ptx and "C7508" not in log   # register reallocation not ignored


def test_args_layout_matches_cpp():
    # gemm_hopper.cuh static_asserts sizeof(args) == 512 and lists these offsets.
    assert ctypes.sizeof(hg.Args) == hg.ARGS_SIZE == 512
    assert hg.Args.a_map.offset == 0 and hg.Args.b_map.offset == 128 and hg.Args.c_map.offset == 256
    assert hg.Args.a.offset == 384 and hg.Args.a_stride_m.offset == 424
    assert hg.Args.M.offset == 472 and hg.Args.alpha.offset == 484 and hg.Args.workspace.offset == 496
    assert hg.Args.partials.offset == 504
    src = open(os.path.join(ROOT, "kernel_sources", "gemm_hopper.cuh")).read()
    assert "sizeof(args) == 512" in src


def test_defaults_and_resources():
    cfg = hg.choose_config(8192, 8192, 8192, True, False, "bfloat16", "bfloat16", SMS, {})
    assert (cfg["block_m"], cfg["block_n"], cfg["consumers"], cfg["stages"]) == (128, 256, 2, 3)
    assert cfg["c_tma"] and not hg.choose_config(64, 64, 64, True, True, "bfloat16", "float32", SMS, {})["c_tma"]
    assert hg.threads(cfg) == 384 and hg.dynamic_smem(cfg) <= hg.SMEM_LIMIT
    assert hg.grid(8192, 8192, 8192, cfg, SMS) == (SMS, 1, 1)
    small = hg.choose_config(16, 4096, 4096, True, False, "bfloat16", "bfloat16", SMS, {})
    assert small["block_m"] == 64 and 4096 // small["block_n"] * small["split_k"] >= SMS * 0.9
    assert (small["block_n"], small["split_k"]) == (64, 2)          # split-K rule: one wave of K-slices
    assert hg.grid(16, 4096, 4096, small, SMS) == (128, 1, 1)
    assert hg.workspace_bytes(16, 4096, small) == 256 + 64 * 2 * 64 * 64 * 4
    assert hg.workspace(small, dict(m=16, n=4096)) == (256, 256, 64 * 2 * 64 * 64 * 4)   # counters kept; scratch
    assert hg.workspace(cfg, dict(m=8192, n=8192)) == (0, 0, 0)
    assert hg.choose_config(64, 8192, 512, True, False, "bfloat16", "bfloat16", SMS, {})["split_k"] == 1
    assert hg.choose_config(64, 4096, 14336, True, False, "bfloat16", "bfloat16", SMS, {})["split_k"] == 1
    assert hg.choose_config(128, 8192, 8192, True, False, "bfloat16", "bfloat16", SMS, {})["split_k"] == 1
    assert hg.choose_config(100, 100, 63, True, True, "bfloat16", "bfloat16", SMS, dict(split_k=8))["split_k"] == 1
    assert hg.template_args(small).endswith(", 2")
    assert hg.grid(1, 1, 1, hg.choose_config(1, 1, 1, True, True, "float16", "float32", SMS, {}), SMS) == (1, 1, 1)
    ta = hg.template_args(cfg)
    assert ta.startswith("hk::bf16, hk::bf16, true, false, 128, 256, 64, 2, 3, 8")


@pytest.mark.parametrize("ov,needle", [
    (dict(block_q=64), "unknown tile override"),
    (dict(block_k=32), "block_k=32"),
    (dict(block_n=100), "block_n=100"),
    (dict(block_m=96), "block_m=96"),
    (dict(block_m=128, consumers=3), "whole 64-row"),
    (dict(block_m=128, block_n=256, consumers=1), "register budget"),
    (dict(stages=4), "shared memory"),
    (dict(stages=1), "stages=1"),
    (dict(warps=10), "warps=10"),
    (dict(group_m=0), "group_m=0"),
    (dict(block_m="128"), "not an integer"),
    (dict(split_k=0), "split_k=0"),
    (dict(split_k=17), "split_k=17"),
])
def test_invalid_overrides(ov, needle):
    with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
        hg.choose_config(4096, 4096, 4096, True, True, "bfloat16", "bfloat16", SMS, ov)


def test_invalid_dtypes_and_shapes():
    with pytest.raises(InvalidArgumentError, match="input dtype"):
        hg.choose_config(64, 64, 64, True, True, "float32", "float32", SMS, {})
    with pytest.raises(InvalidArgumentError, match="output dtype"):
        hg.choose_config(64, 64, 64, True, True, "bfloat16", "int8", SMS, {})
    with pytest.raises(InvalidArgumentError, match="K=0"):
        hg.choose_config(64, 64, 0, True, True, "bfloat16", "bfloat16", SMS, {})


def test_operand_layout():
    # A row-major 4096x4096: K-major, TMA
    assert hg.operand_layout(0x1000, 4096, 4096, 4096, 1) == (True, True)
    # A transposed view (stored K x M): M-major, TMA
    assert hg.operand_layout(0x1000, 4096, 4096, 1, 4096) == (False, True)
    # odd K row stride (63 elements = 126 bytes): no TMA
    assert hg.operand_layout(0x1000, 4097, 63, 63, 1) == (True, False)
    # an unaligned base: no TMA
    assert hg.operand_layout(0x1002, 64, 64, 64, 1)[1] is False
    # a single row: stride irrelevant
    assert hg.operand_layout(0x1000, 1, 63, 63, 1) == (True, True)


def test_make_args_uses_tensor_map_encoder():
    calls = []

    def fake_encode(ptr, dt, dims, stride_bytes, box, sw):
        calls.append((ptr, dims, stride_bytes, box, sw))
        return bytes(range(128))
    cfg = hg.choose_config(8192, 8192, 8192, True, False, "bfloat16", "float32", SMS, {})
    g = hg.make_args(cfg, 0x10000, (8192, 8192), (8192, 1), 0x20000, (8192, 8192), (8192, 1),
                     0x30000, (8192, 1), encode_tensor_map=fake_encode, alpha=2.0)
    assert len(calls) == 2   # float32 output: direct stores, no C map
    assert calls[0] == (0x10000, (8192, 8192), 16384, (64, 128), 128)     # A: K-major box 64 x BM
    assert calls[1] == (0x20000, (8192, 8192), 16384, (64, 64), 128)      # B: N-major box 64 x BK
    raw = bytes(g)
    assert raw[:128] == bytes(range(128)) and g.M == 8192 and g.alpha == 2.0
    assert not g.workspace and not g.partials          # c_void_p reads NULL as None
    small = hg.choose_config(16, 4096, 4096, True, False, "bfloat16", "bfloat16", SMS, {})
    args = ((16, 4096), (4096, 1), 0x20000, (4096, 4096), (4096, 1), 0x30000, (4096, 1))
    with pytest.raises(InvalidArgumentError, match="split_k=2 needs zeroed counters .* partials"):
        hg.make_args(small, 0x10000, *args, encode_tensor_map=fake_encode, workspace_ptr=0x40000)
    g = hg.make_args(small, 0x10000, *args, encode_tensor_map=fake_encode, workspace_ptr=0x40000,
                     partials_ptr=0x80000)
    assert (g.workspace, g.partials) == (0x40000, 0x80000)


@needs_nvrtc
@needs_sass
def test_inspect_reports_the_sass_instruction_mix(cache_dir):
    """`hkjit inspect gemm --arch sm_90a` counts the SASS (cuobjdump, found on PATH or from its pip
    package): the main loop's wgmma and TMA loads are there."""
    report = hkjit.inspect("gemm", "sm_90a", m=512, n=512, k=512)
    mix = report["instruction_mix"]["classes"]
    assert mix["HGMMA"] > 0 and mix["UTMALDG"] > 0, mix


def test_a_missing_nvidia_tool_is_none():
    assert static.nvidia_tool("hkjit-no-such-tool") is None
