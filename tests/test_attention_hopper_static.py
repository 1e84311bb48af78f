"""The sm_90a attention forward, static checks (no GPU needed, NVRTC only): every default and
override configuration (D64 / D128, causal or not, varlen, fp16, narrow loads) compiles with 0
spills and no stack, wgmma in the PTX and the register split (setmaxnreg) kept; the plan's shared
memory and consumer registers are the kernel's (static_asserted in the generated unit); ctypes Args
has the C++ struct's size; the configuration table and its limits.

The variants (`overlap`, `producer="lsu"` / `"tma"`; the default producer is `"cpasync"`) are in
the same grid, plus their PTX facts (TMA copies from one thread; cp.async from 128 threads
with one mbarrier arrive.noinc each and no ld.global; setmaxnreg 24 / 240 or 40 / 232) and, where nvdisasm is
installed, their SASS facts (UTMALDG or LDGSTS per KV block in the producer, the register split, and
for overlap the softmax between the two wgmma waits); refused combinations raise before anything
compiles."""

import ctypes
import re
import shutil
import subprocess

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
# The prepared variants: next session's measurement grid at D128 ({overlap} x {producer} x stages 3/4 x
# block_kv 64/128; 4 stages of 128 keys exceed shared memory), causal on every other one, then D64,
# one consumer, no ping-pong and fp16 with TMA.
VARIANTS = [dict(head_dim=128, overlap=ov, producer=pr, stages=st, block_kv=kv, causal=(i % 2 == 1))
            for i, (ov, pr, st, kv) in enumerate((ov, pr, st, kv) for ov in (0, 1) for pr in ("lsu", "tma")
                                                 for st, kv in ((3, 64), (4, 64), (3, 128)))] + \
           [dict(head_dim=64, producer="tma", causal=True), dict(head_dim=64, overlap=1, stages=4),
            dict(head_dim=64, producer="tma", overlap=1, block_kv=128, dtype="float16"),
            dict(head_dim=128, producer="tma", consumers=1, causal=True),
            dict(head_dim=128, producer="tma", overlap=1, pingpong=0, block_kv=64),
            dict(head_dim=128, producer="tma", stages=2)] + \
           [dict(head_dim=128, overlap=ov, producer="cpasync", stages=st, block_kv=kv, causal=(i % 2 == 1))
            for i, (ov, st, kv) in enumerate((ov, st, kv) for ov in (0, 1)
                                             for st, kv in ((3, 64), (4, 64), (3, 128)))
            if (ov, st, kv) != (0, 3, 128)] + \
           [dict(head_dim=64, producer="cpasync", causal=True, varlen=True),
            dict(head_dim=64, producer="cpasync", overlap=1, stages=4), dict(head_dim=64, producer="cpasync", align=4),
            dict(head_dim=128, producer="cpasync", causal=True, align=8),
            dict(head_dim=128, producer="cpasync", causal=True, varlen=True, dtype="float16", align=4),
            dict(head_dim=128, producer="cpasync", consumers=1, causal=True),
            dict(head_dim=128, producer="cpasync", overlap=1, pingpong=0, block_kv=64),
            dict(head_dim=64, producer="cpasync", block_kv=128, dtype="float16")] + \
           [dict(head_dim=128, lean=1), dict(head_dim=64, lean=1, causal=True),
            dict(head_dim=128, lean=1, causal=True, varlen=True, dtype="float16"),
            dict(head_dim=64, lean=1, align=4), dict(head_dim=128, lean=1, block_kv=64, stages=4, causal=True),
            dict(head_dim=128, lean=1, consumers=1), dict(head_dim=64, lean=1, overlap=1, pingpong=0),
            dict(head_dim=128, lean=1, producer="lsu", block_kv=64), dict(head_dim=128, lean=2, causal=True),
            dict(head_dim=64, lean=2), dict(head_dim=128, lean=2, producer="cpasync", varlen=True),
            dict(head_dim=64, lean=2, block_kv=64, stages=4, align=8)] + \
           [dict(head_dim=64, exp_fma=2), dict(head_dim=64, exp_fma=4, lean=2, causal=True),
            dict(head_dim=128, exp_fma=2, dtype="float16", causal=True), dict(head_dim=64, exp_fma=8, block_kv=64, stages=4),
            dict(head_dim=64, exp_fma=3, producer="cpasync", varlen=True, dtype="float16"),
            dict(head_dim=64, exp_fma=1, lean=1, align=4), dict(head_dim=128, exp_fma=6, lean=2, consumers=1)] + \
           [dict(head_dim=128, prologue=1), dict(head_dim=128, epilogue=1, causal=True),
            dict(head_dim=64, prologue=1, epilogue=1, lean=2, exp_fma=2),
            dict(head_dim=128, prologue=1, epilogue=1, varlen=True, dtype="float16", causal=True),
            dict(head_dim=64, prologue=1, epilogue=1, align=4), dict(head_dim=128, prologue=1, consumers=1, align=8),
            dict(head_dim=64, epilogue=1, producer="lsu", block_kv=64)] + \
           [dict(head_dim=d, causal=c, persistent=1) for d in (64, 128) for c in (False, True)] + \
           [dict(head_dim=128, persistent=1, producer="cpasync", dtype="float16"),
            dict(head_dim=64, persistent=1, producer="lsu", lean=2, causal=True),
            dict(head_dim=128, persistent=1, lean=1, overlap=1), dict(head_dim=64, persistent=1, consumers=1),
            dict(head_dim=128, persistent=1, pingpong=0, block_kv=64, stages=4, align=8)]


