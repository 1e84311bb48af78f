"""The sm_90a attention backward, static checks (no GPU needed, NVRTC only): every default and
override configuration of both kernels (D64 / D128, causal or not, varlen, fp16, narrow loads,
stages) compiles with 0 spills and no stack, five products on wgmma (two with A from registers),
dQ added by bulk reductions under acquire/release semaphores, and the register split (setmaxnreg) kept; the plan's shared memory and consumer
registers are the kernel's (static_asserted in the generated unit); the configuration table and
its limits, refused before anything compiles. The dq_warp variant (dQ hand-off on its own producer
warp, loads on 1-3 others; the default with one query head a KV head): 0 spills across the same grid, the SASS facts that place the
bulk reduction and the stage loads in separate loops, the buffer freed after the bulk read and
released after completion; bad values refused before compiling. The dkdv_producer="tma" variant (Q and
dO by tensor maps from one thread, the dQ hand-off on warp 3, 24 / 240 registers, the structures in
the shared window): 0 spills across its grid, UTMALDG in the load loop, shared-memory accesses as
LDS / STS, its argument block and maps, the inputs it cannot serve refused before compiling. The
dkdv_consumer variants of the TMA kernel (wait placement, early dV, stmatrix dS^T): 0 spills and no
wgmma serialisation across their grid, the consumer loop's order of products, waits and barrier in
the SASS, the default's loop unchanged, refusals."""

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

from hkjit import compiler, spec as spec_mod
from hkjit.errors import InvalidArgumentError
from hkjit.ops import _hopper_attention_bwd as B
from hkjit.ops._attention_args import BackwardArgs
from hkjit.targets import parse

from conftest import needs_nvrtc, needs_sass, sass

SM90 = parse("sm_90a")
BASE = dict(dtype="bfloat16", causal=False, varlen=False, align=16, heads=8, kv_heads=1)   # GQA: dq_warp 0
DQ_CONFIGS = [dict(head_dim=d, causal=c) for d in (64, 128) for c in (False, True)] + \
             [dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=4)]
DKDV_CONFIGS = [dict(head_dim=d, causal=c) for d in (64, 128) for c in (False, True)] + \
               [dict(head_dim=64, causal=True, dkdv_stages=4), dict(head_dim=64, dkdv_stages=3, align=8),
                dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=8),
                dict(head_dim=128, align=4), dict(head_dim=64, causal=True, align=4, dkdv_stages=3)]
# dq_warp=1 (GQA needs no kernel of its own: the group is a runtime loop)
DQ_WARP_CONFIGS = [dict(head_dim=d, causal=c, dq_warp=1) for d in (64, 128) for c in (False, True)] + \
                  [dict(head_dim=64, dq_warp=1, load_warps=1, dkdv_stages=4),
                   dict(head_dim=64, causal=True, dq_warp=1, load_warps=2, dkdv_stages=3, align=4),
                   dict(head_dim=128, causal=True, varlen=True, dtype="float16", align=8, dq_warp=1, load_warps=2),
                   dict(head_dim=128, dq_warp=1, load_warps=1, align=4)]
# dkdv_producer="tma" (dense, 16-byte aligned inputs only)
TMA_CONFIGS = [dict(head_dim=d, causal=c, dkdv_producer="tma") for d in (64, 128) for c in (False, True)] + \
              [dict(head_dim=64, causal=True, dkdv_stages=4, dkdv_producer="tma"),
               dict(head_dim=64, dkdv_stages=3, dtype="float16", dkdv_producer="tma"),
               dict(head_dim=128, causal=True, dtype="float16", dkdv_producer="tma", dq_warp=1, load_warps=1)]
# dkdv_consumer (bits: 1 wait placement, 2 stmatrix dS^T, 4 early dV with 1, 8 dQ by key halves at D64; the TMA
# producer's 240 registers)
CONSUMER_CONFIGS = [dict(head_dim=d, causal=c, dkdv_consumer=v) for d in (64, 128) for c in (False, True)
                    for v in (1, 2, 3, 5, 7)] + \
                   [dict(head_dim=64, causal=True, dkdv_stages=4, dkdv_consumer=7),
                    dict(head_dim=64, dkdv_stages=3, dtype="float16", dkdv_consumer=3),
                    dict(head_dim=128, causal=True, dtype="float16", dkdv_consumer=7)] + \
                   [dict(head_dim=64, causal=c, block_q=64, dkdv_consumer=v) for c in (False, True)
                    for v in (8, 9, 10, 11, 15)] + \
                   [dict(head_dim=64, causal=True, dkdv_stages=4, dtype="float16", dkdv_consumer=10)] + \
                   [dict(head_dim=64, causal=c, block_q=128, dkdv_consumer=v) for c in (False, True) for v in (10, 11)] + \
                   [dict(head_dim=64, block_q=128, dkdv_consumer=8, dtype="float16")]


