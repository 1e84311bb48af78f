"""Memory-bound ops against torch eager and torch.compile, in one process, as GB/s and as a fraction
of the device-to-device copy bandwidth measured in the same run.

An op joins by defining, on its Op object:
    bench_cases(quick) -> [case dict]            shapes and dtypes to run
    bench_inputs(case, torch) -> (args, kwargs)  fresh random inputs on the GPU for hkjit's call
    bench_peers(torch) -> {name: fn}             the same function in torch (called as fn(*args, **kwargs))
    bench_bytes(case) -> int                     the fewest bytes the op must move (read + written)
    bench_tolerance(case) -> float               the relative error allowed against the reference
Every configuration is checked against the op's first peer computed in float32 (on copies of the
inputs, before hkjit's call: an op may update an input in place) before timing; an op that returns a
tuple (values and indices, a result and a residual sum) is compared part by part with a peer
returning the same tuple, and the largest error counts. Kernel time is the median of CUDA
events (triton.testing.do_bench), hkjit and peers alternated over rounds; small problems rotate over
several input sets so repeated runs do not time the L2 cache. Host time is the wall time per call
of a burst of calls issued without waiting for the GPU (what launch cost a small shape pays).
"""

import statistics
import time

from .timing import median_ms as _bench

ROUNDS = 3
L2_ROTATE_BYTES = 256 << 20


