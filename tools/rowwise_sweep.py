"""Schedule sweep for the memory-bound row-wise ops (activations, norms, rms_norm, rope) on a CUDA
GPU: every variant of the lists below is built first (NVRTC, in parallel processes), then checked
against torch eager on float32 inputs and timed (triton.testing.do_bench medians, L2 flushed per
repetition); the default and the three best of each case are timed twice more. Prints one line a
case (default, eager, a same-size copy, the four best with their registers) and writes
rowwise_sweep.json into $SWEEP_OUT (default: the current folder).

    PYTHONPATH=. python3 tools/rowwise_sweep.py [op ...]        # on the GPU machine
    DRY=1 PYTHONPATH=. python3 tools/rowwise_sweep.py [op ...]  # no GPU: build all, print registers
    SWEEP_SET=exact ...                                         # only the 128-column norms and rope

docs/notes/activations_softmax.md and docs/notes/norms.md record what it found on an H100.
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


def main():
    only = set(sys.argv[1:])
    import torch
    import hkjit
    from hkjit import launch, runtime, interop
    if os.environ.get("DRY") != "1":
        from triton.testing import do_bench

    def ms(fn, rep=40):
        return do_bench(fn, warmup=10, rep=rep, return_mode="median")

    t_start = time.time()
    dry = os.environ.get("DRY") == "1"       # no GPU: build every variant and report registers only
    if dry:
        for fname in ("randn", "rand", "arange", "full", "empty"):
            real = getattr(torch, fname)
            setattr(torch, fname, (lambda real: lambda *a, device=None, **k: real(*a, **k))(real))
    todo = [c for c in cases() if not only or c[0] in only]
    prepared = []
    for name, case, variants in todo:
        op = hkjit.ops.get(name)
        args, kwargs = op.bench_inputs(case, torch)
        fn = getattr(hkjit, name)
        got = {}
        orig = launch.call

        def capture(op_, values, scalars=(), options=(), device=None, compiler=None, tiles=None):
            got.update(op=op_, values=values, scalars=scalars, options=options)
        launch.call = capture
        try:
            fn(*args, **kwargs)
        finally:
            launch.call = orig
        described = tuple(None if v is None else interop.describe(v) for v in got["values"])
        dev = runtime.from_string("sim:gfx950") if dry else launch.device_for(name, described, None)
        binding = got["op"].bind(dict(zip(got["op"].array_names, described)), dict(got["options"]), dev)
        prepared.append(dict(name=name, case=case, variants=variants, args=args, kwargs=kwargs, got=got,
                             described=described, dev=dev, request=binding.request))
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
