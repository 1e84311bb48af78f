"""Timing shared by the benchmarks: the median of CUDA-event timings after a warm-up."""

import statistics


def median_ms(fn, warmup_ms=100, rep_ms=400) -> float:
    """Milliseconds per call of `fn`: triton.testing.do_bench's median, else CUDA events."""
    try:
        from triton.testing import do_bench
        return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    except ImportError:
        import torch
        for _ in range(10):
            fn()
        times = []
        for _ in range(50):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)
