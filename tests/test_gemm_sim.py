"""hkjit.gemm on the CDNA simulator (sim:gfx942, sim:gfx950) through the public API, hazard checks
on (out-of-bounds, missing s_waitcnt, LDS races): ragged shapes x all four layouts, every input /
output dtype pair with the bias + alpha/beta + c epilogue, every default tier forced by overrides,
NumPy and CPU-torch inputs. Every output starts NaN-poisoned (`out=`), so an element the kernel
never writes fails. Inputs are fresh random numbers each run; a failure prints its seed.

Tolerance, per element: |C - ref| <= eps(out) * |ref| + 1e-5 * (|A| @ |B| + |bias| + |beta c|),
ref computed in float64 from the same 16-bit inputs (the output rounding plus fp32 accumulation);
also the relative Frobenius error < 1e-2. The 34 kernels used are compiled up front on all cores
into a private cache (clang is most of the time); the file takes ~40 s on a 2-core machine.
"""

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_clang

ml_dtypes = pytest.importorskip("ml_dtypes")
import hkjit  # noqa: E402

pytestmark = needs_clang

ARCHS = ("gfx942", "gfx950")
LAYOUTS = ("nn", "nt", "tn", "tt")   # A then B: n = row-major (M x K / K x N), t = a transposed view
RAGGED = [(64, 64, 64), (200, 136, 96), (37, 50, 29), (64, 72, 96), (96, 40, 24), (1, 300, 77), (300, 1, 64),
          (129, 257, 200)]
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
EPS = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -23}
PAIRS = [(i, o) for i in ("bfloat16", "float16") for o in ("bfloat16", "float16", "float32")]
PAIR_LAYOUT = {p: LAYOUTS[n % 4] for n, p in enumerate(PAIRS)}   # the six pairs cover the layouts again
# "64" is the default tier at every shape here (all layouts). "128" runs the same code as "64"
# at twice the tile: nn and tt give each operand both majors. "256" is the 8-wave ping-pong
# schedule: every layout. (tier, layout, in dtype, out dtype, M, N, K)
TIER_CASES = [("128", lay, "float16", "float16", 200, 136, 96) for lay in ("nn", "tt")] + \
             [("256", lay, "bfloat16", "bfloat16", 300, 260, 130) for lay in LAYOUTS]   # 2 x 2 blocks, ragged
FOUR_BYTE_LAYOUTS = ("nt", "tn")
# Default tiers (hkjit/ops/_cdna_gemm.py), forced by keyword overrides.
TIERS = {
    "gfx950": {"64": dict(block_m=64, block_n=64, block_k=64, waves=4),
               "128": dict(block_m=128, block_n=128, block_k=64, waves=4),
               "256": dict(block_m=256, block_n=256, block_k=64, waves=8)},
    "gfx942": {"64": dict(block_m=64, block_n=64, block_k=64, waves=4),
               "128": dict(block_m=128, block_n=128, block_k=64, waves=4),
               "256": dict(block_m=256, block_n=256, block_k=32, waves=8)},
}


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    """One fresh kernel cache for the module: reproducible (cold) timing, nothing left behind."""
    from hkjit import cache, jit
    from hkjit.ops import gemm as gemm_op
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HKJIT_CACHE_DIR", str(tmp_path_factory.mktemp("hkjit-cache")))
        cache.reset_default_cache()
        jit._keys.clear()
        jit._loaded.clear()
        _prebuild()
        yield
        # drop the loaded simulator kernels (~100k Python objects each, in reference cycles: their
        # compiled blocks) and collect them once, or every later collection walks millions
        jit._keys.clear()
        jit._loaded.clear()
        gemm_op._launchers.clear()
        gc.collect()
        cache.reset_default_cache()


def _prebuild():
    """Compile every kernel the tests below use, on all cores at once (clang is most of this
    file's time; the tests would otherwise compile one at a time)."""
    from concurrent.futures import ThreadPoolExecutor
    side = {"n": "row", "t": "col"}
    jobs = []
    for arch in ARCHS:
        for lay in LAYOUTS:   # ragged shapes, torch, beta = 0: bfloat16 -> float32, default tier
            jobs.append((arch, lay, "bfloat16", "float32", (37, 50, 29), {}))
        for pair, lay in PAIR_LAYOUT.items():
            jobs.append((arch, lay) + pair + ((70, 45, 130), {}))
        for tier, lay, i, o, *shape in TIER_CASES:
            jobs.append((arch, lay, i, o, tuple(shape), TIERS[arch][tier]))

    def one(job):
        arch, lay, i, o, (m, n, k), ov = job
        hkjit.build("gemm", target=arch, m=m, n=n, k=k, dtype=i, out_dtype=o, a_layout=side[lay[0]],
                    b_layout=side[lay[1]], **ov)

    with ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as ex:
        list(ex.map(one, jobs))
        list(ex.map(lambda lay: _four_byte_kernel(lay), FOUR_BYTE_LAYOUTS))


