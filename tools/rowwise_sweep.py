"""Schedule sweep for the memory-bound row-wise ops (activations, norms, rms_norm, rope) on a CUDA
GPU: every variant of the lists below is built first (NVRTC, in parallel processes), then checked
against torch eager on float32 inputs and timed (triton.testing.do_bench medians, L2 flushed per
repetition); the default and the three best of each case are timed twice more. Prints one line a
case (default, eager, a same-size copy, the four best with their registers) and writes
rowwise_sweep.json into $SWEEP_OUT (default: the current folder).

    PYTHONPATH=. python3 tools/rowwise_sweep.py [op ...]        # on the GPU machine
    DRY=1 PYTHONPATH=. python3 tools/rowwise_sweep.py [op ...]  # no GPU: build all, print registers
    SWEEP_SET=exact ...                                         # only the 128-column norms and rope
    SWEEP_SET=short ...                                         # the short rows below torch.compile,
                                                                # with torch.compile timed beside them
    SWEEP_SET=mid ...                                           # the same for the 64 MiB rows (MID_CASES)
    SWEEP_SET=gelu ...                                          # the same for gelu / tanh (GELU_CASES)

docs/notes/activations_softmax.md and docs/notes/norms.md record what it found on an H100.

SWEEP_SET=short (issue 11: the six short-row cases below torch.compile in the session-9 H100 run):
each case's candidate schedules (SHORT_CASES below, with what each tests) are built in parallel
processes while torch.compile compiles the benchmark's own peer (op.bench_peers, as `hkjit bench`
times it); every variant and the peer are checked against torch eager in float32 (every output:
the norms' residual sum too) and timed with triton.testing.do_bench medians (L2 flushed per
repetition; one input set, where `hkjit bench` rotates several: the flush makes them equivalent);
then the default, torch.compile and the three best are timed in three more alternated rounds (one
once the run has passed SWEEP_BUDGET_S seconds, default 75). Prints per case the default, torch.compile, and the best three with their
ratio to torch.compile (torch.compile µs / variant µs: above 1 is faster, as `hkjit bench`'s
×torch.compile); writes rowwise_sweep_short.json (mid, gelu: rowwise_sweep_mid.json, _gelu.json) into $SWEEP_OUT.
"""
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp

OUT = os.environ.get("SWEEP_OUT", ".")


def T(th, rt, gr, ch, mb=None, **kw):
    d = dict(threads=th, row_threads=rt, group_rows=gr, chunks=ch, **kw)
    if mb:
        d["min_blocks"] = mb
    return d


def flat(th, ch, mb=None):
    return T(th, th, 1, ch, mb)


UNARY_V = [{}, flat(128, 1), flat(256, 1), flat(512, 1), flat(1024, 1), flat(128, 2), flat(256, 2), flat(512, 2),
           flat(128, 4), flat(512, 4), flat(256, 4, 3), flat(256, 4, 4), flat(256, 2, 4), flat(128, 4, 8),
           flat(128, 2, 8), flat(256, 2, 6)]
GATED_SMALL_V = [{}, T(256, 16, 1, 1), T(256, 16, 2, 1), T(256, 8, 2, 2), T(128, 8, 1, 2), T(128, 16, 1, 1),
                 T(512, 8, 1, 2), T(512, 16, 1, 1), T(256, 16, 4, 1), T(256, 4, 1, 4), T(64, 16, 1, 1), T(128, 8, 2, 2)]
GATED_BIG_V = [{}, T(512, 256, 2, 2), T(512, 256, 1, 2), T(256, 256, 1, 1), T(512, 512, 1, 1), T(256, 128, 1, 2),
               T(256, 128, 1, 4), T(256, 256, 2, 2), T(128, 128, 1, 1), T(256, 256, 2, 1), T(256, 256, 1, 2, 4),
               T(256, 256, 1, 4), T(1024, 1024, 1, 1), T(128, 128, 1, 2), T(512, 256, 1, 2, 4), T(256, 256, 1, 2, 3)]
NORM128_V = [{}, T(256, 16, 1, 1), T(256, 16, 2, 1), T(256, 8, 2, 2), T(128, 8, 1, 2), T(128, 16, 1, 1),
             T(512, 8, 1, 2), T(512, 16, 1, 1), T(256, 4, 1, 4), T(256, 16, 4, 1), T(256, 8, 4, 2), T(64, 8, 1, 2),
             T(256, 8, 1, 2, 8), T(128, 16, 2, 1)]