def _compile(kernel, params):
    tiles = {k: v for k, v in params.items() if k in kernel.TILES}
    cfg = kernel.configure(SM90, {**BASE, **{k: v for k, v in params.items() if k not in tiles}}, tiles)
    checks = (("threads", kernel.threads(cfg)), ("dynamic_smem", kernel.dynamic_smem(cfg))) + kernel.checks(cfg)
    spec = spec_mod.Specialization(kernel.name, SM90, kernel.SOURCE, kernel.kernel_type(cfg), "hkjit_bwd", (), checks)
    comp = compiler.find_compiler(SM90, "nvrtc")
    return cfg, comp.compile(spec_mod.render(spec), Path("attention_bwd_unit.cu"), SM90,
                             [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)


@needs_nvrtc
@pytest.mark.parametrize("kernel,params", [(B.DQ, p) for p in DQ_CONFIGS] +
                         [(B.DKDV, p) for p in DKDV_CONFIGS + DQ_WARP_CONFIGS + TMA_CONFIGS + CONSUMER_CONFIGS],
                         ids=lambda x: getattr(x, "name", str(x)))
def test_configs_compile_clean(kernel, params):
    cfg, r = _compile(kernel, params)
    assert r.meta["spills"] == 0 and r.meta["stack_bytes"] == 0, (r.meta, r.log)
    # setmaxnreg kept; ptxas did not serialise the wgmma pipeline (C7510-C7519: C7511 for want of registers,
    # C7512 an accumulator read while a product writes it)
    assert "C7508" not in r.log and not re.search(r"C751\d", r.log), r.log
    if kernel is B.DQ:
        assert "wgmma" not in r.ptx
        return
    assert "setmaxnreg.inc" in r.ptx and "setmaxnreg.dec" in r.ptx
    # wgmma per query block: S^T and dP^T (SS, one per k16 step of head_dim each), dV and dK (RS, one
    # per k16 step of block_q each), dQ = dS K (SS, A transposed: one per k16 step of the 128 keys; with
    # dkdv_consumer bit 8, of the consumer's own 64)
    d, blk = cfg["head_dim"], cfg["block"]
    want = 2 * d // 16 + 2 * blk // 16 + (64 if cfg["consumer"] & 8 else 128) // 16 * (blk // 64)
    wgmma = [line for line in r.ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(wgmma) == want
    assert sum("}, {%r" in line for line in wgmma) == 2 * blk // 16     # A from registers: {%r..}
    assert "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" in r.ptx and "ld.acquire.gpu" in r.ptx
    assert B.DKDV.smem_bytes(cfg) <= SM90.smem_per_block


def _loops(listing):
    """(lo, hi, [instructions]) of every backward branch in cuobjdump's SASS (loops and wait retries)."""
    ins = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4})\*/\s+(.*?)\s*;", listing)]
    out = []
    for a, t in ins:
        m = re.search(r"\bBRA (?:`\()?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) <= a:
            lo = int(m.group(1), 16)
            out.append((lo, a, [u for b, u in ins if lo <= b <= a]))
    return ins, out


def _innermost(loops, addr):
    return min((x for x in loops if x[0] <= addr <= x[1]), key=lambda x: x[1] - x[0])


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("causal", [False, True])
def test_dq_warp_sass(causal, tmp_path):
    """dq_warp=1: the loop around the stage arrival issues the cp.asyncs (LDGSTS) and no bulk
    operation, the loop around the bulk reduction no cp.async; after the reduction the buffer is
    freed once shared memory is read (DEPBAR, then the mbarrier arrival), and the semaphore released
    after the full wait. Today's kernel has the reduction inside its load loop and frees after."""
    facts = {}
    for dq_warp in (0, 1):
        _, r = _compile(B.DKDV, dict(head_dim=128, causal=causal, dq_warp=dq_warp, dkdv_producer="cpasync"))
        ins, loops = _loops(sass(r.code, tmp_path))
        stage = next(a for a, t in ins if "ARRIVES.LDGSTSBAR" in t)
        red = next(a for a, t in ins if "UBLKRED" in t)
        load_loop, red_loop = _innermost(loops, stage)[2], _innermost(loops, red)[2]
        after = [t.split()[0] if not t.startswith("@") else t.split()[1] for a, t in ins if a > red]
        key = [op for op in after if op.startswith(("DEPBAR", "SYNCS.ARRIVE", "REDG"))][:4]
        facts[dq_warp] = (any("UBLK" in t for t in load_loop), any("LDGSTS" in t for t in red_loop), key)
        assert sum("LDGSTS.E.BYPASS.128" in t for t in load_loop) == 2        # Q's and dO's piece loops
        assert "cp.async.bulk.wait_group.read 0" in r.ptx if dq_warp else "wait_group.read" not in r.ptx
    wait, free, release = "DEPBAR.LE", "SYNCS.ARRIVE.TRANS64.A1T0", "REDG.E.ADD.S32.STRONG.GPU"
    assert facts[0][0] and facts[0][2][:3] == [wait, release, free], facts
    assert not facts[1][0] and not facts[1][1], facts
    # ptxas emits the read wait and the full wait alike (DEPBAR.LE SB0, 0x0); the free precedes the release
    assert facts[1][2][:4] == [wait, free, wait, release], facts


def test_dq_warp_refusals():
    p = dict(BASE, batch=1, heads=2, kv_heads=1, n_q=100, n_k=100, head_dim=64)

    def picked(p, tiles):
        c = B.DKDV.configure(SM90, p, {"dkdv_producer": "cpasync", **tiles})
        return c["dq_warp"], c["load_warps"]
    # the cp.async producer's default by the measured table: the dQ warp with one query head a KV head,
    # not with GQA (the TMA producer, the default where it serves, always runs with it)
    mha = dict(p, heads=1)
    assert picked(p, {}) == (0, 4) and picked(mha, {}) == (1, 3) and picked(mha, dict(dq_warp=0)) == (0, 4)
    assert B.DKDV.configure(SM90, p, dict(dq_warp=1, dkdv_producer="cpasync"))["load_warps"] == 3
    # tiles the TMA producer does not run steer the default to cp.async rather than failing
    assert B.DKDV.configure(SM90, p, dict(dq_warp=0))["producer"] == "cpasync"
    assert B.DKDV.configure(SM90, p, dict(load_warps=3, dq_warp=1))["producer"] == "cpasync"
    for tiles, msg in ((dict(dq_warp=2), "dq_warp=2; valid choices: 0, 1"),
                       (dict(dq_warp=True), "dq_warp=True; valid choices"),
                       (dict(load_warps=2), "load_warps=2 with dq_warp=0 .*valid choices: 4"),
                       (dict(dq_warp=1, load_warps=4), "load_warps=4 with dq_warp=1; valid choices: 1, 2, 3"),
                       (dict(dq_warp=1, load_warps="3"), "load_warps='3'")):
        with pytest.raises(InvalidArgumentError, match=msg):
            B.DKDV.configure(SM90, p, tiles)
    with pytest.raises(InvalidArgumentError, match="unknown tile override"):
        B.DQ.configure(SM90, p, dict(dq_warp=1))


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("d,causal", [(64, True), (128, False)])
def test_tma_sass(d, causal, tmp_path):
    """dkdv_producer="tma": per stage D / 64 tensor-map boxes for Q and as many for dO (UTMALDG) in
    one loop with the stats' 4-byte cp.asyncs and no 16-byte ones; setmaxnreg 24 / 240; the
    structures addressed in the shared window (no generic LD.E / ST.E anywhere; the cp.async
    variant has them for the stats, dS^T and the dQ partial); the consumer loop's wgmma descriptors
    on the uniform datapath (no R2UR moves in it; the cp.async variant has 48 at D128)."""
    _, r = _compile(B.DKDV, dict(head_dim=d, causal=causal, dkdv_producer="tma", block_q=64))
    listing = sass(r.code, tmp_path)
    ins, loops = _loops(listing)
    box = next(a for a, t in ins if "UTMALDG" in t)
    load_loop = _innermost(loops, box)[2]
    assert sum("UTMALDG.4D" in t for t in load_loop) == 2 * d // 64, load_loop
    assert any("LDGSTS.E " in t for t in load_loop) and not any("LDGSTS.E.BYPASS.128" in t for t in listing.split("\n"))
    assert not any("UBLK" in t for t in load_loop)                        # the dQ hand-off is elsewhere (warp 3)
    assert "USETMAXREG.DEALLOC.CTAPOOL 0x18" in listing and "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0" in listing
    generic = re.compile(r"\s(LD|ST)\.E[\s.]")
    assert not any(generic.search(t) for _, t in ins)
    assert sum(" LDS" in t or t.startswith("LDS") for _, t in ins) >= 16 and any("STS" in t for _, t in ins)
    consumer = _innermost(loops, next(a for a, t in ins if t.startswith("HGMMA")))[2]
    # S, dP; dV, dK; dQ (not ptxas's HGMMA.64x8x16 stand-in for an empty commit group, which the
    # wait placement of dkdv_consumer=1/3 has)
    assert sum(t.startswith("HGMMA") and not t.startswith("HGMMA.64x8x16") for t in consumer) == 2 * d // 16 + 16
    assert not any("R2UR" in t for t in consumer)
    _, plain = _compile(B.DKDV, dict(head_dim=d, causal=causal, dkdv_producer="cpasync"))
    assert any(generic.search(t) for _, t in _loops(sass(plain.code, tmp_path))[0])


def _consumer_order(listing):
    """The consumer loop's products, waits, barrier and stmatrix in order, runs of one kind merged:
    "S/dP" (the products before the first wait), "dQ" (the first after the barrier), "dV/dK" (the
    others), "wait<=N", "bar", "stsm"."""
    ins, loops = _loops(listing)
    hs = [a for a, t in ins if t.startswith("HGMMA")]
    lo, hi, body = min((x for x in loops if x[0] <= hs[0] and hs[-1] <= x[1]), key=lambda x: x[1] - x[0])
    out, seen_bar = [], False
    for t in body:
        if t.startswith("HGMMA.64x8x16"):             # ptxas's stand-in for an empty commit group
            continue
        if t.startswith("HGMMA"):
            first = not any(k.startswith("wait") for k in out)
            kind = "S/dP" if first else "dQ" if seen_bar and out[-1] in ("bar", "dQ") else "dV/dK"
        elif t.startswith("WARPGROUP.DEPBAR"):
            kind = "wait<=" + str(int(t.split()[-1], 16))
        elif t.startswith("BAR.SYNC"):
            kind, seen_bar = "bar", True
        elif t.startswith("STSM"):
            kind = "stsm"
        else:
            continue
        if not out or out[-1] != kind or kind.startswith("wait"):
            out.append(kind)
    return out


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("d,causal", [(128, False), (64, True)])
def test_consumer_variants_sass(d, causal, tmp_path):
    """dkdv_consumer on the TMA kernel: 1 waits for S alone before the exponentials (dP in flight),
    keeps dV in flight across the consumers' barrier, retires it after issuing dQ, and issues dK
    before retiring dQ (the partial's stores run beside dK); 5 issues dV before the dP wait; 2 stores
    dS^T with one stmatrix per 16 queries and no scalar stores in its place. The default's order is
    unchanged: three full drains."""
    order = {}
    for v in (0, 1, 2, 5):
        _, r = _compile(B.DKDV, dict(head_dim=d, causal=causal, dkdv_consumer=v))
        listing = sass(r.code, tmp_path)
        order[v] = _consumer_order(listing)
        stsm = [t for t in listing.split("\n") if "STSM" in t]
        assert len(stsm) == (BQ_STEPS if v & 2 else 0), stsm
    drain = ["S/dP", "wait<=0", "dV/dK", "wait<=0", "bar", "dQ", "wait<=0"]
    assert order[0] == drain, order[0]
    assert order[2] == ["S/dP", "wait<=0", "dV/dK", "stsm", "wait<=0", "bar", "dQ", "wait<=0"], order[2]
    assert order[1] == ["S/dP", "wait<=1", "wait<=0", "dV/dK", "bar", "dQ", "wait<=1", "dV/dK", "wait<=1",
                        "wait<=0"], order[1]
    assert order[5] == ["S/dP", "wait<=1", "dV/dK", "wait<=1", "bar", "dQ", "wait<=1", "dV/dK", "wait<=1",
                        "wait<=0"], order[5]


BQ_STEPS = B.BLOCK_Q // 16      # stmatrix .x4 per thread for dS^T: one per k16 step of the query block


def test_consumer_configuration_and_refusals():
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=128)
    c = B.DKDV.configure(SM90, p, dict(dkdv_consumer=3))
    assert (c["producer"], c["consumer"]) == ("tma", 3)                       # TMA where it serves
    assert B.DKDV.kernel_type(c).endswith(", true, 1, true, 3>")
    # defaults, from the H100 timings: stmatrix (2); 0 (named by omission) where the cp.async producer runs
    assert B.DKDV.kernel_type(B.DKDV.configure(SM90, p, {})).endswith(", true, 1, true, 2>")
    assert B.DKDV.kernel_type(B.DKDV.configure(SM90, {**p, "causal": True}, {})).endswith(", true, 1, true, 2>")
    assert B.DKDV.configure(SM90, {**p, "varlen": True}, {})["consumer"] == 0
    assert B.DKDV.kernel_type(B.DKDV.configure(SM90, p, dict(dkdv_consumer=0))).endswith(", true, 1, true>")
    assert B.DKDV.checks(c)[:2] == (("CONSUMER_REGS", 240), ("PRODUCER_REGS", 24))
    for extra, tiles, msg in (({}, dict(dkdv_consumer=4), "dkdv_consumer=4; valid choices: 0, 1, 2, 3, 5, 7, 8"),
                              ({}, dict(dkdv_consumer=12), "dkdv_consumer=12; valid choices"),
                              ({}, dict(dkdv_consumer=16), "dkdv_consumer=16; valid choices"),
                              ({}, dict(dkdv_consumer=10), "dkdv_consumer=10 at head_dim=128; bit 8 .* head_dim 64"),
                              ({}, dict(dkdv_consumer=True), "dkdv_consumer=True; valid choices"),
                              ({}, dict(dkdv_consumer="1"), "dkdv_consumer='1'; valid choices"),
                              ({}, dict(dkdv_consumer=1, dkdv_producer="cpasync"),
                               "dkdv_consumer=1 with dkdv_producer='cpasync'; valid choices: 0 .*240 registers"),
                              ({"varlen": True}, dict(dkdv_consumer=2), "dkdv_consumer=2 with dkdv_producer='cpasync'"),
                              ({"align": 8}, dict(dkdv_consumer=7), "dkdv_consumer=7 with dkdv_producer='cpasync'")):
        with pytest.raises(InvalidArgumentError, match=msg):
            B.DKDV.configure(SM90, {**p, **extra}, tiles)
    with pytest.raises(InvalidArgumentError, match="unknown tile override"):
        B.DQ.configure(SM90, p, dict(dkdv_consumer=1))


