"""Attention forward: hkjit against torch SDPA's cuDNN and flash backends in one process.

The issue's shapes: B16 H16 (MHA) and B16 H64/KV8 (GQA), N in {1024 ... 16384}, D in {64, 128},
causal and not, as TFLOP/s (forward FLOPs 4·B·H·N²·D, halved when causal) and ratios to the best
SDPA backend. Every timed configuration is first checked against SDPA's output. Backward rows
(hkjit.attention_backward against SDPA's backward through autograd, FLOPs 2.5x the forward's)
where the target has a backward kernel.
"""

import statistics

import numpy as np

from .timing import median_ms

N_FULL = (1024, 2048, 4096, 8192, 16384)
N_QUICK = (2048, 8192)
SHAPES = (("MHA", 16, 16, 16), ("GQA", 16, 64, 8))   # (label, batch, heads, kv_heads)


def _flops(b, h, n, d, causal):
    return 4.0 * b * h * n * n * d / (2 if causal else 1)


def _sdpa_peers(torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def peer(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
        return run
    return {"SDPA cuDNN": peer(SDPBackend.CUDNN_ATTENTION), "SDPA flash": peer(SDPBackend.FLASH_ATTENTION)}


def run(quick=False, log=print, rounds=3, dims=(64, 128)):
    import torch
    import hkjit
    rows = []
    peers = _sdpa_peers(torch)
    for label, b, h, hkv in SHAPES:
        for n in (N_QUICK if quick else N_FULL):
            for d in ((128,) if quick else dims):
                for causal in (False, True):
                    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
                    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                    out = torch.empty_like(q)
                    row = {"shape": label, "batch": b, "heads": h, "kv_heads": hkv, "n": n, "head_dim": d,
                           "causal": causal, "rounds": rounds}
                    try:
                        hkjit.attention(q, k, v, causal=causal, out=out)
                        ref = next(iter(peers.values()))(q, k, v, causal)
                        row["rel_err"] = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                        del ref     # N16384 GQA D128 needs its memory for the backward on an 80 GB card
                        row["correct"] = bool(row["rel_err"] < 1e-2)
                        times = {name: [] for name in ["hkjit", *peers]}
                        for _ in range(rounds):   # alternate: clocks and neighbours drift
                            for name, fn in peers.items():
                                times[name].append(median_ms(lambda fn=fn, x=(q, k, v): fn(*x, causal)))
                            times["hkjit"].append(median_ms(
                                lambda x=(q, k, v), o=out: hkjit.attention(*x, causal=causal, out=o)))
                        flops = _flops(b, h, n, d, causal)
                        for name, ts in times.items():
                            row[f"{name}_tflops"] = flops / statistics.median(ts) / 1e9
                        best = max(row[f"{p}_tflops"] for p in peers)
                        row["ratio_to_best"] = row["hkjit_tflops"] / best
                        log(f"  attention {label} B{b} H{h}/{hkv} N{n} D{d} {'causal' if causal else 'full  '}  "
                            f"hkjit {row['hkjit_tflops']:6.1f}  " +
                            "  ".join(f"{p} {row[f'{p}_tflops']:6.1f}" for p in peers) +
                            f"  ratio {row['ratio_to_best']:.2f}x" + ("" if row["correct"] else "  WRONG"))
                        try:   # the forward's figures stand when the backward fails (memory, say)
                            _backward(row, peers, q, k, v, causal, 2.5 * flops, rounds, log)
                        except Exception as e:
                            row["backward_error"] = f"{type(e).__name__}: {e}"[:300]
                            log(f"      backward: {row['backward_error']}")
                    except Exception as e:   # one shape failing (e.g. memory) must not stop the rest
                        row["error"] = f"{type(e).__name__}: {e}"[:300]
                        log(f"  attention {label} N{n} D{d}: {row['error']}")
                    rows.append(row)
                    del q, k, v, out
                    torch.cuda.empty_cache()
    return rows


def _backward(row, peers, q, k, v, causal, flops, rounds, log):
    """Backward TFLOP/s: hkjit.attention_backward vs each SDPA backend's autograd backward."""
    import torch
    import hkjit
    try:
        o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True)
        do = torch.randn_like(q)
        hkjit.attention_backward(do, q, k, v, o, lse, causal=causal)
    except hkjit.TargetError as e:     # no backward kernel for this target yet
        row["backward"] = str(e)
        return
    times = {name: [] for name in ["hkjit", *peers]}
    for _ in range(rounds):
        for name, fn in peers.items():   # one peer's graph alive at a time: the largest shapes fill the card
            times[name].append(_peer_backward_ms(torch, fn, q, k, v, do, causal))
            torch.cuda.empty_cache()
        times["hkjit"].append(median_ms(lambda: hkjit.attention_backward(do, q, k, v, o, lse, causal=causal)))
    for name, ts in times.items():
        row[f"bwd_{name}_tflops"] = flops / statistics.median(ts) / 1e9
    row["bwd_ratio_to_best"] = row["bwd_hkjit_tflops"] / max(row[f"bwd_{p}_tflops"] for p in peers)
    log("      backward  hkjit {:6.1f}  ".format(row["bwd_hkjit_tflops"]) +
        "  ".join(f"{p} {row[f'bwd_{p}_tflops']:6.1f}" for p in peers) + f"  ratio {row['bwd_ratio_to_best']:.2f}x")


def _peer_backward_ms(torch, fn, q, k, v, do, causal) -> float:
    """Milliseconds of a peer's autograd backward; its graph is freed on return."""
    inputs = tuple(x.detach().requires_grad_() for x in (q, k, v))
    out = fn(*inputs, causal)
    return median_ms(lambda: torch.autograd.grad(out, inputs, do, retain_graph=True))


def static_shapes(quick) -> list:
    return [dict(batch=16, heads=64, kv_heads=8, n_q=8192, n_k=8192, head_dim=d, causal=c)
            for d in ((128,) if quick else (64, 128)) for c in (False, True)]


def _backward_check(dev, q, k, v, causal, d, dt, rng, shape) -> dict:
    """dV of hkjit.attention_backward against float64 (P^T dO, GQA summed over the two heads)."""
    import hkjit
    try:
        do = rng.standard_normal(q.shape).astype(dt)
        o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True, device=dev)
        _, _, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, device=dev)
        s = q[0].astype(np.float64) @ np.repeat(k[0], 2, 0).astype(np.float64).transpose(0, 2, 1) / np.sqrt(d)
        n_q, n_k = q.shape[2], k.shape[2]
        if causal:
            s = np.where(np.arange(n_k)[None] <= np.arange(n_q)[:, None] + n_k - n_q, s, -np.inf)
        m = s.max(-1, keepdims=True)
        p = np.exp(s - np.where(np.isfinite(m), m, 0))
        p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
        ref = (p.transpose(0, 2, 1) @ do[0].astype(np.float64)).sum(0, keepdims=True)
        err = float(np.linalg.norm(np.asarray(dv[0], np.float64) - ref) / np.linalg.norm(ref))
        return {"op": "attention_backward (dV)", "device": dev, "shape": shape, "rel_err": err,
                "passed": bool(err < 1e-2)}
    except Exception as e:
        return {"op": "attention_backward (dV)", "device": dev, "shape": shape, "passed": False,
                "error": f"{type(e).__name__}: {e}"[:300]}


