"""The sm_90a attention backward, static checks (no GPU needed, NVRTC only): every default and
override configuration of both kernels (D64 / D128, causal or not, varlen, fp16, narrow loads,
blocks, stages) compiles with 0 spills and no stack, five products on wgmma (three with A from
registers) and the register split (setmaxnreg) kept; the plan's shared memory and consumer
registers are the kernel's (static_asserted in the generated unit); the configuration table and
its limits, refused before anything compiles."""

import ctypes
from pathlib import Path

import pytest

from hkjit import compiler, spec as spec_mod
from hkjit.errors import InvalidArgumentError
from hkjit.ops import _hopper_attention_bwd as B
from hkjit.ops._attention_args import BackwardArgs
from hkjit.targets import parse

from conftest import needs_nvrtc

SM90 = parse("sm_90a")
BASE = dict(dtype="bfloat16", causal=False, varlen=False, align=16)
DQ_CONFIGS = [dict(head_dim=d, causal=c) for d in (64, 128) for c in (False, True)] + \
             [dict(head_dim=64, block_kv=64, causal=True), dict(head_dim=128, block_kv=128, causal=True),
              dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=4),
              dict(head_dim=64, align=8, dq_stages=4)]
DKDV_CONFIGS = [dict(head_dim=d, causal=c) for d in (64, 128) for c in (False, True)] + \
               [dict(head_dim=64, block_q=128), dict(head_dim=128, causal=True, dkdv_stages=4),
                dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=8),
                dict(head_dim=64, causal=True, align=4, dkdv_stages=3)]


def _compile(kernel, params):
    tiles = {k: v for k, v in params.items() if k in kernel.TILES}
    cfg = kernel.configure(SM90, {**BASE, **{k: v for k, v in params.items() if k not in tiles}}, tiles)
    checks = (("threads", kernel.threads(cfg)), ("dynamic_smem", kernel.dynamic_smem(cfg))) + kernel.checks(cfg)
    spec = spec_mod.Specialization(kernel.name, SM90, kernel.SOURCE, kernel.kernel_type(cfg), "hkjit_bwd", (), checks)
    comp = compiler.find_compiler(SM90, "nvrtc")
    return cfg, comp.compile(spec_mod.render(spec), Path("attention_bwd_unit.cu"), SM90,
                             [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)


@needs_nvrtc
@pytest.mark.parametrize("kernel,params", [(B.DQ, p) for p in DQ_CONFIGS] + [(B.DKDV, p) for p in DKDV_CONFIGS],
                         ids=lambda x: getattr(x, "name", str(x)))
def test_configs_compile_clean(kernel, params):
    cfg, r = _compile(kernel, params)
    assert r.meta["spills"] == 0 and r.meta["stack_bytes"] == 0, (r.meta, r.log)
    assert "C7508" not in r.log and "C7512" not in r.log, r.log     # setmaxnreg kept, wgmma not serialized
    assert "setmaxnreg.inc" in r.ptx and "setmaxnreg.dec" in r.ptx
    # wgmma per streamed block: S and dP (SS, one per k16 step of D each), then dQ (dq kernel: one
    # RS per k16 step of block_kv) or dV and dK (dkdv kernel: two RS per k16 step of block_q)
    d, blk = cfg["head_dim"], cfg["block"]
    want = 2 * d // 16 + (blk // 16 if kernel is B.DQ else 2 * blk // 16)
    wgmma = [line for line in r.ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(wgmma) == want
    assert sum("}, {%r" in line for line in wgmma) == want - 2 * d // 16     # A from registers: {%r..}
    assert B.Kernel.smem_bytes(kernel, cfg) <= SM90.smem_per_block


def test_args_layout():
    assert ctypes.sizeof(BackwardArgs) == 368      # attention_bwd_hopper.cuh static_asserts the same
    assert BackwardArgs.q_sb.offset == 96 and BackwardArgs.batch.offset == 336 and BackwardArgs.scale.offset == 360


def test_default_table_and_limits():
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=128)
    dq, dkdv = B.DQ.configure(SM90, p, {}), B.DKDV.configure(SM90, p, {})
    assert (dq["block"], dq["stages"], dq["rows"], dq["vec"]) == (64, 2, 128, 8)
    assert (dkdv["block"], dkdv["stages"], dkdv["rows"]) == (64, 2, 128)
    assert B.DQ.launch_grid(dq, p) == (8, 8, 2) and B.DKDV.launch_grid(dkdv, p) == (6, 2, 2)
    assert B.DQ.threads(dq) == 384 and B.consumer_regs(2) == 224
    assert B.DQ.dynamic_smem(dq) == 1024 + 2 * 2 * 64 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 2 * 64 * 4 + 32
    assert B.DKDV.dynamic_smem(dkdv) == 1024 + 2 * 2 * 64 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 2 * (2 * 64 * 4 + 8) + 32
    assert B.DQ.configure(SM90, {**p, "head_dim": 64}, {})["block"] == 128
    with pytest.raises(InvalidArgumentError, match="exceeds the 232448 bytes"):
        B.DQ.configure(SM90, p, dict(block_kv=128, dq_stages=4))
    with pytest.raises(InvalidArgumentError, match="valid choices: 64, 128"):
        B.DQ.configure(SM90, p, dict(block_kv=96))
    with pytest.raises(InvalidArgumentError, match="valid choices: 2, 3, 4"):
        B.DKDV.configure(SM90, p, dict(dkdv_stages=1))
    with pytest.raises(InvalidArgumentError, match="block_q=128 does not fit"):
        B.DKDV.configure(SM90, p, dict(block_q=128))
    with pytest.raises(InvalidArgumentError, match="block_q=128 does not fit"):
        B.DKDV.configure(SM90, {**p, "head_dim": 64, "causal": True}, dict(block_q=128))
    with pytest.raises(InvalidArgumentError, match="unknown tile override"):
        B.DQ.configure(SM90, p, dict(block_q=64))
    with pytest.raises(InvalidArgumentError, match="sm_90a only"):
        B.DQ.configure(parse("gfx950"), p, {})
    with pytest.raises(InvalidArgumentError, match="4 bytes"):
        B.DKDV.configure(SM90, {**p, "align": 2}, {})


def test_fill_checks_alignment_and_packs():
    cfg = B.DKDV.configure(SM90, dict(BASE, head_dim=64), {})
    st = (0, 64, 64)
    kw = dict(q=1024, k=2048, v=4096, o=0, d_o=8192, lse=16384, delta=32768, dq=0, dk=65536, dv=131072,
              cu_seqlens_q=0, cu_seqlens_k=0, batch=1, heads=2, kv_heads=1, n_q=8, n_k=8, scale=0.125, workspace=0,
              **{f"{t}_strides": st for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv")},
              lse_strides=(0, 8, 1), delta_strides=(0, 8, 1))
    a = B.DKDV.fill(cfg, **kw)
    assert a.dk == 65536 and a.do_sr == 64 and a.lse_sr == 1 and abs(a.scale_log2 - 0.125 * 1.4426950408889634) < 1e-6
    with pytest.raises(InvalidArgumentError, match="do's base pointer"):
        B.DKDV.fill(cfg, **{**kw, "d_o": 8194})
    with pytest.raises(InvalidArgumentError, match="dv's base pointer"):
        B.DKDV.fill(cfg, **{**kw, "dv": 131074})
    with pytest.raises(InvalidArgumentError, match="cu_seqlens"):
        B.DKDV.fill(B.DKDV.configure(SM90, dict(BASE, head_dim=64, varlen=True), {}), **kw)
