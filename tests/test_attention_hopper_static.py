"""The sm_90a attention forward, static checks (no GPU needed, NVRTC only): every default and
override configuration (D64 / D128, causal or not, varlen, fp16, narrow loads) compiles with 0
spills and no stack, wgmma in the PTX and the register split (setmaxnreg) kept; the plan's shared
memory and consumer registers are the kernel's (static_asserted in the generated unit); ctypes Args
has the C++ struct's size; the configuration table and its limits."""

import ctypes
import re

import pytest

import hkjit
from hkjit.errors import InvalidArgumentError
from hkjit.ops import _hopper_attention_fwd as F
from hkjit.targets import parse

from conftest import needs_nvrtc

SM90 = parse("sm_90a")
CONFIGS = [dict(head_dim=d, causal=c) for d in (128, 64) for c in (False, True)] + \
          [dict(head_dim=128, causal=True, varlen=True, dtype="float16"), dict(head_dim=64, align=4),
           dict(head_dim=128, block_kv=128, stages=2), dict(head_dim=64, block_kv=64, causal=True),
           dict(head_dim=128, consumers=1, causal=True), dict(head_dim=64, consumers=1, stages=3),
           dict(head_dim=128, block_kv=128, causal=True), dict(head_dim=64, pingpong=0, causal=True),
           dict(head_dim=128, pingpong=0, block_kv=128, stages=2)]


@needs_nvrtc
@pytest.mark.parametrize("params", CONFIGS, ids=str)
def test_configs_compile_clean(params):
    r = hkjit.inspect("attention", "sm_90a", **params)
    assert r["spills"] == 0 and r["stack_bytes"] == 0, r
    cfg = r["params"]
    # 2 consumers: the launch cap (65536 / 384 registers a thread) that setmaxnreg redistributes
    assert r["registers"] <= 65536 // F.threads(cfg) // 8 * 8 or cfg["consumers"] == 1
    assert F.dynamic_smem(cfg) <= SM90.smem_per_block


@needs_nvrtc
def test_ptx_has_wgmma_and_register_split():
    from pathlib import Path
    from hkjit import compiler, spec as spec_mod
    cfg = F.configure(SM90, dict(head_dim=128, dtype="bfloat16", causal=True, varlen=False, align=16), {"block_kv": 64})
    checks = (("threads", F.threads(cfg)), ("dynamic_smem", F.dynamic_smem(cfg))) + F.checks(cfg)
    spec = spec_mod.Specialization("attention", SM90, F.SOURCE, F.kernel_type(cfg), "hkjit_attention", (), checks)
    comp = compiler.find_compiler(SM90, "nvrtc")
    r = comp.compile(spec_mod.render(spec), Path("attention_unit.cu"), SM90,
                     [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)
    # one wgmma per k16 step of a KV block (block_kv 64): Q K^T 8 steps (D128) and P V 4 steps, each
    # twice (the pipeline's first block before its loop, the last P V after it); P V's A from registers
    assert r.ptx.count("wgmma.mma_async") == 24 and "setmaxnreg.inc" in r.ptx and "setmaxnreg.dec" in r.ptx
    assert r.ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {") == 8 and "bar.arrive" in r.ptx
    assert "C7508" not in r.log          # setmaxnreg not ignored
    assert not re.search(r"C751\d", r.log)   # ptxas did not serialise the wgmma pipeline (C7510-C7519)


def test_args_layout():
    assert ctypes.sizeof(F.Args) == 200   # attention_fwd_hopper.cuh static_asserts the same
    assert F.Args.q_sb.offset == 56 and F.Args.batch.offset == 176 and F.Args.scale_log2.offset == 196


def test_default_table_and_limits():
    p = dict(batch=1, heads=8, kv_heads=1, n_q=8192, n_k=8192, head_dim=128, dtype="bfloat16", causal=False,
             varlen=False, align=16)
    c = F.configure(SM90, p, {})
    assert (c["block_kv"], c["consumers"], c["stages"], c["block_q"], c["vec"]) == (128, 2, 3, 128, 8)
    assert F.threads(c) == 384 and F.launch_grid(c, p) == (64, 8, 1)
    assert c["pingpong"] == 1 and F.dynamic_smem(c) == 1024 + 3 * 65536 + 2 * 16384 + 48
    c64 = F.configure(SM90, {**p, "head_dim": 64, "align": 8}, {})
    assert (c64["block_kv"], c64["stages"], c64["vec"]) == (64, 3, 4)
    assert F.consumer_regs(2) == 216
    with pytest.raises(InvalidArgumentError, match="exceeds"):
        F.configure(SM90, p, dict(block_kv=128, stages=4))
    with pytest.raises(InvalidArgumentError, match="valid choices"):
        F.configure(SM90, p, dict(consumers=3))
    with pytest.raises(InvalidArgumentError, match="valid choices"):
        F.configure(SM90, p, dict(block_kv=96))
    with pytest.raises(InvalidArgumentError, match="valid choices"):
        F.configure(SM90, p, dict(stages=1))     # the pipeline holds one stage while it waits for the next
    with pytest.raises(InvalidArgumentError, match="consumers=2"):
        F.configure(SM90, p, dict(consumers=1, pingpong=1))
    assert F.configure(SM90, p, dict(consumers=1))["pingpong"] == 0
    with pytest.raises(InvalidArgumentError, match="sm_90a only"):
        F.configure(parse("gfx950"), p, {})


def test_fill_checks_alignment():
    cfg = F.configure(SM90, dict(head_dim=64, dtype="bfloat16", causal=False, varlen=False, align=16), {})
    kw = dict(q=1024, k=2048, v=4096, o=8192, lse=0, q_strides=(0, 64, 64), k_strides=(0, 64, 64),
              v_strides=(0, 64, 64), o_strides=(0, 64, 64), lse_strides=(0, 8, 1), cu_seqlens_q=0, cu_seqlens_k=0,
              batch=1, heads=1, kv_heads=1, n_q=8, n_k=8, scale=0.125, workspace=0)
    a = F.fill(cfg, **kw)
    assert a.q == 1024 and a.q_sr == 64 and abs(a.scale_log2 - 0.125 * 1.4426950408889634) < 1e-6
    with pytest.raises(InvalidArgumentError, match="aligned"):
        F.fill(cfg, **{**kw, "k": 2050})
    with pytest.raises(InvalidArgumentError, match="cu_seqlens"):
        F.fill(F.configure(SM90, dict(head_dim=64, dtype="bfloat16", causal=False, varlen=True, align=16), {}), **kw)