def test_wide_query_block_configuration_and_refusals():
    """block_q=128 (head_dim 64, dQ by key halves, the TMA producer): one dS^T tile, 128-row dQ partials,
    accumulators and semaphores a 128-row block; refused elsewhere, naming what it needs."""
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=64)
    c = B.DKDV.configure(SM90, p, dict(block_q=128, dkdv_consumer=10))
    assert B.DKDV.kernel_type(c).startswith("attention_bwd_dkdv_hopper<hk::bf16, 64, 128, 2, 2,")
    narrow = B.DKDV.configure(SM90, p, dict(block_q=64, dkdv_consumer=10))
    # one 128 x 128 dS^T tile instead of two 128 x 64; dQ buffers and stages twice as tall
    assert B.DKDV.smem_bytes(c) - B.DKDV.smem_bytes(narrow) == 2 * 2 * 64 * 64 * 2 + 2 * 64 * 64 * 4 + 2 * 64 * 4 * 2
    assert B.DKDV.smem_bytes(c) <= SM90.smem_per_block
    assert B.DKDV.q_blocks(p, 128) == 8 and B.DKDV.workspace(c, p)[2] == 2 * 8 * 8 * 128 * 64 * 4
    for extra, tiles, msg in (({}, dict(block_q=96), "block_q=96; valid choices: 64, or 128 at head_dim 64"),
                              ({}, dict(block_q=128, dkdv_consumer=2), "block_q=128 needs .*dkdv_consumer 8, 10 "
                                                                         "or 11 .*this is 2"),
                              ({}, dict(block_q=128, dkdv_consumer=9), "dkdv_consumer 8, 10 or 11 .*this is 9"),
                              ({}, dict(block_q=128, dkdv_consumer=15), "dkdv_consumer 8, 10 or 11 .*this is 15"),
                              ({"head_dim": 128}, dict(block_q=128, dkdv_consumer=10), "needs head_dim 64"),
                              ({}, dict(block_q=128, dkdv_consumer=10, dkdv_stages=3), "shared memory"),
                              ({"varlen": True}, dict(block_q=128, dkdv_consumer=10), "dkdv_producer")):
        with pytest.raises(InvalidArgumentError, match=msg):
            B.DKDV.configure(SM90, {**p, **extra}, tiles)