class _Rng:
    """Fresh random numbers each run; the seed goes into every failure message."""

    def __init__(self):
        self.seed = np.random.SeedSequence().entropy
        self._gen = np.random.default_rng(self.seed)

    def standard_normal(self, shape):
        return self._gen.standard_normal(shape)


@pytest.fixture
def rng():
    return _Rng()


def _operand(rng, rows, cols, dtype, transposed):
    """A (rows x cols) operand: row-major, or the transposed view of a row-major (cols x rows)."""
    if transposed:
        return rng.standard_normal((cols, rows)).astype(NP[dtype]).T
    return rng.standard_normal((rows, cols)).astype(NP[dtype])


def _check(c, a, b, out_dtype, alpha=1.0, beta=0.0, bias=None, cin=None, what=""):
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ref = alpha * (a64 @ b64)
    mag = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if bias is not None:
        ref = ref + np.asarray(bias, np.float64)
        mag = mag + np.abs(np.asarray(bias, np.float64))
    if cin is not None and beta != 0.0:
        ref = ref + beta * np.asarray(cin, np.float64)
        mag = mag + abs(beta) * np.abs(np.asarray(cin, np.float64))
    got = np.asarray(c, np.float64)
    assert got.shape == ref.shape, what
    assert not np.isnan(got).any(), f"{what}: {int(np.isnan(got).sum())} NaN (unwritten or NaN-polluted) elements"
    err = np.abs(got - ref)
    tol = EPS[out_dtype] * np.abs(ref) + 1e-5 * mag + 1e-30
    bad = err > tol
    rel = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert not bad.any() and rel < 1e-2, (
        f"{what}: {int(bad.sum())} of {bad.size} elements off (first at {tuple(np.argwhere(bad)[0]) if bad.any() else None}, "
        f"max error {err.max():.3g}), relative error {rel:.2e}")


def _run(rng, arch, M, N, K, layout, in_dtype="bfloat16", out_dtype="float32", epilogue=False, **overrides):
    a = _operand(rng, M, K, in_dtype, layout[0] == "t")
    b = _operand(rng, K, N, in_dtype, layout[1] == "t")
    kw = {}
    if epilogue:
        kw = dict(bias=rng.standard_normal(N).astype(NP[out_dtype]),
                  c=rng.standard_normal((M, N)).astype(NP[out_dtype]), alpha=0.75, beta=-0.5)
    out = np.full((M, N), np.nan, NP[out_dtype])
    what = f"sim:{arch} {M}x{N}x{K} {layout} {in_dtype}->{out_dtype} epilogue={epilogue} {overrides} seed={rng.seed}"
    r = hkjit.gemm(a, b, out=out, device=f"sim:{arch}", **kw, **overrides)
    assert r is out, what
    _check(out, a, b, out_dtype, kw.get("alpha", 1.0), kw.get("beta", 0.0), kw.get("bias"), kw.get("c"), what)