NORM1K_V = [{}, T(128, 64, 1, 2), T(256, 32, 1, 4), T(128, 128, 1, 1), T(128, 32, 2, 4), T(256, 64, 1, 2),
            T(64, 32, 1, 4)]
NORM4K_V = [{}, T(128, 128, 1, 4), T(256, 128, 1, 4), T(512, 128, 1, 4), T(256, 256, 1, 2), T(512, 512, 1, 1),
            T(128, 64, 1, 8), T(256, 256, 1, 2, 4), T(512, 256, 1, 2), T(128, 128, 1, 4, 8), T(128, 128, 1, 4, 6),
            T(128, 128, 1, 2), T(256, 128, 1, 2), T(128, 128, 1, 4, 4)]
NORM8K_V = [{}, T(256, 256, 1, 4), T(512, 256, 1, 4), T(512, 512, 1, 2), T(1024, 1024, 1, 1), T(128, 128, 1, 8),
            T(1024, 256, 1, 4), T(256, 256, 1, 4, 4), T(256, 256, 1, 4, 3), T(512, 512, 1, 2, 2), T(256, 256, 1, 2),
            T(512, 512, 1, 1)]
ROPE_V = [{}, dict(threads=64), dict(threads=256), dict(threads=512), dict(row_threads=4, chunks=2),
          dict(row_threads=4, chunks=2, threads=256), dict(row_threads=16, chunks=1), dict(threads=128, blocks=132 * 16)]


# Rows of exactly the tile's columns (the `exact` path, the sm_90a default for short rows; session 5).
NORM128_X = [{}, dict(exact=0), T(128, 16, 1, 1), T(128, 16, 2, 1), T(64, 16, 1, 1), T(256, 16, 1, 1),
             T(128, 8, 1, 2), T(128, 8, 2, 2), T(64, 8, 1, 2), T(256, 8, 1, 2), T(128, 16, 1, 1, 16),
             T(128, 8, 1, 2, 16), T(128, 16, 1, 1, blocks=132 * 8), T(128, 8, 1, 2, blocks=132 * 8),
             T(256, 16, 2, 1, blocks=132 * 4)]
ROPE_X = [{}, dict(exact=0), dict(vec=8), dict(vec=8, threads=256), dict(vec=8, row_threads=4, chunks=2),
          dict(vec=8, threads=64), dict(threads=256), dict(threads=64), dict(blocks=132 * 16),
          dict(vec=8, blocks=132 * 16)]


# --- SWEEP_SET=short ----------------------------------------------------------------------------
# Defaults at these shapes (sm_90a, bf16; registers from NVRTC 13.5, SASS instructions of the whole
# kernel): softmax 4096 x 128: 256 threads, 8 a row, 2 pieces: 128 blocks (one per SM, 4 SMs idle),
# 47 registers, 1240 instructions (the two-pass path and element-wise tails included); exact=1:
# 32 registers, 304. silu_and_mul x 4096 / 16384 x 256: the same tile, 128 / 512 blocks, 71
# registers (no cap: 3 blocks of 256 an SM, so 512 blocks are 1.3 waves), 544 instructions with a
# run-time division of the tile index; exact=1: 51 registers (4 blocks an SM: one wave), 240.
# dropout_add_layer_norm x 128: exact path, 16 threads a row, one piece of x and of the residual a
# thread, 128-thread blocks (64 at 128 rows), 55 registers under the 64 cap (48 without the
# dropout hashes, which p = 0 skips at run time; 48 with packed_wb=1, the weight and bias kept as
# bf16): 9 blocks (36 warps, 36 KiB of loads) an SM.
def X(**kw):
    return dict(exact=1, **kw)