def copy_bandwidth(torch) -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + written), median of do_bench."""
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src))
    nbytes = 2 * src.numel() * src.element_size()
    del src, dst
    torch.cuda.empty_cache()
    return nbytes / ms / 1e6


def same_size_copy(torch, nbytes) -> float:
    """GB/s of a device-to-device copy moving `nbytes` (read + written): what the op's own size
    allows, launch ramp and last partial wave included."""
    src = torch.empty(max(1, nbytes // 4), dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6


HOST_CALLS = 200


def rel_err(got, ref) -> float:
    """The relative error of `got` against `ref` (tuples part by part, the largest; exact outputs such
    as indices: the fraction that differ)."""
    if isinstance(got, (tuple, list)):
        if not isinstance(ref, (tuple, list)) or len(ref) != len(got):
            raise TypeError(f"the reference peer returns {type(ref).__name__}, not a {len(got)}-tuple like hkjit")
        return max(rel_err(g, r) for g, r in zip(got, ref))
    if not got.is_floating_point():      # indices and other exact outputs: the fraction that differ
        return (got != ref).float().mean().item()
    got, ref = got.float(), ref.float()
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def host_us(torch, fn, args, kwargs) -> float:
    """Wall microseconds per call over a burst of calls issued back to back (no synchronisation
    inside the burst; the queue of a few hundred launches does not fill at these sizes)."""
    for _ in range(10):
        fn(*args, **kwargs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn(*args, **kwargs)
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e6


def allow_recompiles(torch) -> None:
    """torch.compile peers are compiled per shape (dynamic=False): raise dynamo's recompile limit so
    that every shape gets its own kernel rather than falling back to eager."""
    dynamo = getattr(getattr(torch, "_dynamo", None), "config", None)
    if dynamo is not None:
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, name):
                setattr(dynamo, name, max(getattr(dynamo, name), 256))


def run(op, hkjit_fn, quick=False, log=print) -> list:
    import torch
    allow_recompiles(torch)
    peak = copy_bandwidth(torch)
    log(f"  device-to-device copy: {peak:.0f} GB/s")
    peers = op.bench_peers(torch)
    rows = []
    for case in op.bench_cases(quick):
        nbytes = op.bench_bytes(case)
        copies = max(1, min(8, L2_ROTATE_BYTES // max(1, nbytes)))
        sets = [op.bench_inputs(case, torch) for _ in range(copies)]
        args, kwargs = sets[0]
        ref_name, ref_fn = next(iter(peers.items()))
        ref = ref_fn(*[a.to(torch.float32, copy=True) if torch.is_tensor(a) and a.is_floating_point() else a
                       for a in args], **kwargs)
        got = hkjit_fn(*args, **kwargs)
        err = rel_err(got, ref)
        for fn in peers.values():      # compile (torch.compile) and warm every peer before timing
            fn(*args, **kwargs)
        it = {"i": 0}

        def step(fn):
            def call():
                a, k = sets[it["i"] % copies]
                it["i"] += 1
                fn(*a, **k)
            return call
        times = {"hkjit": []} | {name: [] for name in peers}
        for _ in range(ROUNDS):
            for name, fn in peers.items():
                times[name].append(_bench(step(fn)))
            times["hkjit"].append(_bench(step(hkjit_fn)))
        ms = {name: statistics.median(t) for name, t in times.items()}
        row = {"case": case, "bytes": nbytes, "rel_err": err, "correct": bool(err < op.bench_tolerance(case)),
               "copy_gbs": peak}
        for name, t in ms.items():
            row[f"{name}_us"] = t * 1e3
            row[f"{name}_gbs"] = nbytes / t / 1e6
        row["fraction_of_copy"] = row["hkjit_gbs"] / peak
        row["same_size_copy_gbs"] = same_size_copy(torch, nbytes)
        row["fraction_of_same_size_copy"] = row["hkjit_gbs"] / row["same_size_copy_gbs"]
        row["vs"] = {name: ms[name] / ms["hkjit"] for name in peers}
        row["hkjit_spread"] = max(times["hkjit"]) / min(times["hkjit"]) - 1
        row["host_us"] = {"hkjit": host_us(torch, hkjit_fn, args, kwargs)} | {
            name: host_us(torch, fn, args, kwargs) for name, fn in peers.items()}
        rows.append(row)
        log(f"  {op.name} {_label(case):28s} hkjit {row['hkjit_gbs']:6.0f} GB/s ({row['fraction_of_copy']:.0%} of copy, "
            f"{row['fraction_of_same_size_copy']:.0%} of a same-size copy, {row['hkjit_us']:.1f} us)  " + "  ".join(f"{n} {row[f'{n}_gbs']:6.0f} ({row['vs'][n]:.2f}x)" for n in peers)
            + f"  host us/call {row['host_us']['hkjit']:.1f} (" + ", ".join(f"{n} {row['host_us'][n]:.1f}" for n in peers) + ")"
            + f"  err {err:.1e}" + ("" if row["correct"] else "  WRONG"))
        sets.clear()
        torch.cuda.empty_cache()
    return rows


def _label(case) -> str:
    return " ".join(f"{k}={v}" for k, v in case.items())


def markdown(op_name, rows) -> list:
    if not rows:
        return []
    peers = list(rows[0]["vs"])
    out = ["", f"## {op_name} vs {', '.join(peers)} (same process)", "",
           f"GB/s counts the fewest bytes the op must move (inputs read once, outputs written once); "
           f"copy = a 1 GiB device-to-device copy measured in the same run ({rows[0]['copy_gbs']:.0f} GB/s); "
           "same-size copy = a copy moving the op's own bytes (what its size allows). "
           "Medians of CUDA-event timings, alternated over three rounds; each configuration checked "
           "against torch in float32 first. Host µs = wall time per call of a burst of calls issued "
           "without waiting for the GPU.", "",
           "| case | MiB moved | hkjit GB/s | % of copy | % of same-size copy | hkjit µs | "
           + " | ".join(f"{p} GB/s | ×{p}" for p in peers) + " | host µs/call: hkjit / "
           + " / ".join(peers) + " | rel. error |",
           "|---|---|---|---|---|---|" + "---|---|" * len(peers) + "---|---|"]
    for r in rows:
        out.append(f"| {_label(r['case'])} | {r['bytes'] / 2**20:.1f} | {r['hkjit_gbs']:.0f} | "
                   f"{r['fraction_of_copy']:.0%} | {r['fraction_of_same_size_copy']:.0%} | {r['hkjit_us']:.1f} | "
                   + " | ".join(f"{r[f'{p}_gbs']:.0f} | {r['vs'][p]:.2f}" for p in peers)
                   + " | " + (" / ".join(f"{r['host_us'][n]:.1f}" for n in ["hkjit", *peers])
                              if "host_us" in r else "not measured")      # results from before it was
                   + f" | {r['rel_err']:.1e} |")
    return out


class OpBenchmark:
    """The suite's face for an op that declares bench_cases (see the module docstring)."""

    def __init__(self, op, fn):
        self.op, self.fn = op, fn

    def run(self, quick=False, log=print):
        return run(self.op, self.fn, quick, log)

    def markdown(self, rows, plots=()):
        return markdown(self.op.name, rows)