def simulator_checks() -> list:
    """hkjit.attention at small ragged shapes on sim:gfx942 and sim:gfx950 against float64."""
    import hkjit
    rows = []
    rng = np.random.default_rng()
    try:
        import ml_dtypes
        dt = ml_dtypes.bfloat16
    except ImportError:
        dt = np.float16
    for dev in ("sim:gfx942", "sim:gfx950"):
        for n_q, n_k, d, causal in ((300, 300, 128, True), (37, 200, 64, False)):
            q = rng.standard_normal((1, 2, n_q, d)).astype(dt)
            k, v = (rng.standard_normal((1, 1, n_k, d)).astype(dt) for _ in range(2))
            shape = f"H2/1 {n_q}x{n_k} D{d} {'causal' if causal else 'full'}"
            try:
                o = np.asarray(hkjit.attention(q, k, v, causal=causal, device=dev), np.float64)
                s = q[0].astype(np.float64) @ np.repeat(k[0], 2, 0).astype(np.float64).transpose(0, 2, 1) / np.sqrt(d)
                if causal:
                    s = np.where(np.arange(n_k)[None] <= np.arange(n_q)[:, None] + n_k - n_q, s, -np.inf)
                p = np.exp(s - s.max(-1, keepdims=True))
                ref = (p / p.sum(-1, keepdims=True)) @ np.repeat(v[0], 2, 0).astype(np.float64)
                err = float(np.linalg.norm(o[0] - ref) / np.linalg.norm(ref))
                rows.append({"op": "attention", "device": dev, "shape": shape, "rel_err": err,
                             "passed": bool(err < 1e-2)})
                rows.append(_backward_check(dev, q, k, v, causal, d, dt, rng, shape))
            except Exception as e:
                rows.append({"op": "attention", "device": dev, "shape": shape, "passed": False,
                             "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def _rounds_text(rows) -> str:
    n = rows[0].get("rounds", 3) if rows else 3     # results written before rounds were recorded: 3
    return "one round" if n == 1 else f"{n} rounds"


def markdown(rows, plots=()) -> list:
    """The `hkjit bench` section: forward (and backward, where measured) TFLOP/s against SDPA."""
    out = ["", "## Attention vs torch SDPA (cuDNN, flash), bf16, same process", "",
           f"Medians of CUDA-event timings, hkjit and the SDPA backends taken in turn ({_rounds_text(rows)}); "
           "forward FLOPs 4·B·H·N²·D (halved when causal), backward 2.5× that; each configuration checked "
           "against SDPA's output first. Ratio: hkjit / the best SDPA backend.", "",
           "| shape | N | D | mask | fwd hkjit | fwd cuDNN | fwd flash | fwd ratio | bwd hkjit | bwd cuDNN | bwd flash "
           "| bwd ratio | rel. error |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda r, k: f"{r[k]:.1f}" if k in r else "—"  # noqa: E731
    for r in rows:
        if "error" in r:
            out.append(f"| {r['shape']} | {r['n']} | {r['head_dim']} | {'causal' if r['causal'] else 'full'} | "
                       f"{r['error'][:80]} |||||||||")
            continue
        ratio = lambda k: f"{r[k]:.2f}×" if k in r else "—"  # noqa: E731
        cells = [f"{r['shape']} B{r['batch']} H{r['heads']}/{r['kv_heads']}", r["n"], r["head_dim"],
                 "causal" if r["causal"] else "full", fmt(r, "hkjit_tflops"), fmt(r, "SDPA cuDNN_tflops"),
                 fmt(r, "SDPA flash_tflops"), ratio("ratio_to_best"), fmt(r, "bwd_hkjit_tflops"),
                 fmt(r, "bwd_SDPA cuDNN_tflops"), fmt(r, "bwd_SDPA flash_tflops"), ratio("bwd_ratio_to_best"),
                 f"{r.get('rel_err', float('nan')):.1e}"]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return out