SOFTMAX_SHORT = [
    {},                                             # default (general path)
    X(),                                            # the exact path alone (no column tests, no 2-pass code)
    X(threads=128), X(threads=64),                  # 256 / 512 blocks: every SM busy, several blocks each
    T(128, 8, 1, 2),                                # 256 blocks on the general path (schedule without exact)
    X(threads=64, row_threads=16, chunks=1),        # one piece a thread, 1024 blocks (norms' few-rows rule)
    X(threads=128, row_threads=16, chunks=1),       # the same in 512 blocks
    X(threads=256, row_threads=16, chunks=1),       # ... and in 256 blocks
    X(threads=128, row_threads=16, group_rows=2, chunks=1),   # two rows a thread: independent reductions
    X(threads=64, row_threads=4, chunks=4),         # 4 pieces a thread, 2 shuffle levels, 256 blocks
    X(threads=128, row_threads=32, vec=4, chunks=1),  # 8-byte pieces, a warp a row, 1024 blocks
    T(64, 16, 1, 1),                                # one piece a thread on the general path
]
GATED_SHORT_4K = [
    {},                                             # default: 128 blocks of 256
    X(),                                            # exact: no tile-index division, no column tests
    X(threads=128), X(threads=64),                  # 256 / 512 blocks
    T(128, 8, 1, 2),                                # 256 blocks, general path
    X(threads=128, row_threads=16, chunks=1),       # one piece of each half a thread, 512 blocks
    X(threads=64, row_threads=16, chunks=1),        # ... 1024 blocks
    X(threads=256, row_threads=16, chunks=1),       # ... 256 blocks
    X(threads=128, row_threads=16, group_rows=2, chunks=1),   # two rows a thread, 256 blocks
    X(threads=64, row_threads=4, chunks=4),         # 4 pieces of each half, 256 blocks
    T(64, 16, 1, 1),                                # one piece of each half, 64-thread blocks, general path
]
GATED_SHORT_16K = [
    {},                                             # default: 512 blocks of 256 at 71 registers: 1.3 waves
    X(),                                            # exact: 51 registers, one wave
    T(256, 8, 1, 2, 4),                             # general path capped at 64 registers: one wave
    X(min_blocks=6),                                # 40-register cap
    X(threads=128),                                 # 1024 blocks of 128
    X(threads=128, min_blocks=12),                  # ... 40-register cap
    X(threads=128, row_threads=16, chunks=1),       # one piece of each half, 2048 blocks
    X(threads=256, row_threads=16, group_rows=2, chunks=1),   # two rows a thread, 512 blocks
    X(threads=128, row_threads=8, group_rows=2, chunks=2),    # 4 loads of each half in flight, 512 blocks
    X(threads=64),                                  # 2048 blocks of 64
    X(threads=512),                                 # 256 blocks of 512
    T(128, 8, 1, 2),                                # 128-thread blocks, general path
]
P = dict(packed_wb=1)                               # weight and bias kept as bf16, converted per row
DROPOUT_SHORT_FEW = [                               # 128 rows: one launch, a few blocks
    {},                                             # default: 64 threads, 16 a row, 32 blocks (exact)
    dict(exact=0),                                  # the general path (48 registers, weight read per row)
    P,                                              # exact, bf16 weight and bias (48 registers)
    dict(threads=128, row_threads=16, chunks=1),    # 16 blocks of 128
    dict(threads=64, row_threads=8, chunks=2, **P), # 2 pieces a thread, 16 blocks (fp32 weights spill)
    dict(threads=64, row_threads=32, vec=4, chunks=1),    # 8-byte pieces, a warp a row, 64 blocks
    dict(threads=128, row_threads=32, vec=4, chunks=1),   # ... 32 blocks
    dict(threads=64, row_threads=16, vec=4, chunks=2),    # 8-byte pieces, 2 a thread, 32 blocks
    dict(exact=0, threads=64, row_threads=32, vec=4, chunks=1),  # 8-byte pieces on the general path
]
DROPOUT_SHORT = [                                   # 16384 / 65536 rows
    {},                                             # default: 128 threads, 16 a row, 1 piece (exact), 55 regs
    dict(exact=0),                                  # the general path (48 registers, weight read per row)
    P,                                              # exact, bf16 weight and bias: 48 registers, 10 blocks an SM
    dict(threads=128, row_threads=8, chunks=2, **P),  # 2 pieces of x and residual (64 B in flight), 63 regs
    dict(exact=0, threads=128, row_threads=8, chunks=2),  # the same on the general path
    dict(threads=128, row_threads=16, group_rows=2, chunks=1),        # two rows a thread (64 B in flight)
    dict(threads=128, row_threads=16, group_rows=2, chunks=1, **P),   # ... with bf16 weight and bias
    dict(threads=256, row_threads=16, chunks=1),    # 256-thread blocks
    dict(threads=128, row_threads=16, chunks=1, min_blocks=12),       # 40-register cap: 12 blocks an SM
    dict(threads=128, row_threads=16, chunks=1, min_blocks=12, **P),  # ... with bf16 weight and bias
    dict(threads=128, row_threads=16, chunks=1, blocks=132 * 9),      # persistent: 9 blocks an SM
    dict(threads=128, row_threads=16, chunks=1, blocks=132 * 10, **P),  # persistent, 10 an SM, bf16 weights
]
SHORT_CASES = [
    ("softmax", dict(rows=4096, hidden=128, dtype="bfloat16"), SOFTMAX_SHORT),
    ("silu_and_mul", dict(rows=4096, x_cols=256, dtype="bfloat16"), GATED_SHORT_4K),
    ("silu_and_mul", dict(rows=16384, x_cols=256, dtype="bfloat16"), GATED_SHORT_16K),
    ("dropout_add_layer_norm", dict(rows=128, hidden=128, dtype="bfloat16"), DROPOUT_SHORT_FEW),
    ("dropout_add_layer_norm", dict(rows=16384, hidden=128, dtype="bfloat16"), DROPOUT_SHORT),
    ("dropout_add_layer_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), DROPOUT_SHORT),
]

# --- SWEEP_SET=mid: the 64 MiB rows below torch.compile in the fifth H100 run (0.95-0.98x, both at about
# a same-size copy's rate): rms_norm 4096 x 4096 (default: a 128-thread block a row, 4096 blocks, 1.9
# waves of 16 blocks an SM), 16384 x 1024 (4 rows a block), add_rms_norm / dropout_add_layer_norm
# 65536 x 128 (the exact path).
NORM4K_MID = NORM4K_V + [T(128, 128, 1, 4, blocks=132 * 16), T(256, 256, 1, 2, blocks=132 * 8),
                         T(512, 512, 1, 1, 4), T(64, 64, 1, 8)]
NORM1K_MID = NORM1K_V + [T(128, 128, 1, 1, blocks=132 * 16), T(128, 32, 1, 4, blocks=132 * 16),
                         T(256, 128, 1, 1), T(512, 128, 1, 1),
                         # rows of exactly 1024: straight-line code (Triton's kernel is), the weight in
                         # registers (80 a thread) or read per row (55)
                         T(128, 32, 1, 4, exact=1), T(128, 32, 1, 4, exact=1, weight_regs=0),
                         T(64, 32, 1, 4, exact=1, weight_regs=0), T(256, 32, 1, 4, exact=1, weight_regs=0)]
MID_CASES = [
    ("rms_norm", dict(rows=4096, hidden=4096, dtype="bfloat16"), NORM4K_MID),
    ("rms_norm", dict(rows=16384, hidden=1024, dtype="bfloat16"), NORM1K_MID),
    ("add_rms_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), NORM128_X),
    ("dropout_add_layer_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), DROPOUT_SHORT),
]


def cases():
    if os.environ.get("SWEEP_SET") == "exact":     # session 5: the exact path at 128 columns, rope
        out = [(op, dict(rows=r, hidden=128, dtype="bfloat16"), NORM128_X)
               for op in ("rms_norm", "add_rms_norm", "layer_norm", "dropout_add_layer_norm")
               for r in (128, 4096, 16384, 65536)]
        return out + [("rope", dict(b=4, heads=32, n=1024, d=128, layout=lay, dtype="bfloat16"), ROPE_X)
                      for lay in ("bhnd", "bnhd")]
    out = []
    for op in ("silu", "gelu", "gelu_tanh", "relu", "tanh"):
        for c in (4096, 8192):
            out.append((op, dict(rows=16384, cols=c, dtype="bfloat16"), UNARY_V))
    for r in (4096, 16384, 65536, 131072):
        out.append(("silu_and_mul", dict(rows=r, x_cols=256, dtype="bfloat16"), GATED_SMALL_V))
    for op in ("silu_and_mul", "gelu_and_mul"):
        for r, c in ((4096, 16384), (16384, 8192), (16384, 16384)):
            out.append((op, dict(rows=r, x_cols=c, dtype="bfloat16"), GATED_BIG_V))
    for op in ("layer_norm", "add_rms_norm", "dropout_add_layer_norm", "rms_norm"):
        for r in (4096, 16384, 65536):
            out.append((op, dict(rows=r, hidden=128, dtype="bfloat16"), NORM128_V))
        out.append((op, dict(rows=16384, hidden=4096, dtype="bfloat16"), NORM4K_V))
        out.append((op, dict(rows=16384, hidden=8192, dtype="bfloat16"), NORM8K_V))
    out.append(("rms_norm", dict(rows=16384, hidden=1024, dtype="bfloat16"), NORM1K_V))
    out.append(("rms_norm", dict(rows=65536, hidden=1024, dtype="bfloat16"), NORM1K_V))
    for lay in ("bhnd", "bnhd"):
        out.append(("rope", dict(b=4, heads=32, n=1024, d=128, layout=lay, dtype="bfloat16"), ROPE_V))
    return out


def _build(job):
    name, request, tiles = job
    import hkjit
    try:
        b = hkjit.build(name, target="sm_90a", **request, **tiles)
        return job, b.meta.get("registers"), b.meta.get("spills", 0) + b.meta.get("stack_bytes", 0), None
    except Exception as e:
        return job, None, None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def _cpu_inputs(torch):
    """DRY: the ops' bench_inputs make their tensors on the CPU (device= dropped)."""
    for fname in ("randn", "rand", "arange", "full", "empty"):
        real = getattr(torch, fname)
        setattr(torch, fname, (lambda real: lambda *a, device=None, **k: real(*a, **k))(real))


def _prepare(name, case, variants, dry, torch):
    """The op's benchmark inputs for `case`, what hkjit's call passes to its launcher (captured), and
    the request that names its kernels."""
    import hkjit
    from hkjit import launch, runtime, interop
    op = hkjit.ops.get(name)
    args, kwargs = op.bench_inputs(case, torch)
    got = {}
    orig = launch.call

    def capture(op_, values, scalars=(), options=(), device=None, compiler=None, tiles=None):
        got.update(op=op_, values=values, scalars=scalars, options=options)
    launch.call = capture
    try:
        getattr(hkjit, name)(*args, **kwargs)
    finally:
        launch.call = orig
    described = tuple(None if v is None else interop.describe(v) for v in got["values"])
    dev = runtime.from_string("sim:gfx950") if dry else launch.device_for(name, described, None)
    binding = got["op"].bind(dict(zip(got["op"].array_names, described)), dict(got["options"]), dev)
    return dict(name=name, case=case, variants=variants, args=args, kwargs=kwargs, got=got,
                described=described, dev=dev, request=binding.request)


def _variant(p, tiles, torch):
    """(a call that launches variant `tiles` of prepared case `p` on its outputs, the outputs in the
    op's output_names order, NaN-filled): the launcher hkjit's own call uses, without its host-side
    lookups."""
    from hkjit import launch, runtime
    op, got = p["got"]["op"], p["got"]
    launcher = launch._launcher(op, p["described"], dict(got["options"]), p["dev"], None, tiles)
    template = next(v for v in p["args"] if torch.is_tensor(v))
    outs, ptrs = {}, []
    for an, a in zip(op.array_names, p["described"]):
        if a is None and an in launcher.binding.outputs:
            shape, _ = launcher.binding.outputs[an]
            outs[an] = torch.full(shape, float("nan"), device="cuda", dtype=template.dtype)
            ptrs.append(outs[an].data_ptr())
        else:
            ptrs.append(a.ptr if a is not None else 0)
    stream = runtime.stream_for(p["dev"], "torch")
    ptrs = tuple(ptrs)
    result = tuple(outs[n] for n in op.output_names)
    return (lambda: launcher.run(ptrs, got["scalars"], stream)), (result[0] if len(result) == 1 else result)


# --- SWEEP_SET=gelu: gelu and tanh below a same-size copy on the H200 (86% / 90%), near the issue rate by
# their SASS count (docs/notes/activations_softmax.md): the shorter erfc (fast_erf=1, 16-bit outputs) and 32
# elements a thread (chunks=4: the index set-up over twice the elements), alone and together
GELU_V = [{}, dict(fast_erf=1), flat(256, 4, 3), dict(flat(256, 4, 3), fast_erf=1), flat(256, 4, 4), flat(128, 4, 6)]
TANH_V = [{}, flat(256, 4, 3), flat(256, 4, 4), flat(128, 4, 6)]     # (chunks 4 at the default's 6 blocks spills)
GELU_GATED_V = [{}, dict(fast_erf=1)]
GELU_CASES = [(op, dict(rows=16384, cols=c, dtype="bfloat16"), GELU_V if op == "gelu" else TANH_V)
              for op in ("gelu", "tanh") for c in (4096, 8192)] + \
             [("gelu_and_mul", dict(rows=r, x_cols=c, dtype="bfloat16"), GELU_GATED_V)
              for r, c in ((16384, 8192), (16384, 16384))]
SETS = {"short": SHORT_CASES, "mid": MID_CASES, "gelu": GELU_CASES}


def short_main(only, dry, t_start):
    """SWEEP_SET=short (see the module docstring)."""
    import torch
    from hkjit.bench.memory_bound import allow_recompiles, rel_err
    import hkjit
    todo = [c for c in SETS[os.environ["SWEEP_SET"]] if not only or c[0] in only]
    prepared = [_prepare(name, case, variants, dry, torch) for name, case, variants in todo]
    jobs = sorted({(p["name"], tuple(sorted(p["request"].items())), tuple(sorted(v.items())))
                   for p in prepared for v in p["variants"]})
    built = {}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=min(15, os.cpu_count() or 4), mp_context=mp.get_context("spawn")) as ex:
        futures = [ex.submit(_build, (n, dict(r), dict(t))) for n, r, t in jobs]
        peers = {}
        if not dry:      # torch.compile the bench's peers (and check them) while the variants build
            allow_recompiles(torch)
            for p in prepared:
                op = hkjit.ops.get(p["name"])
                peers[id(p)] = op.bench_peers(torch)
                ref_fn = peers[id(p)]["torch eager"]
                p["ref"] = ref_fn(*[a.to(torch.float32, copy=True) if torch.is_tensor(a) and a.is_floating_point()
                                    else a for a in p["args"]], **p["kwargs"])
                try:
                    p["compile_err"] = rel_err(peers[id(p)]["torch.compile"](*p["args"], **p["kwargs"]), p["ref"])
                except Exception as e:     # the variants are still measured; the ratios are left out
                    p["compile_err"] = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
                    print(f"{p['name']} {_label(p['case'])}: {p['compile_err']}", flush=True)
            torch.cuda.synchronize()
            print(f"torch.compile peers ready in {time.time() - t0:.0f} s", flush=True)
        for f in futures:
            job, regs, spill, err = f.result()
            built[(job[0], tuple(sorted(job[1].items())), tuple(sorted(job[2].items())))] = (regs, spill, err)
    print(f"built {len(jobs)} variants in {time.time() - t0:.0f} s", flush=True)
    if dry:
        for p in prepared:
            print(p["name"], _label(p["case"]))
            for v in p["variants"]:
                regs, spill, err = built[(p["name"], tuple(sorted(p["request"].items())), tuple(sorted(v.items())))]
                cfg = hkjit.ops.get(p["name"]).plan("sm_90a", **p["request"], **v).config
                print(f"   {_short(v):28s} regs {regs}  spill/stack {spill}  blocks {cfg['blocks']} x {cfg['threads']}"
                      + (f"  {err}" if err else ""))
        return
    from triton.testing import do_bench

    def ms(fn, rep):
        return do_bench(fn, warmup=20, rep=rep, return_mode="median")
    results = []
    for p in prepared:
        name, case = p["name"], p["case"]
        op = hkjit.ops.get(name)
        tol = op.bench_tolerance(case)
        compiled = peers[id(p)]["torch.compile"]
        args, kwargs = p["args"], p["kwargs"]
        rows = []
        for v in p["variants"]:
            regs, spill, err = built[(name, tuple(sorted(p["request"].items())), tuple(sorted(v.items())))]
            if err or spill:
                rows.append(dict(tiles=v, regs=regs, error=err or f"spills {spill}"))
                continue
            try:
                call, out = _variant(p, v, torch)
                call()
                torch.cuda.synchronize()
                e = rel_err(out, p["ref"])
                if not e < tol:
                    rows.append(dict(tiles=v, regs=regs, error=f"WRONG rel err {e:.2e}"))
                    continue
                rows.append(dict(tiles=v, regs=regs, err=e, call=call, us=[ms(call, 40) * 1e3], keep=out))
            except Exception as ex_:
                rows.append(dict(tiles=v, regs=regs, error=f"{type(ex_).__name__}: {str(ex_).splitlines()[0][:120]}"))
        peer = dict(tiles="torch.compile", call=lambda: compiled(*args, **kwargs), us=[])
        peered = isinstance(p["compile_err"], float)
        if peered:
            peer["us"].append(ms(peer["call"], 40) * 1e3)
        ok = sorted((r for r in rows if "call" in r), key=lambda r: r["us"][0])
        final = [r for r in ok if not r["tiles"]] + [r for r in ok if r["tiles"]][:3] + ([peer] if peered else [])
        # Alternated rounds of the default, the best three and torch.compile: three, or one once the
        # sweep has run past SWEEP_BUDGET_S seconds (default 75: the whole run in about 90 s).
        rounds = 3 if time.time() - t_start < float(os.environ.get("SWEEP_BUDGET_S", 75)) else 1
        for _ in range(rounds):
            for r in final:
                r["us"].append(ms(r["call"], 100) * 1e3)
                r["final"] = True
        for r in ok + [peer]:
            later = sorted(r["us"][1:])
            r["final_us"] = later[len(later) // 2] if later else (r["us"][0] if r["us"] else float("nan"))
            r.pop("call")
            r.pop("keep", None)
        default = next((r for r in ok if not r["tiles"]), None)
        best = sorted((r for r in ok if r["tiles"] and r.get("final")), key=lambda r: r["final_us"])
        c_us = peer["final_us"]
        label = f"{name} {_label(case)}"
        d_txt = (f"{default['final_us']:.2f} us [{default['regs']} regs] ({c_us / default['final_us']:.2f}x)"
                 if default else "failed")
        c_txt = f"(err {p['compile_err']:.1e})" if peered else "(not measured)"
        print(f"{label}: torch.compile {c_us:.2f} us {c_txt} | default {d_txt} | best: "
              + "; ".join(f"{_short(r['tiles'])} {r['final_us']:.2f} us [{r['regs']}] ({c_us / r['final_us']:.2f}x)"
                          for r in best), flush=True)
        print("   round 1, us: " + "  ".join(f"{_short(r['tiles'])}={r['us'][0]:.2f}" for r in ok)
              + (f"  torch.compile={peer['us'][0]:.2f}" if peered else ""), flush=True)
        bad = [r for r in rows if "error" in r]
        if bad:
            print("   skipped: " + "; ".join(f"{_short(r['tiles'])}: {r['error'][:70]}" for r in bad))
        results.append(dict(op=name, case=case, compile_us=c_us, compile_err=p["compile_err"],
                            default_us=default and default["final_us"], rows=rows, peer=peer))
        torch.cuda.empty_cache()
    with open(os.path.join(OUT, f"rowwise_sweep_{os.environ['SWEEP_SET']}.json"), "w") as f:   # short, mid, gelu
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, results=results), f,
                  indent=1, default=str)
    print(f"sweep done in {time.time() - t_start:.0f} s", flush=True)


def _label(case):
    return " ".join(f"{k}={v}" for k, v in case.items() if k != "dtype")


def main():
    only = set(sys.argv[1:])
    import torch
    import hkjit
    from hkjit import launch, runtime
    if os.environ.get("DRY") != "1":
        from triton.testing import do_bench

    def ms(fn, rep=40):
        return do_bench(fn, warmup=10, rep=rep, return_mode="median")

    t_start = time.time()
    dry = os.environ.get("DRY") == "1"       # no GPU: build every variant and report registers only
    if dry:
        _cpu_inputs(torch)
    if os.environ.get("SWEEP_SET") in SETS:
        return short_main(only, dry, t_start)
    todo = [c for c in cases() if not only or c[0] in only]
    prepared = [_prepare(name, case, variants, dry, torch) for name, case, variants in todo]
    jobs = sorted({(p["name"], tuple(sorted(p["request"].items())), tuple(sorted(v.items())))
                   for p in prepared for v in p["variants"]})
    t0 = time.time()
    built = {}
    with ProcessPoolExecutor(max_workers=min(15, os.cpu_count() or 4), mp_context=mp.get_context("spawn")) as ex:
        for job, regs, spill, err in ex.map(_build, [(n, dict(r), dict(t)) for n, r, t in jobs], chunksize=2):
            built[(job[0], tuple(sorted(job[1].items())), tuple(sorted(job[2].items())))] = (regs, spill, err)
    print(f"built {len(jobs)} variants in {time.time() - t0:.0f} s", flush=True)
    if dry:
        for k, (regs, spill, err) in sorted(built.items()):
            print(k[0], dict(k[1]).get("rows"), dict(k[1]).get("cols") or dict(k[1]).get("hidden"), _short(dict(k[2])),
                  regs, spill, err or "")
        return

    results = []
    for p in prepared:
        name, case = p["name"], p["case"]
        op = hkjit.ops.get(name)
        ref_fn = op.bench_peers(torch)["torch eager"]
        args, kwargs = p["args"], p["kwargs"]
        ref = ref_fn(*[a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args], **kwargs)
        ref = ref[0] if isinstance(ref, (tuple, list)) else ref
        got = p["got"]
        template = next(v for v in got["values"] if v is not None)
        stream = runtime.stream_for(p["dev"], "torch")
        rows = []
        for v in p["variants"]:
            key = (name, tuple(sorted(p["request"].items())), tuple(sorted(v.items())))
            regs, spill, err = built.get(key, (None, None, "not built"))
            if err or spill:
                rows.append(dict(tiles=v, regs=regs, error=err or f"spills {spill}"))
                continue
            try:
                launcher = launch._launcher(got["op"], p["described"], dict(got["options"]), p["dev"], None, v)
                objs = []
                ptrs = []
                for an, a in zip(got["op"].array_names, p["described"]):
                    if a is None and an in launcher.binding.outputs:
                        shape, _ = launcher.binding.outputs[an]
                        t = torch.full(shape, float("nan"), device="cuda", dtype=template.dtype)
                        objs.append((an, t))
                        ptrs.append(t.data_ptr())
                    else:
                        ptrs.append(a.ptr if a is not None else 0)
                ptrs = tuple(ptrs)
                call = (lambda L=launcher, P=ptrs: L.run(P, got["scalars"], stream))
                call()
                torch.cuda.synchronize()
                out = dict(objs)[got["op"].output_names[0]]
                err_v = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                if not (err_v < op.bench_tolerance(case)):
                    rows.append(dict(tiles=v, regs=regs, error=f"WRONG rel err {err_v:.2e}"))
                    continue
                rows.append(dict(tiles=v, regs=regs, err=err_v, call=call, us=[], keep=objs))
            except Exception as e:
                rows.append(dict(tiles=v, regs=regs, error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"))
        ok = [r for r in rows if "call" in r]
        for r in ok:
            r["us"].append(ms(r["call"]) * 1e3)
        # the default and the three best again, two more rounds each
        ok.sort(key=lambda r: min(r["us"]))
        again = ok[:3] + [r for r in ok[3:] if not r["tiles"]]
        for _ in range(2):
            for r in again:
                r["us"].append(ms(r["call"], rep=80) * 1e3)
        eager = ms(lambda: ref_fn(*args, **kwargs), rep=80) * 1e3
        nbytes = op.bench_bytes(case)
        src = torch.empty(max(1, nbytes // 4), dtype=torch.float16, device="cuda").normal_()
        dst = torch.empty_like(src)
        copy = ms(lambda: dst.copy_(src), rep=80) * 1e3
        del src, dst
        for r in ok:
            r["best_us"] = min(r["us"]) if len(r["us"]) == 1 else sorted(r["us"])[len(r["us"]) // 2]
            r.pop("call")
            r.pop("keep")
        ok.sort(key=lambda r: r["best_us"])
        default = next((r for r in ok if not r["tiles"]), None)
        results.append(dict(op=name, case=case, eager_us=eager, copy_us=copy, bytes=nbytes, rows=rows,
                            default_us=default and default["best_us"]))
        label = " ".join(f"{k}={v}" for k, v in case.items() if k != "dtype")
        d_us = default["best_us"] if default else float("nan")
        print(f"{name} {label}: default {d_us:.1f} us ({nbytes / d_us / 1e3:.0f} GB/s)  eager {eager:.1f}  "
              f"same-size copy {copy:.1f}  | " + "  ".join(
                  f"{_short(r['tiles'])}={r['best_us']:.1f}[{r['regs']}]" for r in ok[:4]), flush=True)
        bad = [r for r in rows if "error" in r]
        if bad:
            print("   skipped: " + "; ".join(f"{_short(r['tiles'])}: {r['error'][:60]}" for r in bad[:6]))
        for r in rows:
            r.pop("call", None)
        torch.cuda.empty_cache()
    with open(os.path.join(OUT, "rowwise_sweep.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(f"sweep done in {time.time() - t_start:.0f} s", flush=True)


def _short(t):
    if not t:
        return "default"
    ab = dict(threads="t", row_threads="rt", group_rows="gr", chunks="ch", min_blocks="mb", blocks="b", exact="x",
              vec="v")
    return ",".join(f"{ab.get(k, k)}{v}" for k, v in t.items())


if __name__ == "__main__":
    main()
