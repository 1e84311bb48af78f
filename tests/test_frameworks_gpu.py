"""torch.compile, CUDA graphs and jax.jit with hkjit ops on an NVIDIA GPU (issue 14 items 2 and 3).
The CPU half (meta tensors, schemas, the simulator) is tests/test_frameworks_torch.py."""

import numpy as np
import pytest

from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402
from hkjit.errors import GraphCaptureError  # noqa: E402

torch = pytest.importorskip("torch")
BF = torch.bfloat16


def rand(*shape, dtype=BF, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def rel(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm()).item()


def block(x, w_norm, w1, w2):
    """norm -> gemm -> activation -> gemm (an MLP block)."""
    h = hkjit.rms_norm(x, w_norm, 1e-6)
    return hkjit.gemm(hkjit.silu_and_mul(hkjit.gemm(h, w1)), w2)


def block_reference(x, w_norm, w1, w2):
    xd = x.double()
    h = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w_norm.double()).to(BF).double()
    u = (h @ w1.double()).to(BF).double()
    d = u.shape[-1] // 2
    a = (torch.nn.functional.silu(u[:, :d]) * u[:, d:]).to(BF).double()
    return a @ w2.double()


def block_inputs(rows=200, hidden=512, inter=1024):
    return (rand(rows, hidden), (torch.rand(hidden, device="cuda") + 0.5).to(BF), rand(hidden, 2 * inter, scale=0.05),
            rand(inter, hidden, scale=0.05))


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_block_matches_eager(cache_dir, mode):
    torch._dynamo.reset()
    args = block_inputs()
    eager = block(*args)
    compiled = torch.compile(block, fullgraph=True, mode=mode)
    for _ in range(3):                     # reduce-overhead: warm-up, record, replay
        got = compiled(*args).clone()
    assert torch.equal(got, eager), "the compiled graph runs the same kernels"
    assert rel(got, block_reference(*args)) < 2e-2
    fresh = block_inputs()
    assert rel(compiled(*fresh), block_reference(*fresh)) < 2e-2


def test_compiled_attention_trains(cache_dir):
    """Attention's autograd under torch.compile (register_autograd) gives eager hkjit's gradients."""
    import importlib.util
    if importlib.util.find_spec("hkjit.ops._hopper_attention_bwd") is None:
        pytest.skip("no sm_90a attention backward yet (tests/test_frameworks_torch.py runs this on sim:gfx950)")
    torch._dynamo.reset()
    q, k, v = (rand(2, 4, 256, 128, scale=0.5).requires_grad_() for _ in range(3))
    g = rand(2, 4, 256, 128)

    def loss(q, k, v):
        return (hkjit.attention(q, k, v, causal=True).float() * g.float()).sum()
    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(q, k, v), (q, k, v))
    for a, b in zip(got, want):
        assert rel(a, b) < 1e-2


def test_compiled_attention_trains_from_torchs_warm_cache(tmp_path):
    """The same compiled training step in two fresh processes sharing torch's compile cache: the
    second loads the backward graph from disk without tracing it, and must still find the hkjit ops
    that graph calls."""
    import os
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import torch, hkjit
        q, k, v = (torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
        loss = lambda q, k, v: hkjit.attention(q, k, v, causal=True).float().square().sum()
        want = torch.autograd.grad(loss(q, k, v), (q, k, v))
        got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(q, k, v), (q, k, v))
        for a, b in zip(got, want):
            assert ((a.double() - b.double()).norm() / b.double().norm()).item() < 1e-2
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "HKJIT_CACHE_DIR": str(tmp_path / "hkjit")}
    for run in ("cold", "warm"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, f"{run} run: {proc.stderr[-3000:]}"


def test_cuda_graph_capture_and_replay(cache_dir):
    """gemm (one with a split-K workspace), rms_norm, silu_and_mul and attention captured in one
    CUDA graph after a warm-up, replayed with new inputs copied in: results equal eager calls."""
    x, wn = rand(256, 1024), (torch.rand(1024, device="cuda") + 0.5).to(BF)
    w1, w2 = rand(1024, 2048, scale=0.05), rand(1024, 512, scale=0.05)
    a, b = rand(128, 4096, scale=0.1), rand(4096, 128, scale=0.1)
    q, k, v = (rand(1, 4, 256, 128, scale=0.5) for _ in range(3))

    def step():
        h = hkjit.silu_and_mul(hkjit.gemm(hkjit.rms_norm(x, wn), w1))
        return hkjit.gemm(h, w2), hkjit.gemm(a, b, split_k=4), hkjit.attention(q, k, v)
    step()                                              # warm-up: compile, load, bind every signature
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()                                          # the capture stream's workspaces, outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for _ in range(2):
        for t in (x, a, b, q, k, v):
            t.copy_(torch.randn_like(t, dtype=torch.float32).to(t.dtype) * 0.5)
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        mlp, split, attn = step()
        assert torch.equal(outs[0], mlp) and torch.equal(outs[1], split) and torch.equal(outs[2], attn)
        assert rel(outs[1], a.double() @ b.double()) < 1e-2


def test_first_call_inside_capture_is_refused(cache_dir):
    x = rand(64, 384)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(GraphCaptureError, match="warm-up"):
        with torch.cuda.graph(graph):
            hkjit.rms_norm(x, torch.ones(384, device="cuda", dtype=BF))
    torch.cuda.synchronize()
    assert torch.isfinite(hkjit.rms_norm(x, torch.ones(384, device="cuda", dtype=BF))).all()


# --- jax.jit ------------------------------------------------------------------------------------
def _jax():
    jax = pytest.importorskip("jax")
    if jax.devices()[0].platform != "gpu":
        pytest.skip("JAX has no GPU backend here")
    return jax


def test_jax_jit_ops_match_float64(cache_dir):
    jax = _jax()
    jnp = jax.numpy
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 512)).astype(np.float32)
    w = (rng.random(512) + 0.5).astype(np.float32)
    a = (rng.standard_normal((200, 256)) * 0.1).astype(np.float32)
    b = (rng.standard_normal((256, 96)) * 0.1).astype(np.float32)

    @jax.jit
    def f(x, w, a, b):
        n = hkjit.rms_norm(x, w, 1e-5)
        s = hkjit.silu_and_mul(x.astype(jnp.bfloat16))
        c = hkjit.gemm(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), out_dtype="float32", alpha=2.0)
        return n, s, c
    n, s, c = f(x, w, a, b)
    lowered = f.lower(x, w, a, b).as_text()
    assert "hkjit_launch" in lowered
    xd = x.astype(np.float64)
    ref_n = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-5) * w
    xb = np.asarray(jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32), np.float64)
    ref_s = xb[:, :256] / (1 + np.exp(-xb[:, :256])) * xb[:, 256:]
    ab = [np.asarray(jnp.asarray(t).astype(jnp.bfloat16).astype(jnp.float32), np.float64) for t in (a, b)]
    ref_c = 2.0 * ab[0] @ ab[1]
    for got, ref, tol in ((n, ref_n, 1e-5), (s, ref_s, 1e-2), (c, ref_c, 1e-5)):
        got = np.asarray(jnp.asarray(got).astype(jnp.float32), np.float64)
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < tol
    fresh = rng.standard_normal((300, 512)).astype(np.float32)
    n2 = np.asarray(f(fresh, w, a, b)[0], np.float64)
    fd = fresh.astype(np.float64)
    ref2 = fd / np.sqrt((fd ** 2).mean(-1, keepdims=True) + 1e-5) * w
    assert np.linalg.norm(n2 - ref2) / np.linalg.norm(ref2) < 1e-5