@needs_nvrtc
@pytest.mark.parametrize("params", CONFIGS + VARIANTS, ids=str)
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


def _compile(params):
    """(config, NVRTC result) of the forward for `params` (head_dim, causal, varlen, align, tiles...)."""
    from pathlib import Path
    from hkjit import compiler, spec as spec_mod
    params = dict(params)
    p = dict(head_dim=params.pop("head_dim"), dtype=params.pop("dtype", "bfloat16"),
             causal=params.pop("causal", False), varlen=params.pop("varlen", False), align=params.pop("align", 16))
    cfg = F.configure(SM90, p, params)
    checks = (("threads", F.threads(cfg)), ("dynamic_smem", F.dynamic_smem(cfg))) + F.checks(cfg)
    spec = spec_mod.Specialization("attention", SM90, F.SOURCE, F.kernel_type(cfg), "hkjit_attention", (), checks)
    comp = compiler.find_compiler(SM90, "nvrtc")
    return cfg, comp.compile(spec_mod.render(spec), Path("attention_unit.cu"), SM90,
                             [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)


@needs_nvrtc
@pytest.mark.parametrize("params", [dict(head_dim=128, producer="tma", causal=True),
                                    dict(head_dim=64, producer="tma", overlap=1, stages=4),
                                    dict(head_dim=128, producer="lsu", overlap=1, block_kv=64, stages=4),
                                    dict(head_dim=128, producer="cpasync", causal=True),
                                    dict(head_dim=64, producer="cpasync", overlap=1, stages=4, varlen=True),
                                    dict(head_dim=128, producer="cpasync", block_kv=64, align=8),
                                    dict(head_dim=64, producer="cpasync", causal=True, align=4)], ids=str)
def test_variant_ptx(params):
    cfg, r = _compile(params)
    tma, cpa = cfg["producer"] == "tma", cfg["producer"] == "cpasync"
    copies = r.ptx.count("cp.async.bulk.tensor.4d")
    # one copy per 64-column swizzle chunk of K and of V, issued in a loop that is not unrolled
    assert copies == (2 * cfg["head_dim"] // 64 if tma else 0)
    assert ("mbarrier.arrive.expect_tx" in r.ptx) == tma
    lean = tma or cpa
    keep, give = F.producer_regs(cfg["producer"], cfg["vec"]), F.consumer_regs(2, cfg["producer"], cfg["vec"])
    assert f"setmaxnreg.dec.sync.aligned.u32 {keep};" in r.ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {give};" in r.ptx
    # cp.async: the producer (between its setmaxnreg.dec and the consumers' .inc) issues each
    # piece of K and V as a cp.async of the load width (16 B: .cg; 8 or 4 B: .ca), with src-size
    # (zero fill past n_k) from a register: per tile one unrolled run for whole blocks and one rolled
    # copy for a sequence's last; then one arrive.noinc a thread. No ld.global: nothing passes
    # through registers. Without it, neither appears anywhere.
    producer = r.ptx[r.ptx.index("setmaxnreg.dec"):r.ptx.index("setmaxnreg.inc")]
    width = cfg["vec"] * 2
    per_tile = cfg["block_kv"] * cfg["head_dim"] * 2 // width // 128
    form = "cp.async.cg.shared.global [%r{}], [%rd{}], 16, %r{};" if width == 16 else \
        "cp.async.ca.shared.global [%r{}], [%rd{}], " + str(width) + ", %r{};"
    pattern = re.escape(form).replace(r"\{\}", r"\d+")
    assert len(re.findall(pattern, producer)) == (2 * (per_tile + 1) if cpa else 0), producer
    assert producer.count("cp.async.mbarrier.arrive.noinc.shared::cta.b64") == (1 if cpa else 0)
    assert ("cp.async.mbarrier.arrive" in r.ptx) == cpa
    assert ("ld.global" in producer) == (not lean)
    # the consumers fence right after each stage wait (the first block's, the loop's): cp.async wrote
    # through the generic proxy, wgmma reads through the async one
    consumers = r.ptx[r.ptx.index("setmaxnreg.inc"):]
    fenced = re.findall(r"@!done bra WAIT_\d+;\s*\}\s*// end inline asm\s*// begin inline asm\s*"
                        r"fence\.proxy\.async", consumers)
    assert len(fenced) == (2 if cpa else 0), consumers
    assert "C7508" not in r.log and not re.search(r"C751\d", r.log), r.log
    assert re.search(r"0 bytes spill stores", r.log), r.log


def _sass(code: bytes, tmp_path) -> list:
    """[(opcode, operands)] of the cubin's SASS, with labels as ('LABEL', name); a guard predicate
    leads the operands ('@!P0 (.L_x_3)')."""
    path = tmp_path / "k.cubin"
    path.write_bytes(code)
    text = subprocess.run(["nvdisasm", "-c", str(path)], capture_output=True, text=True, check=True).stdout
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\.L_x_\d+):", line.strip())
        if m:
            out.append(("LABEL", m.group(1)))
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*);", line)
        if m:
            out.append((m.group(2), ((m.group(1) or "") + m.group(3).strip()).strip()))
    return out


