"""CDNA attention forward, static checks (no AMD GPU needed): every default configuration (D64 /
D128, causal or not, varlen, fp16) compiles for gfx942 and gfx950 with 0 spills and no scratch,
LDS = the plan's and within the target's, two waves per SIMD (the 8-wave ping-pong), MFMAs per KV
block in the main loop = the tile arithmetic, every K/V byte by direct-to-LDS loads whose soffset
is the constant 0, kernarg size = ctypes Args; and the configuration table and its limits. The
instruction mix of the forward and the backward kernels: outputs stored 4 or 8 elements per store
(no 2-byte global store), and on gfx942 no element-wise LDS read in the main loop (the transposed
operands are read in quad order, attention_cdna_common.hpp)."""

import ctypes
import re
import shutil

import pytest

import hkjit
from hkjit import static
from hkjit.ops import _cdna_attention_fwd as F
from hkjit.targets import parse

from conftest import HAVE_CLANG

_WIDE_STORE = {"global_store_dwordx2": 8, "global_store_dwordx4": 16}


def check_mix(insts, out_bytes):
    """Outputs (out_bytes per lane: D per D x 32 accumulator) go out in 8- or 16-byte stores, nothing
    in 2-byte ones; on gfx942 the main loop reads LDS 8 bytes or more at a time (no ds_read_u16)."""
    ops = [op for _, op, _, _ in insts]
    assert not [op for op in ops if op.startswith("global_store_short") or op.startswith("global_store_byte")]
    assert sum(_WIDE_STORE.get(op, 0) for op in ops) == out_bytes
    lo, hi = static.main_loop(insts)
    reads = [op for a, op, _, _ in insts if lo <= a <= hi and op.startswith("ds_read")]
    assert reads and all(re.fullmatch(r"ds_read(2|2st64)?_b(64|128)|ds_read_b64_tr_b16", op) for op in reads), \
        sorted(set(reads))

needs_tools = pytest.mark.skipif(not HAVE_CLANG or not shutil.which("llvm-objdump-22"),
                                 reason="clang-22 / llvm-objdump-22 not installed (apt-get install clang-22 llvm-22)")
CONFIGS = [(a, dict(head_dim=d, causal=c)) for a in ("gfx950", "gfx942") for d in (128, 64) for c in (False, True)] + \
          [(a, dict(head_dim=128, causal=True, varlen=True, dtype="float16")) for a in ("gfx950", "gfx942")]


@needs_tools
@pytest.mark.parametrize("arch,params", CONFIGS, ids=[f"{a}-{p}" for a, p in CONFIGS])
def test_default_configs_compile_clean(arch, params):
    r = hkjit.inspect("attention", arch, **params)
    cfg = r["params"]
    assert r["vgpr_spills"] == 0 and r["sgpr_spills"] == 0 and r["scratch_bytes"] == 0
    assert r["lds_bytes"] == F.lds_bytes(cfg) <= parse(arch).smem_per_block
    assert r["vgprs"] <= 256 and r["waves_per_simd"] >= 2   # vgprs counts AGPRs too (unified file)
    k = r["mfma_per_step"]
    assert k["step"] == "KV block"
    assert k["per_wave"] == k["tile_arithmetic"] == F.mfma_per_kv_block(cfg) > 0
    built = hkjit.build("attention", target=arch, **{**hkjit.ops.get("attention").default_shape, **params})
    s = static.amd_gemm_loop_stats(static.amd_disassembly(built.code, arch))
    # K and V tiles of one KV block arrive by direct-to-LDS loads, spread over the waves
    per_wave = 2 * cfg["block_kv"] * cfg["head_dim"] * 2 // (64 * cfg["load_bytes"] * cfg["waves"])
    assert s["lds_dma_loop"] == per_wave and s["lds_dma_soffset"] == 0
    assert built.meta["kernarg_bytes"] == ctypes.sizeof(F.Args) == 200
    check_mix(static.amd_disassembly(built.code, arch), cfg["head_dim"])   # O: D x 32 per wave


def test_default_table_and_limits():
    from hkjit.errors import InvalidArgumentError
    p = dict(batch=1, heads=8, kv_heads=1, n_q=8192, n_k=8192, head_dim=128, dtype="bfloat16", causal=False,
             varlen=False)
    for arch, load, mk in (("gfx950", 16, 32), ("gfx942", 4, 16)):
        c = F.configure(parse(arch), p, {})
        assert (c["waves"], c["block_q"], c["block_kv"], c["load_bytes"], c["mfma_k"], c["lds_bytes"]) == \
            (8, 256, 64, load, mk, 65536)
        assert F.mfma_per_kv_block(c) == 2 * 64 * 32 * 128 // (256 * mk)
        assert F.launch_grid(c, p) == (32, 8, 1)
    assert F.configure(parse("gfx950"), dict(p, align=8), {})["load_bytes"] == 4
    assert F.configure(parse("gfx950"), dict(p, head_dim=64), {"block_kv": 128})["lds_bytes"] == 64 * 1024
    with pytest.raises(InvalidArgumentError, match="4 bytes"):
        F.configure(parse("gfx950"), dict(p, align=2), {})
    with pytest.raises(InvalidArgumentError, match="whole direct-to-LDS"):
        F.configure(parse("gfx950"), dict(p, head_dim=64), {"block_kv": 32})   # 4 KiB over 8 waves x 1 KiB
    with pytest.raises(InvalidArgumentError, match="unknown tile override"):
        F.configure(parse("gfx950"), p, {"stages": 3})


BWD = [(a, op, dict(head_dim=d, causal=c)) for a in ("gfx950", "gfx942") for op in ("dq", "dkdv") for d in (128, 64)
       for c in (False, True)]


@needs_tools
@pytest.mark.parametrize("arch,kernel,params", BWD, ids=[f"{a}-{k}-{p}" for a, k, p in BWD])
def test_backward_kernels_compile_clean(arch, kernel, params):
    from hkjit.ops import _cdna_attention_bwd as B
    r = hkjit.inspect(f"attention_bwd_{kernel}", arch, **params)
    assert r["vgpr_spills"] == 0 and r["sgpr_spills"] == 0 and r["scratch_bytes"] == 0
    assert r["lds_bytes"] == B.Kernel.lds(r["params"]) <= parse(arch).smem_per_block
    assert r["vgprs"] <= 256 and r["waves_per_simd"] >= 2   # vgprs counts AGPRs too (unified file)
    if kernel == "dkdv" and params["head_dim"] == 64:   # the wave pairs fit 128 registers (amd_waves_per_simd)
        assert r["vgprs"] <= 128 and r["waves_per_simd"] == 4
    assert r["max_flat_workgroup_size"] == 64 * r["params"]["waves"] == 64 * (4 if kernel == "dq" else 8)
    k = r["mfma_per_step"]
    assert k["per_wave"] == k["tile_arithmetic"] > 0
    assert r["kernarg_bytes"] == ctypes.sizeof(B.Args)
    shape = hkjit.ops.get("attention").default_shape
    built = hkjit.build(f"attention_bwd_{kernel}", target=arch, **{**shape, **params})
    # one D x 32 accumulator per wave: dQ^T, or dV^T (P wave) / dK^T (dS wave)
    check_mix(static.amd_disassembly(built.code, arch), params["head_dim"])