@pytest.mark.parametrize("shape", RAGGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_ragged_shapes_all_layouts(rng, arch, layout, shape):
    _run(rng, arch, *shape, layout)


@pytest.mark.parametrize("in_dtype,out_dtype", PAIRS)
@pytest.mark.parametrize("arch", ARCHS)
def test_dtypes_and_epilogue(rng, arch, in_dtype, out_dtype):
    layout = PAIR_LAYOUT[(in_dtype, out_dtype)]
    _run(rng, arch, 70, 45, 130, layout, in_dtype, out_dtype, epilogue=False)
    _run(rng, arch, 70, 45, 130, layout, in_dtype, out_dtype, epilogue=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_c_is_not_read_when_beta_is_zero(rng, arch):
    M, N, K = 37, 50, 29
    a, b = _operand(rng, M, K, "bfloat16", False), _operand(rng, K, N, "bfloat16", False)
    cin = np.full((M, N), np.nan, np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    out = np.full((M, N), np.nan, np.float32)
    hkjit.gemm(a, b, out=out, bias=bias, c=cin, alpha=2.0, beta=0.0, device=f"sim:{arch}")
    _check(out, a, b, "float32", 2.0, 0.0, bias, None, f"sim:{arch} beta=0 with a NaN c, seed={rng.seed}")


@pytest.mark.parametrize("tier,layout,in_dtype,out_dtype,M,N,K", TIER_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in TIER_CASES])
@pytest.mark.parametrize("arch", ARCHS)
def test_tiers(rng, arch, tier, layout, in_dtype, out_dtype, M, N, K):
    _run(rng, arch, M, N, K, layout, in_dtype, out_dtype, epilogue=True, **TIERS[arch][tier])


@pytest.mark.parametrize("arch", ARCHS)
def test_default_tier_override_matches_default(rng, arch):
    # the "64" overrides name exactly what the tier rule picks at small shapes
    _run(rng, arch, 37, 50, 29, "nn", **TIERS[arch]["64"])


@pytest.mark.parametrize("arch", ARCHS)
def test_torch_inputs_give_torch_outputs(rng, arch):
    torch = pytest.importorskip("torch")
    M, N, K = 37, 50, 29
    a = torch.from_numpy(rng.standard_normal((K, M)).astype(np.float32)).to(torch.bfloat16).t()   # transposed view
    b = torch.from_numpy(rng.standard_normal((K, N)).astype(np.float32)).to(torch.bfloat16)
    a_np, b_np = a.float().numpy(), b.float().numpy()
    c = hkjit.gemm(a, b, device=f"sim:{arch}", out_dtype="float32")
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.device.type == "cpu" and c.shape == (M, N)
    _check(c.numpy(), a_np, b_np, "float32", what=f"torch sim:{arch} seed={rng.seed}")
    # default output dtype = input dtype; into a NaN-poisoned torch out=, with the epilogue
    a = a.contiguous()
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    bias = torch.from_numpy(rng.standard_normal(N).astype(np.float32)).to(torch.bfloat16)
    cin = torch.from_numpy(rng.standard_normal((M, N)).astype(np.float32)).to(torch.bfloat16)
    r = hkjit.gemm(a, b, out=out, bias=bias, c=cin, alpha=0.5, beta=2.0, device=f"sim:{arch}")
    assert r is out
    _check(out.float().numpy(), a_np, b_np, "bfloat16", 0.5, 2.0, bias.float().numpy(), cin.float().numpy(),
           f"torch out= sim:{arch} seed={rng.seed}")


def _four_byte_kernel(layout, M=37, N=66, K=30):
    """(cfg, code object) of gfx950 with 4-byte direct-to-LDS loads, built with clang directly
    (tests/sim/gemm_util; cached by content under the temp dir)."""
    sys.path.insert(0, str(Path(__file__).parent / "sim"))
    from gemm_util import gemm_code
    from hkjit.ops import _cdna_gemm as G
    cfg = G.choose_config(M, N, K, layout[0] == "n", layout[1] == "t", "bfloat16", "float32", "gfx950", {},
                          alignment=4)
    assert cfg["load_bytes"] == 4
    return cfg, gemm_code(cfg)


@pytest.mark.parametrize("layout", FOUR_BYTE_LAYOUTS)
def test_gfx950_4_byte_loads_tight_buffers(rng, layout):
    """gfx950 with 4-byte direct-to-LDS loads (leading dimensions aligned to 4, not 16 bytes: only
    reachable from device arrays, so launched here on a SimDevice directly), buffers that end
    exactly at the last element, ragged M, N, K."""
    from hkjit.ops import _cdna_gemm as G
    from hkjit.sim import SimDevice

    M, N, K = 37, 66, 30
    a_km, b_km = layout[0] == "n", layout[1] == "t"
    cfg, code = _four_byte_kernel(layout, M, N, K)
    dev = SimDevice("gfx950")
    kern = dev.load(code, G.KERNEL)
    A = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)

    def packed(x):   # rows of x with an even leading dimension; the buffer ends at the last element
        ld = x.shape[1] + x.shape[1] % 2
        buf = np.zeros((x.shape[0], ld), x.dtype)
        buf[:, :x.shape[1]] = x
        return buf.reshape(-1)[:(x.shape[0] - 1) * ld + x.shape[1]].copy(), ld

    a_mem, lda = packed(A if a_km else A.T)
    b_mem, ldb = packed(B.T if b_km else B)
    ba, bb, bc = dev.alloc(a_mem.nbytes), dev.alloc(b_mem.nbytes), dev.alloc(M * N * 4)
    try:
        dev.copy_in(ba, a_mem.view(np.uint16))
        dev.copy_in(bb, b_mem.view(np.uint16))
        dev.copy_in(bc, np.full((M, N), np.nan, np.float32))
        args = G.make_args(cfg, ba.ptr, (lda, 1) if a_km else (1, lda), bb.ptr, (1, ldb) if b_km else (ldb, 1),
                           bc.ptr, (N, 1), M, N, K)
        kern.launch(G.grid(M, N, K, cfg), (G.threads(cfg), 1, 1), G.dynamic_smem(cfg), bytes(args))
        out = np.empty((M, N), np.float32)
        dev.copy_out(bc, out)
    finally:
        for buf in (ba, bb, bc):
            dev.free(buf)
    _check(out, A, B, "float32", what=f"gfx950 4-byte loads {layout} seed={rng.seed}")