def _main_loop(insts) -> list:
    """The shortest loop body (label .. backward branch to it) holding wgmma: the consumer's KV loop."""
    where = {arg: i for i, (op, arg) in enumerate(insts) if op == "LABEL"}
    best = None
    for i, (op, arg) in enumerate(insts):
        m = re.search(r"\((\.L_x_\d+)\)", arg) if op.startswith("BRA") else None
        if m and where.get(m.group(1), i + 1) <= i:
            body = insts[where[m.group(1)]:i + 1]
            if sum(o.startswith("HGMMA") for o, _ in body) >= 2 and (best is None or len(body) < len(best)):
                best = body
    return best


def _loop_path(code) -> list:
    """The producer's KV loop as one whole block runs it (every key below n_k): from the loop's label
    to its back edge, conditional branches not taken (the last-block path, the barrier's retry),
    unconditional ones followed. `code`: the SASS from the producer's setmaxnreg on."""
    code = code[:next(i for i, (op, arg) in enumerate(code) if op == "EXIT" and not arg.startswith("@"))]
    where = {arg: i for i, (op, arg) in enumerate(code) if op == "LABEL"}
    target = lambda arg: where.get(re.search(r"\((\.L_x_\d+)\)", arg).group(1), len(code))
    back = max(i for i, (op, arg) in enumerate(code) if op == "BRA" and target(arg) < i)
    path, i = [], target(code[back][1]) + 1
    while i < back:
        op, arg = code[i]
        path += [] if op == "LABEL" else [code[i]]
        i = target(arg) + 1 if op == "BRA" and not arg.startswith("@") else i + 1
    return path + [code[back]]


