"""The sm_90a attention backward, static checks (no GPU needed, NVRTC only): every default and
override configuration of both kernels (D64 / D128, causal or not, varlen, fp16, narrow loads,
stages) compiles with 0 spills and no stack, five products on wgmma (two with A from registers),
dQ added by bulk reductions under acquire/release semaphores, and the register split (setmaxnreg) kept; the plan's shared memory and consumer
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
             [dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=4)]
DKDV_CONFIGS = [dict(head_dim=d, causal=c) for d in (64, 128) for c in (False, True)] + \
               [dict(head_dim=64, causal=True, dkdv_stages=4), dict(head_dim=64, dkdv_stages=3, align=8),
                dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=8),
                dict(head_dim=128, align=4), dict(head_dim=64, causal=True, align=4, dkdv_stages=3)]


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
    if kernel is B.DQ:
        assert "wgmma" not in r.ptx
        return
    assert "setmaxnreg.inc" in r.ptx and "setmaxnreg.dec" in r.ptx
    # wgmma per query block: S^T and dP^T (SS, one per k16 step of head_dim each), dV and dK (RS, one
    # per k16 step of block_q each), dQ = dS K (SS, A transposed: one per k16 step of the 128 keys)
    d, blk = cfg["head_dim"], cfg["block"]
    want = 2 * d // 16 + 2 * blk // 16 + 128 // 16
    wgmma = [line for line in r.ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(wgmma) == want
    assert sum("}, {%r" in line for line in wgmma) == 2 * blk // 16     # A from registers: {%r..}
    assert "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" in r.ptx and "ld.acquire.gpu" in r.ptx
    assert B.DKDV.smem_bytes(cfg) <= SM90.smem_per_block


def test_args_layout():
    assert ctypes.sizeof(BackwardArgs) == 368      # attention_bwd_hopper.cuh static_asserts the same
    assert BackwardArgs.q_sb.offset == 96 and BackwardArgs.batch.offset == 336 and BackwardArgs.scale.offset == 360
    assert ctypes.sizeof(B.WorkspaceArgs) == 384 and B.WorkspaceArgs.workspace.offset == 368


def test_default_table_and_limits():
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=128)
    dq, dkdv = B.DQ.configure(SM90, p, {}), B.DKDV.configure(SM90, p, {})
    assert dq["vec"] == 8 and (dkdv["block"], dkdv["stages"], dkdv["rows"]) == (64, 2, 128)
    assert B.DQ.launch_grid(dq, p) == (8, 8, 2) and B.DKDV.launch_grid(dkdv, p) == (6, 2, 2)
    assert B.DQ.threads(dq) == 256 and B.DKDV.threads(dkdv) == 384 and B.consumer_regs(2) == 224
    assert B.DKDV.dynamic_smem(dkdv) == (1024 + 2 * 2 * 64 * 128 * 2 + 2 * 128 * 128 * 2 + 2 * 128 * 64 * 2
                                         + 2 * 64 * 128 * 4 + 2 * (2 * 64 * 4 + 8) + 8 * 8)
    sems = (2 * 8 * 16 * 4 + 255) // 256 * 256          # 16 query blocks of 64 rows
    assert B.DKDV.workspace(dkdv, p) == (sems + 2 * 8 * 16 * 64 * 128 * 4, sems)
    with pytest.raises(InvalidArgumentError, match="exceeds the 232448 bytes"):
        B.DKDV.configure(SM90, p, dict(dkdv_stages=3))
    with pytest.raises(InvalidArgumentError, match="valid choices: 64"):
        B.DKDV.configure(SM90, {**p, "head_dim": 64}, dict(block_q=128))
    with pytest.raises(InvalidArgumentError, match="valid choices: 2, 3, 4"):
        B.DKDV.configure(SM90, p, dict(dkdv_stages=1))
    with pytest.raises(InvalidArgumentError, match="block_kv is not tunable on sm_90a"):
        B.DQ.configure(SM90, p, dict(block_kv=64))
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
    with pytest.raises(InvalidArgumentError, match="writes dq"):
        B.DKDV.fill(cfg, **kw)
    kw = dict(kw, dq=262144, workspace=1 << 20)
    w = B.DKDV.fill(cfg, **kw)
    assert w.workspace == 1 << 20 and w.q_blocks == 1
    a = w.a
    assert a.dk == 65536 and a.do_sr == 64 and a.lse_sr == 1 and abs(a.scale_log2 - 0.125 * 1.4426950408889634) < 1e-6
    with pytest.raises(InvalidArgumentError, match="do's base pointer"):
        B.DKDV.fill(cfg, **{**kw, "d_o": 8194})
    with pytest.raises(InvalidArgumentError, match="dv's base pointer"):
        B.DKDV.fill(cfg, **{**kw, "dv": 131074})
    with pytest.raises(InvalidArgumentError, match="cu_seqlens"):
        B.DKDV.fill(B.DKDV.configure(SM90, dict(BASE, head_dim=64, varlen=True), {}), **kw)
