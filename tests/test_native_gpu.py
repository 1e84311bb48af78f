"""The native repeat-call path on a Hopper GPU: every op gives the same bits natively as on the
Python path (same kernel, same inputs), for the same tensors, new tensors (patched pointers) and
allocated outputs; a changed tensor re-binds; launch errors read as the Python backend's; the
driver constants of the ctypes backend are cuda.h's. Skipped where no CUDA GPU is present (CI
runs tests/test_native.py)."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402
from hkjit import launch, native  # noqa: E402
from hkjit.bench.jit_overhead import cuda_randn, rope_angles  # noqa: E402
from hkjit.errors import LaunchError  # noqa: E402

torch = pytest.importorskip("torch")


r, _angles = cuda_randn, rope_angles


# name -> inputs(): (args, kwargs) of hkjit.<name> (outputs allocated by the call)
CASES = {
    "gemm": lambda: ((r(64, 96), r(96, 80)), {}),
    "rms_norm": lambda: ((r(33, 512), r(512)), {"eps": 1e-6}),
    "add_rms_norm": lambda: ((r(17, 256), r(17, 256), r(256)), {"eps": 1e-6}),
    "layer_norm": lambda: ((r(9, 384), r(384), r(384)), {"eps": 1e-5}),
    "dropout_add_layer_norm": lambda: ((r(12, 256), r(12, 256), r(256), r(256), 0.25), {"eps": 1e-5, "seed": 7}),
    "rope": lambda: ((r(1, 4, 16, 64), *_angles(16, 64)), {}),
    "rope_qk": lambda: ((r(1, 4, 16, 64), r(1, 2, 16, 64), *_angles(16, 64)), {}),
    "silu": lambda: ((r(16, 384),), {}),
    "gelu": lambda: ((r(16, 384),), {}),
    "gelu_tanh": lambda: ((r(16, 384),), {}),
    "relu": lambda: ((r(16, 384),), {}),
    "tanh": lambda: ((r(16, 384),), {}),
    "silu_and_mul": lambda: ((r(16, 256),), {}),
    "gelu_and_mul": lambda: ((r(16, 256),), {}),
    "softmax": lambda: ((r(16, 300),), {}),
    "topk": lambda: ((r(16, 1000, dtype=torch.float32), 8), {}),
    "attention": lambda: ((r(1, 2, 128, 64), r(1, 2, 128, 64), r(1, 2, 128, 64)), {"causal": True}),
}


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(_tuple(a), _tuple(b)))


def _python(fn, args, kwargs):
    launch.use_native(False)
    try:
        return fn(*args, **kwargs)
    finally:
        launch.use_native(True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_natively_gives_the_python_paths_bits(cache_dir, name):
    fn = getattr(hkjit, name)
    args, kwargs = CASES[name]()
    want = _python(fn, args, kwargs)
    for _ in range(2):
        fn(*args, **kwargs)                  # first call (Python), second (Python, then registered)
    before = launch.native_stats()
    got = fn(*args, **kwargs)
    after = launch.native_stats()
    torch.cuda.synchronize()
    assert _same(got, want)
    assert after is not None and after["hits"] == before["hits"] + 1, (name, native.why_not, before, after)
    new_args, new_kwargs = CASES[name]()     # new tensors, same properties: pointers patched
    got = fn(*new_args, **new_kwargs)
    assert launch.native_stats()["hits"] == after["hits"] + 1
    assert _same(got, _python(fn, new_args, new_kwargs))


def test_out_in_place_and_parameters():
    x, w = r(40, 1024), torch.nn.Parameter(r(1024))
    want = _python(hkjit.rms_norm, (x.clone(), w), {"eps": 1e-5})
    out = torch.full_like(x, float("nan"))
    for _ in range(3):
        assert hkjit.rms_norm(x, w, 1e-5, out=out) is out
    assert torch.equal(out, want)
    y = x.clone()
    for _ in range(3):
        y.copy_(x)
        assert hkjit.rms_norm(y, w, 1e-5, out=y) is y          # in place
    assert torch.equal(y, want)
    a, b, c = r(128, 64), r(64, 256), torch.empty(128, 256, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        hkjit.gemm(a, b, out=c)
    assert torch.equal(c, _python(hkjit.gemm, (a, b), {}))


def test_a_changed_tensor_rebinds():
    x, w = r(64, 512), r(512)
    for _ in range(3):
        hkjit.rms_norm(x, w)
    hits = launch.native_stats()["hits"]
    for changed in (r(64, 640), r(65, 512), r(64, 1024)[:, :512], r(64 * 512 + 1)[1:].view(64, 512),
                    x.float(), x.t().contiguous().t()[:, :]):
        ww = w if changed.shape[-1] == 512 and changed.dtype == w.dtype else r(changed.shape[-1]).to(changed.dtype)
        try:
            got = hkjit.rms_norm(changed, ww)
        except hkjit.InvalidArgumentError:
            continue                          # a layout the op refuses is refused on every path
        ref = torch.nn.functional.rms_norm(changed.float(), (changed.shape[-1],), ww.float(), 1e-6)
        assert ((got.float() - ref).norm() / ref.norm()).item() < 1e-2
    assert launch.native_stats()["hits"] == hits      # none of them reused the first entry's block


def test_runs_on_the_current_stream():
    s = torch.cuda.Stream()
    a = r(4096, 4096)
    w = r(4096)
    for _ in range(3):
        hkjit.rms_norm(a, w)
    with torch.cuda.stream(s):
        x = (a @ a)[:, :4096] * 1e-3          # written on s by a long kernel
        got = hkjit.rms_norm(x, w)            # must run after it, on s
    s.synchronize()
    ref = torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), 1e-6)
    assert ((got.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_launch_errors_read_as_the_python_backends():
    from hkjit.runtime import cuda
    x, w = r(8, 256), r(256)
    for _ in range(3):
        hkjit.rms_norm(x, w)
    (sig, launcher), = [(s, l) for s, l in launch.launchers() if s[0] == "rms_norm" and s[1][0][1] == (8, 256)]
    bad = launch.Launcher(launcher.op, launcher.kernel, launcher.plan, launcher.binding, launcher.device)
    bad.block = (4096, 1, 1)                  # more threads than a block may have
    packed = launcher.kernel.pack(launcher.plan.fill(**launcher.binding.args(
        dict(zip(launcher.op.array_names, (x.data_ptr(), w.data_ptr(), x.data_ptr())), workspace=0), (1e-6,))))
    with pytest.raises(LaunchError) as python_error:
        launcher.kernel.launch_packed(launcher.plan.grid, bad.block, launcher.plan.dynamic_smem, packed)
    table = native.table(native.extension(), torch, lambda *a: None,
                         native.driver_functions(cuda.function_addresses()))
    assert launch.remember_native(table, launcher.op, (x, w, x), (), (1e-6,), (x.data_ptr(), w.data_ptr(),
                                                                           x.data_ptr()), bad, {})
    with pytest.raises(LaunchError) as native_error:
        table.call(launcher.op, (x, w, x), (1e-6,), (), None, None, {})
    assert str(native_error.value) == str(python_error.value)
    assert "CUDA_ERROR_INVALID_VALUE" in str(native_error.value)


def test_driver_constants_are_cuda_h():
    from hkjit.runtime import cuda
    cu = pytest.importorskip("cuda.bindings.driver")
    a = cu.CUdevice_attribute
    assert (cuda.ATTR_CC_MAJOR, cuda.ATTR_CC_MINOR, cuda.ATTR_MULTIPROCESSOR_COUNT, cuda.ATTR_MAX_SMEM_OPTIN) == (
        a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    assert cuda.FUNC_ATTR_MAX_DYNAMIC_SMEM == cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    t = cu.CUtensorMapDataType
    assert (cuda.TMAP_FLOAT16, cuda.TMAP_BFLOAT16) == (t.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                                       t.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)
    assert cuda.TMAP_L2_PROMOTION_256B == cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B


def test_python_fallback_gives_the_same_bits(tmp_path):
    """HKJIT_NATIVE=0 in a fresh process: the Python path only, the same results."""
    x, w = r(33, 512), r(512)
    for _ in range(3):
        want = hkjit.rms_norm(x, w)
    torch.save((x.cpu(), w.cpu(), want.cpu()), tmp_path / "io.pt")
    code = f"""
        import torch, hkjit
        from hkjit import launch, native
        x, w, want = (t.cuda() for t in torch.load({str(tmp_path / 'io.pt')!r}))
        for _ in range(3):
            got = hkjit.rms_norm(x, w)
        assert torch.equal(got, want)
        assert launch.call is launch._python_call and launch.native_stats() is None
        assert native.why_not == "HKJIT_NATIVE=0", native.why_not
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, "HKJIT_NATIVE": "0"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