def test_jax_jit_attention_and_workspace(cache_dir):
    jax = _jax()
    jnp = jax.numpy
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 128, 64)).astype(np.float32) * 0.5 for _ in range(3))

    @jax.jit
    def f(q, k, v, a, b):
        o = hkjit.attention(*(t.astype(jnp.bfloat16) for t in (q, k, v)), causal=True)
        return o, hkjit.gemm(a, b, out_dtype="float32", split_k=4)
    a = (rng.standard_normal((128, 4096)) * 0.1).astype(np.float32)
    b = (rng.standard_normal((4096, 128)) * 0.1).astype(np.float32)
    o, c = f(q, k, v, jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16))
    qd, kd, vd = (np.asarray(jnp.asarray(t).astype(jnp.bfloat16).astype(jnp.float32), np.float64) for t in (q, k, v))
    s = qd @ kd.transpose(0, 1, 3, 2) / 8.0
    s = np.where(np.tril(np.ones((128, 128), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ vd
    got = np.asarray(jnp.asarray(o).astype(jnp.float32), np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2
    ab = [np.asarray(jnp.asarray(t, jnp.bfloat16).astype(jnp.float32), np.float64) for t in (a, b)]
    ref_c = ab[0] @ ab[1]
    assert np.linalg.norm(np.asarray(c, np.float64) - ref_c) / np.linalg.norm(ref_c) < 1e-5


def test_jax_jit_attention_backward_scratch(cache_dir):
    """The sm_90a backward inside jax.jit: its semaphores (zeroed) and dQ accumulators (scratch)
    are two more XLA results, the dq the dK/dV kernel writes a result aliased to its operand; the
    gradients equal an eager torch call's bit for bit, and a read of dq inside the jitted function
    sees the dK/dV kernel's writes."""
    jax = _jax()
    jnp = jax.numpy
    rng = np.random.default_rng(9)
    q, do = (rng.standard_normal((1, 4, 300, 128)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, 200, 128)).astype(np.float32) for _ in range(2))

    @jax.jit
    def grads(q, k, v, do):
        o, lse = hkjit.attention(q, k, v, causal=True, return_lse=True)
        dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=True)
        return dq, dk, dv, dq.astype(jnp.float32).sum(-1)
    *ours, row_sums = grads(*(jnp.asarray(t, jnp.bfloat16) for t in (q, k, v, do)))
    text = grads.lower(*(jnp.asarray(t, jnp.bfloat16) for t in (q, k, v, do))).as_text()
    assert "hkjit_launch" in text and "output_operand_aliases" in text
    tq, tk, tv, tdo = (torch.from_numpy(t).to("cuda", BF) for t in (q, k, v, do))
    o, lse = hkjit.attention(tq, tk, tv, causal=True, return_lse=True)
    want = hkjit.attention_backward(tdo, tq, tk, tv, o, lse, causal=True)
    for name, a, b in zip(("dq", "dk", "dv"), ours, want):
        # dq: the dK/dV call's result aliased to the DQ call's (hkjit/frameworks/jax_ffi.py)
        assert np.array_equal(np.asarray(jnp.asarray(a).astype(jnp.float32)), b.float().cpu().numpy()), name
    sums = want[0].float().sum(-1).cpu().numpy()
    assert np.allclose(np.asarray(row_sums), sums, rtol=1e-4, atol=1e-3), "a read of dq inside jax.jit"
