"""hkjit.gemm on a real NVIDIA Hopper GPU: correctness from torch, CuPy, JAX and NumPy.
Skipped where no CUDA GPU is present (CI); run on the device machine before calling GPU work done."""
import numpy as np
import pytest

from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402

SHAPES = [(256, 256, 256), (1000, 1000, 1000), (1, 4096, 4096), (4097, 257, 63), (1, 1, 1), (129, 65, 17),
          (2048, 512, 4096)]


def rel_err(out, ref):
    import torch
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the output: an element was never written"
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def _operand(torch, rows, cols, dtype, layout):
    if layout == "row":
        return torch.randn(rows, cols, device="cuda", dtype=dtype)
    return torch.randn(cols, rows, device="cuda", dtype=dtype).t()  # a transposed view, no copy


@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("a_layout,b_layout", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")])
def test_torch_bf16_layouts(M, N, K, a_layout, b_layout):
    torch = pytest.importorskip("torch")
    a = _operand(torch, M, K, torch.bfloat16, a_layout)
    b = _operand(torch, K, N, torch.bfloat16, b_layout)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    hkjit.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert rel_err(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("dtype,out_dtype", [("float16", "float16"), ("float16", "float32"), ("bfloat16", "float32"),
                                             ("bfloat16", "float16")])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (4097, 257, 63), (64, 8192, 512)])
def test_torch_dtypes_and_allocated_output(dtype, out_dtype, M, N, K):
    torch = pytest.importorskip("torch")
    a = torch.randn(M, K, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(K, N, device="cuda", dtype=getattr(torch, dtype))
    out = hkjit.gemm(a, b, out_dtype=out_dtype)
    assert isinstance(out, torch.Tensor) and out.dtype == getattr(torch, out_dtype) and out.shape == (M, N)
    assert out.device == a.device
    assert rel_err(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("M,N,K", [(512, 384, 256), (1000, 999, 77)])
def test_epilogue_bias_alpha_beta(M, N, K):
    torch = pytest.importorskip("torch")
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(M, N, device="cuda", dtype=torch.float32)
    bias = torch.randn(N, device="cuda", dtype=torch.float32)
    out = hkjit.gemm(a, b, c=c, bias=bias, alpha=0.5, beta=-2.0, out_dtype="float32")
    ref = 0.5 * (a.float() @ b.float()) - 2.0 * c + bias
    assert rel_err(out, ref) < 1e-2


def test_runs_on_torch_current_stream():
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.cuda.stream(s):
        out = hkjit.gemm(a, b)
        ref = a.float() @ b.float()
    s.synchronize()
    assert rel_err(out, ref) < 1e-2


def test_repeat_calls_stable():
    """Same inputs twice: the same bits (a moving result would be a race)."""
    torch = pytest.importorskip("torch")
    a = torch.randn(1500, 700, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(700, 900, device="cuda", dtype=torch.bfloat16)
    first = hkjit.gemm(a, b)
    for _ in range(3):
        assert torch.equal(hkjit.gemm(a, b), first)


def test_cupy_fp16():
    cupy = pytest.importorskip("cupy")
    a = cupy.random.standard_normal((1000, 300)).astype(cupy.float16)
    b = cupy.random.standard_normal((300, 700)).astype(cupy.float16)
    out = hkjit.gemm(a, b)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float16
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
    err = float(cupy.linalg.norm(out.astype(cupy.float64) - ref) / cupy.linalg.norm(ref))
    assert err < 1e-2


def test_jax_bf16():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    ka, kb = jax.random.split(jax.random.PRNGKey(np.random.default_rng().integers(1 << 30)))
    a = jax.random.normal(ka, (777, 300), dtype=jnp.bfloat16)
    b = jax.random.normal(kb, (300, 501), dtype=jnp.bfloat16)
    out = hkjit.gemm(a, b)
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16 and out.shape == (777, 501)
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    got = np.asarray(out, np.float64)
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_numpy_roundtrip(dtype):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        npdt = ml_dtypes.bfloat16
    else:
        npdt = np.float16
    rng = np.random.default_rng()
    a = rng.standard_normal((300, 200)).astype(npdt)
    b = rng.standard_normal((500, 200)).astype(npdt).T  # transposed view
    out = hkjit.gemm(a, b, out_dtype="float32")
    assert isinstance(out, np.ndarray) and out.shape == (300, 500) and out.dtype == np.float32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


def test_mixed_host_and_gpu_is_refused():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(hkjit.DeviceError):
        hkjit.gemm(a, torch.randn(64, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("M,N,K,split_k", [(128, 4096, 4096, 4), (64, 1000, 3000, 3), (77, 256, 8192, 8)])
def test_split_k_is_bitwise_reproducible(M, N, K, split_k):
    """The K-slices are summed in slice order whatever order they finish in: repeated calls, and
    calls racing other work on the GPU, give the same bits (fp32 output, so no rounding to bf16
    hides a difference)."""
    torch = pytest.importorskip("torch")
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    first = hkjit.gemm(a, b, out_dtype="float32", split_k=split_k)
    assert rel_err(first, a.double() @ b.double()) < 1e-5
    noise = torch.randn(2048, 2048, device="cuda")
    for i in range(30):
        if i % 3 == 0:
            noise @ noise                                 # other work in flight shifts the arrival order
        out = torch.full((M, N), float("nan"), device="cuda")
        hkjit.gemm(a, b, out=out, split_k=split_k)
        assert torch.equal(out, first), f"call {i} differs from the first: split-K order depends on timing"