def test_tma_configuration_and_refusals(monkeypatch):
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=128)
    c = B.DKDV.configure(SM90, p, dict(dkdv_producer="tma"))
    assert (c["producer"], c["dq_warp"], c["load_warps"]) == ("tma", 1, 1)
    assert B.DKDV.configure(SM90, p, {})["producer"] == "tma"                # the default where it serves
    for extra in ({"varlen": True}, {"align": 8}):                           # ...cp.async where it cannot
        assert B.DKDV.configure(SM90, {**p, **extra}, {})["producer"] == "cpasync", extra
    cp = B.DKDV.configure(SM90, p, dict(dkdv_producer="cpasync"))
    assert B.DKDV.checks(c) == (("CONSUMER_REGS", 240), ("PRODUCER_REGS", 24), ("LOADERS", 32))
    assert B.DKDV.checks(cp)[:2] == (("CONSUMER_REGS", 224), ("PRODUCER_REGS", 56))
    assert B.DKDV.kernel_type(c).endswith(", true, 1, true, 2>") and B.DKDV.args_type(c) is B.WorkspaceTmaArgs
    assert B.DKDV.dynamic_smem(c) == B.DKDV.dynamic_smem(cp)                 # the same stages
    assert B.DKDV.configure(SM90, p, dict(dkdv_producer="tma", dq_warp=1, load_warps=1))["load_warps"] == 1
    for extra, tiles, msg in (({"varlen": True}, {}, "cu_seqlens.*dkdv_producer='cpasync'"),
                              ({"align": 8}, {}, "aligned to 16 bytes .*dkdv_producer='cpasync'"),
                              ({"align": 4}, {}, "aligned to 16 bytes"),
                              ({}, dict(dq_warp=0), "dq_warp=0 with dkdv_producer='tma'; valid choices: 1"),
                              ({}, dict(load_warps=3), "load_warps=3 with dkdv_producer='tma'; valid choices: 1"),
                              ({}, dict(dkdv_producer="TMA"), "dkdv_producer='TMA'; valid choices: 'cpasync', 'tma'"),
                              ({}, dict(dkdv_producer=1), "dkdv_producer=1; valid choices")):
        with pytest.raises(InvalidArgumentError, match=msg):
            B.DKDV.configure(SM90, {**p, **extra}, dict(dkdv_producer="tma", **tiles) if "dkdv_producer" not in tiles
                             else tiles)
    with pytest.raises(InvalidArgumentError, match="unknown tile override"):
        B.DQ.configure(SM90, p, dict(dkdv_producer="tma"))
    # refused by hkjit.build before any compiler is asked
    import hkjit
    monkeypatch.setattr(compiler, "find_compiler", lambda *a, **k: pytest.fail("a compiler was asked for"))
    for extra in (dict(varlen=True), dict(align=8)):
        with pytest.raises(InvalidArgumentError, match="dkdv_producer='cpasync'"):
            hkjit.build("attention_bwd_dkdv", target="sm_90a", batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700,
                        head_dim=128, dkdv_producer="tma", **extra)