@needs_nvrtc
@pytest.mark.skipif(shutil.which("nvdisasm") is None,
                    reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("params", [dict(head_dim=128, producer="tma", overlap=1, causal=True),
                                    dict(head_dim=128, producer="tma", block_kv=64, stages=4),
                                    dict(head_dim=64, producer="lsu", overlap=1, stages=4, causal=True),
                                    dict(head_dim=128, producer="cpasync", overlap=1, causal=True),
                                    dict(head_dim=128, producer="cpasync", block_kv=64, stages=4),
                                    dict(head_dim=64, producer="cpasync", varlen=True, causal=True),
                                    dict(head_dim=128, producer="cpasync", align=8)], ids=str)
def test_variant_sass(params, tmp_path):
    cfg, r = _compile(params)
    insts = _sass(r.code, tmp_path)
    ops = [op for op, _ in insts]
    tma, cpa = cfg["producer"] == "tma", cfg["producer"] == "cpasync"
    lean = tma or cpa
    # The register split: consumers take 240 (TMA), 232 (cp.async of 16-byte rows) or 216, the producer
    # keeps 24, 40 or 72, and the producer's code after its setmaxnreg stays under that (no register
    # above it is named).
    keep, give = F.producer_regs(cfg["producer"], cfg["vec"]), F.consumer_regs(2, cfg["producer"], cfg["vec"])
    dealloc = next(i for i, (op, _) in enumerate(insts) if op.startswith("USETMAXREG.DEALLOC"))
    assert insts[dealloc][1] == hex(keep)
    assert any(op.startswith("USETMAXREG.TRY_ALLOC") and arg.endswith(hex(give)) for op, arg in insts)
    producer = insts[dealloc:]
    used = [int(x) for _, arg in producer for x in re.findall(r"\bR(\d+)\b", arg)]
    assert max(used) < keep
    # TMA: the copies are in the producer alone, 2 x D / 64 per KV block (the loop is not unrolled)
    assert ops.count("UTMALDG.4D") == (2 * cfg["head_dim"] // 64 if tma else 0)
    assert sum(op == "UTMALDG.4D" for op, _ in producer) == ops.count("UTMALDG.4D")
    assert (not lean) or not any(op.startswith("LDG.") for op, _ in producer)
    # cp.async: LDGSTS (.BYPASS.128 for 16 bytes, .64 for 8) in the producer alone; a whole KV block
    # runs its K and V pieces unrolled (3 instructions a piece: the copy and a 64-bit address step),
    # one ARRIVES.LDGSTSBAR (arrive.noinc) and the loop's own few dozen; the lsu producer runs 767.
    ldgsts = {16: "LDGSTS.E.BYPASS.128", 8: "LDGSTS.E.64", 4: "LDGSTS.E"}[cfg["vec"] * 2]
    pieces = 2 * cfg["block_kv"] * cfg["head_dim"] // cfg["vec"] // 128
    assert sum(op.startswith("LDGSTS") for op, _ in producer) == sum(op.startswith("LDGSTS") for op in ops)
    assert sum(op == ldgsts for op, _ in producer) == (pieces + 2 if cpa else 0)
    if cpa:
        path = [op for op, _ in _loop_path(producer)]
        assert path.count(ldgsts) == pieces and path.count("ARRIVES.LDGSTSBAR.64.ARVCNT") == 1, path
        assert len(path) <= 3 * pieces + 80, (len(path), path)
    if cfg["overlap"]:
        # The consumer's loop: the stage wait, then the retiring wait (gsb0 0) before this block's
        # products, and every max and exponential between the wait for S (gsb0 1) and the back edge:
        # the softmax runs under O += P V.
        loop = _main_loop(insts)
        lops = [op for op, _ in loop]
        waits = [i for i, (op, _) in enumerate(loop) if op.startswith("WARPGROUP.DEPBAR")]
        first_mma = lops.index(next(o for o in lops if o.startswith("HGMMA")))
        retire = [i for i in waits if loop[i][1].endswith("0x0")]
        s_wait = [i for i in waits if loop[i][1].endswith("0x1")]
        assert len(retire) == 1 and len(s_wait) == 1 and retire[0] < first_mma < s_wait[0], loop
        trywait = next(i for i, o in enumerate(lops) if o.startswith("SYNCS.PHASECHK"))
        assert trywait < retire[0]
        ex2 = [i for i, o in enumerate(lops) if o == "MUFU.EX2"]
        assert len(ex2) >= 32 and min(ex2) > s_wait[0]


def _loop_counts(params, tmp_path):
    """The consumer loop's SASS of `params`: (instructions, R2UR, uniform datapath, FMUL) and the loop."""
    loop = _main_loop(_sass(_compile(params)[1].code, tmp_path))
    ops = [op for op, _ in loop if op != "LABEL"]
    return (len(ops), sum(o.startswith("R2UR") for o in ops),
            sum(o.startswith(("U", "R2UR", "S2UR", "VOTEU")) for o in ops), ops.count("FMUL")), loop


@needs_nvrtc
@pytest.mark.skipif(shutil.which("nvdisasm") is None,
                    reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("lean", [1, 2])
@pytest.mark.parametrize("params", [dict(head_dim=128), dict(head_dim=64, causal=True),
                                    dict(head_dim=128, causal=True, producer="cpasync")], ids=str)
def test_lean_loop_sass(params, lean, tmp_path):
    """The consumer loop (docs/notes/attention_hopper_fwd_sass.md): the default's wgmma descriptors sit
    in uniform registers (a warp-uniform warpgroup index: no R2UR); lean walks them (fewer uniform
    instructions), issues no FMUL between its two products (O's rescale moved out of the ping-pong
    turn) and rescales in a block behind a vote's branch; fewer instructions all told. The wait that
    retires P V: ahead of every exponential in the default and lean=1, after all of them with 2, whose
    branch then holds the wait and so takes the warpgroup's vote (bar.red.or)."""
    (n, r2ur, uni, fmul), _ = _loop_counts(params, tmp_path)
    (ln, lr2ur, luni, lfmul), loop = _loop_counts({**params, "lean": lean}, tmp_path)
    assert r2ur == 0 and lr2ur == 0
    assert luni < uni - 16, (uni, luni)
    assert fmul == lfmul >= params["head_dim"] // 2        # the same rescale, moved (+2 FMUL: the max's scale)
    assert ln - lfmul < n - fmul - 16, (n, ln)
    ops = [op for op, _ in loop]
    mmas = [i for i, op in enumerate(ops) if op.startswith("HGMMA")]
    assert "FMUL" not in ops[mmas[0]:mmas[-1]], ops[mmas[0]:mmas[-1]]
    vote = ops.index("VOTE.ANY")
    skip = next(i for i in range(vote, len(ops)) if ops[i] == "BRA")
    assert ops[skip:].count("FMUL") >= params["head_dim"] // 2      # the rescale, after the vote's branch
    ex2 = [i for i, op in enumerate(ops) if op == "MUFU.EX2"]
    retire = [i for i, (op, arg) in enumerate(loop) if op == "WARPGROUP.DEPBAR.LE" and arg.endswith("0x0")]
    assert len(ex2) == 66 and retire
    assert (min(retire) > max(ex2)) if lean == 2 else (min(retire) < min(ex2)), (retire, ex2)
    # lean=2's branch holds the wait, so its condition is the warpgroup's (bar.red.or), not a warp's
    assert any(op.startswith("BAR.RED.OR") for op in ops) == (lean == 2)


@needs_nvrtc
@pytest.mark.skipif(shutil.which("nvdisasm") is None,
                    reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("params,n", [(dict(head_dim=64), 2), (dict(head_dim=64, causal=True, lean=2, dtype="float16"), 4)],
                         ids=str)
def test_exp_fma_loop_sass(params, n, tmp_path):
    """exp_fma=n (docs/notes/attention_hopper_fwd_exp.md): of a thread's 64 scores a KV block, 4n leave
    MUFU.EX2 for the polynomial (each a clamp at -127, the round-to-integer adds, DEGREE FFMA of Horner
    and one LEA into the exponent field: 3 for bf16, 4 for fp16); the rest of the loop is unchanged."""
    (_, _, _, fmul), base = _loop_counts(params, tmp_path)
    (_, _, _, efmul), loop = _loop_counts({**params, "exp_fma": n}, tmp_path)
    count = lambda lp, pred: sum(1 for op, arg in lp if pred(op, arg))
    moved, degree = 4 * n, 4 if params.get("dtype") == "float16" else 3
    assert count(base, lambda o, a: o == "MUFU.EX2") == 66 and count(loop, lambda o, a: o == "MUFU.EX2") == 66 - moved
    assert count(loop, lambda o, a: o == "FMNMX" and "-127" in a) == moved
    assert count(loop, lambda o, a: o == "FADD" and "12582912" in a) == 2 * moved
    assert count(loop, lambda o, a: o == "FFMA") - count(base, lambda o, a: o == "FFMA") == degree * moved
    assert efmul == fmul


@needs_nvrtc
@pytest.mark.skipif(shutil.which("nvdisasm") is None,
                    reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("params", [dict(head_dim=128), dict(head_dim=64, causal=True, dtype="float16")], ids=str)
def test_prologue_epilogue_sass(params, tmp_path):
    """A block's fixed costs (docs/notes/attention_hopper_fwd_exp.md). prologue=1: Q's 16-byte cp.async
    copies all issued before the block barrier (bar 0), no plain Q loads or generic stores; epilogue=1:
    the same O and LSE stores from at most half the instructions after the last HGMMA, and a
    branch-free store run (no BSSY a store). Both leave the KV loop as it was."""
    def parts(p):
        ops = [op for op, _ in _sass(_compile(p)[1].code, tmp_path) if op != "LABEL"]
        mma = [i for i, op in enumerate(ops) if op.startswith("HGMMA")]
        end = next(i for i in range(mma[-1], len(ops)) if ops[i] == "EXIT")
        return ops[:mma[0]], ops[mma[-1] + 1:end + 1], ops[mma[0]:mma[-1] + 1]
    pro, epi, body = parts(params)
    ppro, _, pbody = parts({**params, "prologue": 1})
    _, oepi, obody = parts({**params, "epilogue": 1})
    barrier = ppro.index("BAR.SYNC.DEFER_BLOCKING")
    pieces = 64 * params["head_dim"] // 8 // 128
    # the whole tile unrolled, plus the rolled loop of a tile that runs past the sequence
    assert ppro[:barrier].count("LDGSTS.E.BYPASS.128") == pieces + 1 and "LDG.E.128" not in ppro, ppro
    assert pro.count("LDG.E.128") >= 1 and not any(op.startswith("LDGSTS") for op in pro)
    stg = lambda part: sum(op.startswith("STG") for op in part)
    assert stg(oepi) == stg(epi) and 2 * len(oepi) < len(epi), (len(epi), len(oepi))
    assert oepi.count("BSSY") < epi.count("BSSY") - stg(epi) // 2
    # the products' stretch (first block, loop, last P V) much as it was: register allocation moves a
    # little; prologue=1 adds 6 uniform instructions a KV block at D128 (ptxas rematerialises the shared
    # window's 1 KiB-aligned base in the loop; the same with the copies issued inside consume)
    assert abs(len(obody) - len(body)) <= 8 and 0 <= len(pbody) - len(body) <= 32, (len(body), len(pbody), len(obody))


def test_args_layout():
    assert ctypes.sizeof(F.Args) == 200   # attention_fwd_hopper.cuh static_asserts the same
    assert F.Args.q_sb.offset == 56 and F.Args.batch.offset == 176 and F.Args.scale_log2.offset == 196
    # TMA: the two 128-byte tensor maps first, then the same fields, padded to the maps' 64 bytes
    assert ctypes.sizeof(F.TmaArgs) == 512 and F.TmaArgs.v_map.offset == 128 and F.TmaArgs.q.offset == 256
    assert F.TmaArgs.batch.offset == 256 + 176 and F.TmaArgs.scale_log2.offset == 256 + 196
    p = dict(head_dim=64, dtype="bfloat16", causal=False, varlen=False, align=16)
    assert F.args_type(F.configure(SM90, p, {})) is F.TmaArgs                      # the default producer
    assert F.args_type(F.configure(SM90, p, {"producer": "cpasync"})) is F.Args


def test_default_producer_falls_back_where_tma_cannot_serve():
    """TMA by default; cp.async for varlen batches and for inputs aligned to less than 16 bytes, where
    an explicit producer='tma' is refused naming the fix."""
    p = dict(head_dim=128, dtype="bfloat16", causal=False, varlen=False, align=16)
    assert F.configure(SM90, p, {})["producer"] == "tma"
    for other in (dict(varlen=True), dict(align=8), dict(align=4)):
        assert F.configure(SM90, {**p, **other}, {})["producer"] == "cpasync", other
        with pytest.raises(InvalidArgumentError, match="producer='cpasync'"):
            F.configure(SM90, {**p, **other}, {"producer": "tma"})


def test_default_table_and_limits():
    p = dict(batch=1, heads=8, kv_heads=1, n_q=8192, n_k=8192, head_dim=128, dtype="bfloat16", causal=False,
             varlen=False, align=16)
    c = F.configure(SM90, p, {})
    assert (c["block_kv"], c["consumers"], c["stages"], c["block_q"], c["vec"]) == (128, 2, 3, 128, 8)
    assert F.threads(c) == 384 and F.launch_grid(c, p) == (64, 8, 1)
    assert c["pingpong"] == 1 and F.dynamic_smem(c) == 1024 + 3 * 65536 + 2 * 16384 + 48
    c64 = F.configure(SM90, {**p, "head_dim": 64, "align": 8}, {})
    assert (c64["block_kv"], c64["stages"], c64["vec"]) == (128, 3, 4)
    assert F.consumer_regs(2, "lsu") == 216
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
    # the variants: values checked, the combinations they cannot run refused
    assert (c["overlap"], c["producer"], c["lean"]) == (0, "tma", 0) and F.PRODUCER_REGS["lsu"] == 72
    assert F.consumer_regs(2, "tma") == 240 and F.consumer_regs(1, "tma") == 240
    t = F.configure(SM90, p, dict(producer="tma", overlap=1))
    assert F.checks(t) == (("CONSUMER_REGS", 240), ("PRODUCER_REGS", 24))
    # KNOBS 196: exp_fma=1 (bits 2-5), prologue (bit 6), epilogue (bit 7), the defaults since the H100 timings
    assert F.kernel_type(t).endswith(", true, hkjit_attn_hopper::kv_producer::tma, 196>")
    assert F.kernel_type(c).endswith(", false, hkjit_attn_hopper::kv_producer::tma, 196>")
    off = dict(exp_fma=0, prologue=0, epilogue=0)               # the kernel before them, its type unchanged
    assert F.kernel_type(F.configure(SM90, p, off)).endswith(", false, hkjit_attn_hopper::kv_producer::tma>")
    assert F.checks(c) == (("CONSUMER_REGS", 240), ("PRODUCER_REGS", 24))
    assert F.kernel_type(F.configure(SM90, p, dict(off, lean=2))).endswith("::tma, 2>")
    # exp_fma: off by default; packed with lean into the one KNOBS argument (lean=1/2 keep their types)
    assert (c["exp_fma"], c["prologue"], c["epilogue"]) == (1, 1, 1)
    assert F.kernel_type(F.configure(SM90, p, dict(off, exp_fma=2))).endswith("::tma, 8>")
    assert F.kernel_type(F.configure(SM90, p, dict(off, lean=2, exp_fma=8))).endswith("::tma, 34>")
    assert F.kernel_type(F.configure(SM90, p, dict(off, prologue=1, epilogue=1))).endswith("::tma, 192>")
    cp = F.configure(SM90, p, dict(producer="cpasync"))
    assert F.checks(cp) == (("CONSUMER_REGS", 232), ("PRODUCER_REGS", 40))
    assert F.dynamic_smem(t) == F.dynamic_smem(c) == F.dynamic_smem(cp)    # TMA fills the same swizzled stages
    # cp.async: the lean split, the plain loads' argument block and shared memory; whatever "lsu"
    # serves (varlen, 4- and 8-byte rows) it serves, with the same load width
    for extra in ({}, {"varlen": True}, {"align": 4}, {"align": 8, "causal": True}):
        a = F.configure(SM90, {**p, **extra}, dict(producer="cpasync"))
        plain = F.configure(SM90, {**p, **extra}, dict(producer="lsu"))
        lean = (("CONSUMER_REGS", 232), ("PRODUCER_REGS", 40))   # 8- and 4-byte rows: the plain loads' split
        assert F.checks(a) == (lean if a["vec"] == 8 else F.checks(plain)) and a["vec"] == plain["vec"]
        assert F.kernel_type(a).endswith(", false, hkjit_attn_hopper::kv_producer::cpasync, 196>")
        assert F.args_type(a) is F.Args and F.dynamic_smem(a) == F.dynamic_smem(plain)
    with pytest.raises(InvalidArgumentError, match="stages >= 3"):
        F.configure(SM90, p, dict(overlap=1, stages=2))
    for bad in (dict(overlap=2), dict(overlap=True), dict(producer="cp.async"), dict(producer=1), dict(lean=3),
                dict(lean=True), dict(exp_fma=5), dict(exp_fma=16), dict(exp_fma=True), dict(exp_fma="2"),
                dict(prologue=2), dict(epilogue=True)):
        with pytest.raises(InvalidArgumentError, match="valid choices"):
            F.configure(SM90, p, bad)
    with pytest.raises(InvalidArgumentError, match="varlen"):
        F.configure(SM90, {**p, "varlen": True}, dict(producer="tma"))
    for align in (4, 8):
        with pytest.raises(InvalidArgumentError, match="16 bytes"):
            F.configure(SM90, {**p, "align": align}, dict(producer="tma"))
    assert F.configure(SM90, {**p, "align": 8}, dict(overlap=1))["vec"] == 4


def test_persistent_grid_and_refusals():
    """persistent=1: one block an SM (the device's count when the call has one, else the target's), never
    more than the (query block, head, batch) tiles; the kernel type gains KNOBS bit 8 and nothing else;
    varlen and prologue=0 refused naming the fix."""
    p = dict(batch=2, heads=8, kv_heads=2, n_q=1000, n_k=1200, head_dim=128, dtype="bfloat16", causal=False,
             varlen=False, align=16)
    base, pers = F.configure(SM90, p, {}), F.configure(SM90, p, dict(persistent=1))
    assert F.launch_grid(base, p) == (8, 8, 2)
    assert F.launch_grid(pers, p) == (128, 1, 1)                                   # 128 tiles < 132 SMs
    assert F.launch_grid(pers, {**p, "n_q": 8192}) == (132, 1, 1)
    assert F.launch_grid(pers, {**p, "n_q": 8192, "num_sms": 114}) == (114, 1, 1)  # e.g. an H100 PCIe
    assert F.knobs(pers) == F.knobs(base) | 256
    assert F.kernel_type(pers) == F.kernel_type(base).replace(f", {F.knobs(base)}>", f", {F.knobs(pers)}>")
    with pytest.raises(InvalidArgumentError, match="persistent=1 with cu_seqlens.*persistent=0"):
        F.configure(SM90, {**p, "varlen": True}, dict(persistent=1, producer="cpasync"))
    with pytest.raises(InvalidArgumentError, match="persistent=1 loads each tile's Q by cp.async.*prologue=1"):
        F.configure(SM90, p, dict(persistent=1, prologue=0))
    with pytest.raises(InvalidArgumentError, match="persistent=2; valid choices: 0, 1"):
        F.configure(SM90, p, dict(persistent=2))
    plan = hkjit.ops.get("attention").plan("sm_90a", **{k: v for k, v in p.items() if k != "varlen"}, persistent=1)
    assert plan.grid == (128, 1, 1)
    causal = F.configure(SM90, {**p, "causal": True}, dict(persistent=1))   # units: pairs of query blocks
    assert F.launch_grid(causal, {**p, "causal": True}) == (64, 1, 1)        # 4 pairs x 8 heads x 2
    assert F.launch_grid(causal, {**p, "causal": True, "n_q": 1100}) == (80, 1, 1)   # 9 blocks: 5 units
    small = F.configure(SM90, p, dict(persistent=1, blocks=3))      # blocks: the grid's size, not the kernel's
    assert F.launch_grid(small, p) == (3, 1, 1)
    assert F.launch_grid(small, {**p, "n_q": 64, "batch": 1, "heads": 1}) == (1, 1, 1)     # one unit: one block
    assert F.kernel_type(small) == F.kernel_type(pers) and F.template_params(small) == F.template_params(pers)
    for bad, match in ((0, "blocks=0; a positive int"), (True, "blocks=True; a positive int"),
                       (2.0, "blocks=2.0; a positive int")):
        with pytest.raises(InvalidArgumentError, match=match):
            F.configure(SM90, p, dict(persistent=1, blocks=bad))
    with pytest.raises(InvalidArgumentError, match="blocks=3 sizes the persistent grid; pass persistent=1"):
        F.configure(SM90, p, dict(blocks=3))


def test_refused_variants_never_compile(monkeypatch):
    """hkjit.build refuses the variants a kernel could not run before any compiler is asked."""
    from hkjit import compiler
    monkeypatch.setattr(compiler, "find_compiler", lambda *a, **k: pytest.fail("a compiler was asked for"))
    for tiles, p in ((dict(overlap=1, stages=2), {}), (dict(producer="tma"), dict(varlen=True)),
                     (dict(producer="tma"), dict(align=8))):
        with pytest.raises(InvalidArgumentError):
            hkjit.build("attention", target="sm_90a", head_dim=128, **p, **tiles)


def test_tma_maps():
    """The K and V tensor maps: (D, n_k, kv_heads, batch) over the caller's strides, box = one swizzle
    chunk of a stage; a stand-in stride where an extent is 1; unaligned strides refused."""
    cfg = F.configure(SM90, dict(head_dim=128, dtype="float16", causal=False, varlen=False, align=16),
                      {"producer": "tma", "block_kv": 64})
    seen = []

    def encode(dtype, ptr, dims, strides, box):
        seen.append((dtype, ptr, dims, strides, box))
        return bytes([len(seen)]) * 128

    # bnhd: row stride H_kv * D, head stride D
    kw = dict(q=1 << 20, k=2 << 20, v=3 << 20, o=4 << 20, lse=0, q_strides=(300 * 8 * 128, 128, 8 * 128),
              k_strides=(300 * 2 * 128, 128, 2 * 128), v_strides=(300 * 2 * 128, 128, 2 * 128),
              o_strides=(300 * 8 * 128, 128, 8 * 128), lse_strides=(8 * 300, 300, 1), cu_seqlens_q=0,
              cu_seqlens_k=0, batch=3, heads=8, kv_heads=2, n_q=300, n_k=300, scale=0.1, workspace=0)
    a = F.fill(cfg, encode=encode, **kw)
    assert isinstance(a, F.TmaArgs) and a.k == 2 << 20 and a.k_sr == 256 and a.n_k == 300
    assert seen[0] == ("float16", 2 << 20, (128, 300, 2, 3), (512, 256, 300 * 512), (64, 64, 1, 1))
    assert seen[1][1] == 3 << 20 and bytes(a.k_map.v)[:1] == b"\x01" and bytes(a.v_map.v)[:1] == b"\x02"
    # one KV head and one sequence: their strides are never used, a valid stand-in is encoded
    seen.clear()
    F.fill(cfg, encode=encode, **{**kw, "batch": 1, "kv_heads": 1, "heads": 1, "k_strides": (8, 8, 128)})
    assert seen[0][3] == (256, 256 * 300, 256 * 300)
    with pytest.raises(InvalidArgumentError, match="batch stride"):
        F.fill(cfg, encode=encode, **{**kw, "k_strides": (300 * 2 * 128 + 4, 128, 256)})
    with pytest.raises(InvalidArgumentError, match="head stride"):
        F.fill(cfg, encode=encode, **{**kw, "v_strides": (300 * 2 * 128, 0, 256)})


def test_fill_checks_alignment():
    cfg = F.configure(SM90, dict(head_dim=64, dtype="bfloat16", causal=False, varlen=False, align=16),
                      {"producer": "cpasync"})      # no tensor maps: nothing to encode without a driver
    kw = dict(q=1024, k=2048, v=4096, o=8192, lse=0, q_strides=(0, 64, 64), k_strides=(0, 64, 64),
              v_strides=(0, 64, 64), o_strides=(0, 64, 64), lse_strides=(0, 8, 1), cu_seqlens_q=0, cu_seqlens_k=0,
              batch=1, heads=1, kv_heads=1, n_q=8, n_k=8, scale=0.125, workspace=0)
    a = F.fill(cfg, **kw)
    assert a.q == 1024 and a.q_sr == 64 and abs(a.scale_log2 - 0.125 * 1.4426950408889634) < 1e-6
    with pytest.raises(InvalidArgumentError, match="aligned"):
        F.fill(cfg, **{**kw, "k": 2050})
    with pytest.raises(InvalidArgumentError, match="cu_seqlens"):
        F.fill(F.configure(SM90, dict(head_dim=64, dtype="bfloat16", causal=False, varlen=True, align=16), {}), **kw)


def test_alignment_covers_head_and_batch_strides():
    """`align` (what picks the load width and whether TMA can serve the call) is the alignment of every
    stepped stride, not only the row's; dims of extent 1 are never stepped; a broadcast (stride 0) dim
    counts as 8-byte aligned: TMA cannot map it, vector loads can."""
    from hkjit.ops.attention import _alignment
    assert _alignment(0x1000, (16 * 100 * 128, 100 * 128, 128), (2, 16, 100)) == 16
    assert _alignment(0x1000, (16 * 100 * 128 + 4, 100 * 128, 128), (2, 16, 100)) == 8     # batch stride
    assert _alignment(0x1000, (16 * 100 * 128 + 4, 100 * 128, 128), (1, 16, 100)) == 16    # ...not stepped
    assert _alignment(0x1000, (0, 100 * 128 + 2, 128), (1, 16, 100)) == 4                  # head stride
    assert _alignment(0x1000, (0, 0, 128), (2, 16, 100)) == 8                              # broadcast
    assert _alignment(0x1008, (0, 128, 128), (1, 1, 100)) == 8                             # base pointer