def test_tma_args_and_maps():
    """The Q and dO maps: (D, n_q, heads, batch) over the caller's strides (bnhd here), box (64, 64,
    1, 1); a stand-in stride where an extent is 1; unaligned strides refused, naming the fallback."""
    assert ctypes.sizeof(B.WorkspaceTmaArgs) == 704 and B.WorkspaceTmaArgs.do_map.offset == 128   # static_asserted
    assert B.WorkspaceTmaArgs.a.offset == 256 and B.WorkspaceTmaArgs.semaphores.offset == 256 + 368
    cfg = B.DKDV.configure(SM90, dict(BASE, head_dim=128, dtype="float16"), dict(dkdv_producer="tma"))
    seen = []

    def encode(dtype, ptr, dims, strides, box):
        seen.append((dtype, ptr, dims, strides, box))
        return bytes([len(seen)]) * 128

    bnhd = (300 * 8 * 128, 128, 8 * 128)
    kw = dict(q=1 << 20, k=2 << 20, v=3 << 20, o=0, d_o=4 << 20, lse=5 << 20, delta=6 << 20, dq=7 << 20, dk=8 << 20,
              dv=9 << 20, cu_seqlens_q=0, cu_seqlens_k=0, batch=3, heads=8, kv_heads=2, n_q=300, n_k=250, scale=0.1,
              workspace=1 << 30, scratch=2 << 30, q_strides=bnhd, do_strides=bnhd, dq_strides=bnhd, o_strides=(0, 0, 0),
              **{f"{t}_strides": (250 * 2 * 128, 128, 2 * 128) for t in ("k", "v", "dk", "dv")},
              lse_strides=(8 * 300, 300, 1), delta_strides=(8 * 300, 300, 1))
    g = B.DKDV.fill(cfg, encode=encode, **kw)
    assert isinstance(g, B.WorkspaceTmaArgs) and g.a.d_o == 4 << 20 and g.a.n_q == 300 and g.q_blocks == 5
    assert g.semaphores == 1 << 30 and g.dq_accum == 2 << 30
    assert seen[0] == ("float16", 1 << 20, (128, 300, 8, 3), (2048, 256, 300 * 2048), (64, 64, 1, 1))
    assert seen[1][:2] == ("float16", 4 << 20) and bytes(g.q_map.v)[:1] == b"\x01" and bytes(g.do_map.v)[:1] == b"\x02"
    seen.clear()
    B.DKDV.fill(cfg, encode=encode, **{**kw, "batch": 1, "heads": 1, "kv_heads": 1, "n_q": 1})
    assert seen[0][2:4] == ((128, 1, 1, 1), (256, 256, 256))             # stand-ins: row D, head rows * row
    with pytest.raises(InvalidArgumentError, match="grad_out's base pointer and batch stride .*'cpasync'"):
        B.DKDV.fill(cfg, encode=encode, **{**kw, "do_strides": (300 * 8 * 128 + 4, 128, 8 * 128)})
    with pytest.raises(InvalidArgumentError, match="q's base pointer and head stride"):
        B.DKDV.fill(cfg, encode=encode, **{**kw, "q_strides": (300 * 8 * 128, 132, 8 * 128)})


def test_args_layout():
    assert ctypes.sizeof(BackwardArgs) == 368      # attention_bwd_hopper.cuh static_asserts the same
    assert BackwardArgs.q_sb.offset == 96 and BackwardArgs.batch.offset == 336 and BackwardArgs.scale.offset == 360
    assert ctypes.sizeof(B.WorkspaceArgs) == 392 and B.WorkspaceArgs.semaphores.offset == 368
    assert B.WorkspaceArgs.dq_accum.offset == 376 and B.WorkspaceArgs.q_blocks.offset == 384


def test_head_dim_64_defaults_to_128_query_rows():
    """At head_dim 64 the default is block_q 128 with dQ by key halves and stmatrix (dkdv_consumer 10)
    wherever that kernel runs (measured on H200 1.03-1.23x block_q 64 over 6 shapes); a tile it cannot
    run with (another consumer variant, 3 or 4 stages, the cp.async producer) keeps block_q 64 rather
    than failing; block_q=128 alone picks consumer 10; head_dim 128 stays at 64."""
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=64)
    pick = lambda extra, tiles: (lambda c: (c["block"], c["consumer"], c["producer"]))(  # noqa: E731
        B.DKDV.configure(SM90, {**p, **extra}, tiles))
    assert pick({}, {}) == (128, 10, "tma") == pick({"causal": True}, {}) == pick({}, dict(block_q=128))
    assert pick({}, dict(dkdv_consumer=11)) == (128, 11, "tma")
    assert pick({}, dict(dkdv_consumer=2)) == (64, 2, "tma") == pick({}, dict(block_q=64))
    assert pick({}, dict(dkdv_stages=3)) == (64, 2, "tma") == pick({}, dict(dkdv_stages=4))
    assert pick({"varlen": True}, {}) == (64, 0, "cpasync") == pick({"align": 8}, {})
    assert pick({}, dict(dkdv_producer="cpasync")) == (64, 0, "cpasync")
    assert pick({"head_dim": 128}, {}) == (64, 2, "tma")
    c = B.DKDV.configure(SM90, p, {})
    assert B.DKDV.workspace(c, p)[2] == 2 * 8 * 8 * 128 * 64 * 4       # 8 query blocks of 128 rows
    for odd in (np.array([10, 11]), [10], 10.0, "10"):                  # the default's choice must not trip on them
        with pytest.raises(InvalidArgumentError, match="dkdv_consumer="):
            B.DKDV.configure(SM90, p, dict(dkdv_consumer=odd))


def test_default_table_and_limits():
    p = dict(BASE, batch=2, heads=8, kv_heads=2, n_q=1000, n_k=700, head_dim=128)
    dq, dkdv = B.DQ.configure(SM90, p, {}), B.DKDV.configure(SM90, p, {})
    assert dq["vec"] == 8 and (dkdv["block"], dkdv["stages"], dkdv["rows"]) == (64, 2, 128)
    assert B.DQ.launch_grid(dq, p) == (8, 8, 2) and B.DKDV.launch_grid(dkdv, p) == (6, 2, 2)
    assert B.DQ.threads(dq) == 256 and B.DKDV.threads(dkdv) == 384 and B.consumer_regs(2) == 224
    assert B.DKDV.dynamic_smem(dkdv) == (1024 + 2 * 2 * 64 * 128 * 2 + 2 * 128 * 128 * 2 + 2 * 128 * 64 * 2
                                         + 2 * 64 * 128 * 4 + 2 * (2 * 64 * 4 + 8) + 9 * 8)   # 9 barriers
    sems = (2 * 8 * 16 * 4 + 255) // 256 * 256          # 16 query blocks of 64 rows
    assert B.DKDV.workspace(dkdv, p) == (sems, sems, 2 * 8 * 16 * 64 * 128 * 4)   # semaphores kept; dQ scratch
    assert B.DQ.workspace(dq, p) == (0, 0, 0)
    with pytest.raises(InvalidArgumentError, match="exceeds the 232448 bytes"):
        B.DKDV.configure(SM90, p, dict(dkdv_stages=3))
    with pytest.raises(InvalidArgumentError, match="valid choices: 64, or 128 at head_dim 64"):
        B.DKDV.configure(SM90, {**p, "head_dim": 64}, dict(block_q=256))
    with pytest.raises(InvalidArgumentError, match="block_q=128 needs .*dkdv_consumer 8, 10 or 11"):
        B.DKDV.configure(SM90, {**p, "head_dim": 64}, dict(block_q=128, dkdv_consumer=0))   # (its own test)
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
    cfg = B.DKDV.configure(SM90, dict(BASE, head_dim=64), dict(dkdv_producer="cpasync"))   # no maps to encode
    st = (0, 64, 64)
    kw = dict(q=1024, k=2048, v=4096, o=0, d_o=8192, lse=16384, delta=32768, dq=0, dk=65536, dv=131072,
              cu_seqlens_q=0, cu_seqlens_k=0, batch=1, heads=2, kv_heads=1, n_q=8, n_k=8, scale=0.125, workspace=0,
              **{f"{t}_strides": st for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv")},
              lse_strides=(0, 8, 1), delta_strides=(0, 8, 1))
    with pytest.raises(InvalidArgumentError, match="writes dq"):
        B.DKDV.fill(cfg, **kw)
    kw = dict(kw, dq=262144, workspace=1 << 20)
    with pytest.raises(InvalidArgumentError, match="needs its dQ accumulators"):
        B.DKDV.fill(cfg, **kw)
    with pytest.raises(InvalidArgumentError, match="needs its semaphores"):
        B.DKDV.fill(cfg, **{**kw, "workspace": 0, "scratch": 1 << 21})
    kw = dict(kw, scratch=1 << 22)
    w = B.DKDV.fill(cfg, **kw)
    assert w.semaphores == 1 << 20 and w.dq_accum == 1 << 22 and w.q_blocks == 1
    a = w.a
    assert a.dk == 65536 and a.do_sr == 64 and a.lse_sr == 1 and abs(a.scale_log2 - 0.125 * 1.4426950408889634) < 1e-6
    with pytest.raises(InvalidArgumentError, match="do's base pointer"):
        B.DKDV.fill(cfg, **{**kw, "d_o": 8194})
    with pytest.raises(InvalidArgumentError, match="dv's base pointer"):
        B.DKDV.fill(cfg, **{**kw, "dv": 131074})
    with pytest.raises(InvalidArgumentError, match="cu_seqlens"):
        B.DKDV.fill(B.DKDV.configure(SM90, dict(BASE, head_dim=64, varlen=True), {}), **kw)
