"""The native repeat-call path (hkjit/native) without a GPU: the extension is built with the
machine's C compiler and run over CPU torch tensors in test mode, where the launch itself is
recorded instead of made (the only stand-in: the kernel handle and cuLaunchKernel at the C
boundary). Keys, pointer patching, repacks, allocation and the fallback are the real code; every
recorded argument block is compared byte for byte with the op's own Python fill. The GPU half is
tests/test_native_gpu.py."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from hkjit import interop, launch, native, targets  # noqa: E402
from hkjit.errors import InvalidArgumentError  # noqa: E402
from hkjit.ops.activations import SILU, SILU_AND_MUL  # noqa: E402
from hkjit.ops.gemm import GEMM  # noqa: E402
from hkjit.ops.norms import ADD_RMS_NORM, LAYER_NORM  # noqa: E402
from hkjit.ops.rms_norm import RMS_NORM  # noqa: E402
from hkjit.ops.rope import ROPE  # noqa: E402
from hkjit.ops.softmax import SOFTMAX  # noqa: E402
from hkjit.ops.topk import TOPK  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"),
                                reason="torch has no DLPack C exchange table (torch 2.11+)")

EXT = native.extension()
needs_ext = pytest.mark.skipif(EXT is None, reason=f"the native extension does not build here: {native.why_not}")


class Device:
    """What bind and plan read of a device (its target, SM count), for CPU tensors."""
    kind, index, context, multiprocessors = "cuda", 0, 0xC0_17E7, 132

    def __init__(self, target):
        self.target = targets.parse(target)


class Kernel:
    """The kernel handle: the one thing that stands in (launches are recorded, not made)."""
    function, name = 0xF00D, "hkjit_test"


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


# (op, make values, scalars, options, target): every kind of argument block an op module writes.
CASES = {
    "rms_norm": (RMS_NORM, lambda: (rand(8, 256), rand(256), rand(8, 256)), (1e-6,), (), "sm_90a"),
    "softmax": (SOFTMAX, lambda: (rand(5, 96), rand(5, 96)), (0.5,), (), "sm_90a"),
    "silu": (SILU, lambda: (rand(4, 200), rand(4, 200)), (), (), "sm_90a"),
    "silu_and_mul": (SILU_AND_MUL, lambda: (rand(6, 128), rand(6, 64)), (), (), "sm_90a"),
    "add_rms_norm": (ADD_RMS_NORM, lambda: (rand(3, 64), rand(3, 64), rand(64), rand(3, 64), rand(3, 64)),
                     (1e-5,), (), "sm_90a"),
    "layer_norm": (LAYER_NORM, lambda: (rand(7, 160), rand(160), rand(160), rand(7, 160)), (1e-5,), (), "sm_90a"),
    "rope": (ROPE, lambda: (rand(1, 2, 16, 64), rand(16, 32), rand(16, 32), None, rand(1, 2, 16, 64)), (),
             (("layout", "bhnd"), ("interleaved", False)), "sm_90a"),
    "topk": (TOPK, lambda: (rand(8, 300), rand(8, 5), torch.empty(8, 5, dtype=torch.int64)), (), (("k", 5),),
             "sm_90a"),
    "gemm": (GEMM, lambda: (rand(16, 32, dtype=torch.bfloat16), rand(32, 24, dtype=torch.bfloat16),
                            rand(16, 24, dtype=torch.bfloat16), None, None), (1.0, 0.0), (), "gfx950"),
}


@pytest.fixture
def slow():
    """What a table hands to the Python path."""
    return []


@pytest.fixture
def table(slow):
    """A table of its own, in test mode (launches recorded, not made)."""
    def python_path(*args):
        slow.append(args)
        return "python path"
    return native.table(EXT, torch, python_path, None)


def bound(op, values, options, target):
    """The launcher the Python path would make for `values` (real bind and plan)."""
    described = tuple(None if v is None else interop.describe(v) for v in values)
    binding = op.bind(dict(zip(op.array_names, described)), dict(options), Device(target))
    plan = op.plan(Device(target).target, **binding.request)
    return launch.Launcher(op, Kernel(), plan, binding, Device(target))


def ptrs_of(values):
    return tuple(0 if v is None else v.data_ptr() for v in values)


def python_block(launcher, ptrs, scalars):
    """The block the Python path packs for these pointers and scalars (the reference)."""
    names = launcher.op.array_names
    return bytes(launcher.plan.fill(**launcher.binding.args(dict(zip(names, ptrs), workspace=0, scratch=0), scalars)))


def register(table, op, values, scalars, options, target, made=None):
    full = tuple(made.get(i, v) if made else v for i, v in enumerate(values))
    launcher = bound(op, full, options, target)
    assert launch.remember_native(table, op, values, options, scalars, ptrs_of(full), launcher, made or {})
    return launcher


@needs_ext
@pytest.mark.parametrize("name", sorted(CASES))
def test_new_tensors_get_the_python_fill_byte_for_byte(table, slow, name):
    op, make, scalars, options, target = CASES[name]
    first = make()
    launcher = register(table, op, first, scalars, options, target)
    assert launcher.native and launcher.native[1], "no pointer of this op was found in its block"
    for _ in range(3):                      # fresh tensors, same properties: pointers patched in place
        values = make()
        before = table.stats()
        result = table.call(op, values, scalars, options, None, None, {})
        after = table.stats()
        assert after["hits"] == before["hits"] + 1 and after["repacks"] == before["repacks"] and not slow
        rec = table.last_launch()
        assert rec["args"] == python_block(launcher, ptrs_of(values), scalars)
        assert rec["function"] == Kernel.function and rec["grid"] == tuple(launcher.plan.grid)
        assert rec["block"] == launcher.block and rec["smem"] == launcher.plan.dynamic_smem
        returns = [values[op.array_names.index(n)] for n in launcher.binding.returns]
        assert (result is returns[0]) if len(returns) == 1 else all(a is b for a, b in zip(result, returns))


@needs_ext
def test_a_changed_tensor_never_reuses_a_block(table, slow):
    op, make, scalars, options, target = CASES["rms_norm"]
    x, w, out = make()
    register(table, op, (x, w, out), scalars, options, target)
    big = rand(8, 260)
    changed = {
        "shape": (rand(8, 128), rand(128), rand(8, 128)),
        "rows": (rand(9, 256), w, rand(9, 256)),
        "row stride": (big[:, :256], w, out),
        "dtype": (x.to(torch.float16), w.to(torch.float16), out.to(torch.float16)),
        "alignment": (rand(8 * 256 + 1)[1:].view(8, 256), w, out),
        "an absent array": (x, None, out),
        "another type": (x, w, out.numpy()),
        "a device with no DLPack view": (x, w, torch.empty(8, 256, device="meta")),
    }
    for what, values in changed.items():
        n = len(slow)
        assert table.call(op, values, scalars, options, None, None, {}) == "python path", what
        assert len(slow) == n + 1, what
    for what, call in {"options": (op, (x, w, out), scalars, (("x", 1),), None, None, {}),
                       "another op": (SOFTMAX, (x, out), scalars, (), None, None, {}),
                       "device=": (op, (x, w, out), scalars, (), "cuda:1", None, {}),
                       "compiler=": (op, (x, w, out), scalars, (), None, "nvcc", {}),
                       "tile overrides": (op, (x, w, out), scalars, (), None, None, {"vec": 4})}.items():
        assert table.call(*call) == "python path", what
    assert table.stats()["hits"] == 0
    assert table.call(op, (x, w, out), scalars, options, None, None, {}) is out     # the original still hits


@needs_ext
def test_new_scalars_repack_with_the_python_checks(table):
    op, make, scalars, options, target = CASES["rms_norm"]
    values = make()
    launcher = register(table, op, values, scalars, options, target)
    table.call(op, values, (1e-3,), options, None, None, {})
    assert table.stats()["repacks"] == 1
    assert table.last_launch()["args"] == python_block(launcher, ptrs_of(values), (1e-3,))
    table.call(op, values, (1e-3,), options, None, None, {})
    assert table.stats()["repacks"] == 1                     # the block now holds 1e-3
    with pytest.raises(InvalidArgumentError, match=r"rms_norm: eps=-1.0; it must be >= 0"):
        table.call(op, values, (-1.0,), options, None, None, {})
    with pytest.raises(InvalidArgumentError, match=r"rms_norm: eps=nan; give a finite real number"):
        table.call(op, values, (float("nan"),), options, None, None, {})
    with pytest.raises(InvalidArgumentError, match=r"rms_norm: eps=True; give a finite real number"):
        table.call(op, values, (True,), options, None, None, {})
    launches = table.stats()["test_launches"]
    table.call(op, values, (1e-3,), options, None, None, {})  # refused values left the block alone
    assert table.stats()["test_launches"] == launches + 1
    assert table.last_launch()["args"] == python_block(launcher, ptrs_of(values), (1e-3,))


@needs_ext
@pytest.mark.parametrize("mode", [0, 1], ids=["dlpack-allocator", "torch.empty"])
def test_outputs_are_allocated_and_written_natively(table, slow, mode):
    table.set_alloc_mode(mode)
    op, make, scalars, options, target = CASES["topk"]
    x, values_out, indices_out = make()
    launcher = register(table, op, (x, None, None), scalars, options, target, {1: values_out, 2: indices_out})
    results = []
    for _ in range(3):
        got = table.call(op, (x, None, None), scalars, options, None, None, {})
        assert isinstance(got, tuple) and len(got) == 2 and not slow
        v, i = got
        assert v.shape == (8, 5) and v.dtype == torch.float32 and i.dtype == torch.int64 and v.is_contiguous()
        assert table.last_launch()["args"] == python_block(launcher, (x.data_ptr(), v.data_ptr(), i.data_ptr()), ())
        results.append(got)                                  # kept alive: each call gets new memory
    assert len({r[0].data_ptr() for r in results}) == 3


@needs_ext
def test_in_place_and_parameters(table):
    op, make, scalars, options, target = CASES["rms_norm"]
    x, w, _ = make()
    weight = torch.nn.Parameter(w)
    launcher = register(table, op, (x, weight, x), scalars, options, target)
    y = rand(8, 256)
    assert table.call(op, (y, weight, y), scalars, options, None, None, {}) is y
    assert table.last_launch()["args"] == python_block(launcher, (y.data_ptr(), weight.data_ptr(), y.data_ptr()),
                                                       scalars)


class _Block(ctypes.Structure):
    _fields_ = [("a", ctypes.c_void_p), ("a_end", ctypes.c_void_p), ("b_bits", ctypes.c_longlong),
                ("n", ctypes.c_int), ("pad", ctypes.c_int)]


def test_measure_finds_pointer_fields_and_refuses_what_it_cannot_explain():
    """Pointer + constant is patched; a value computed otherwise from a pointer is repacked."""
    def fill(ptrs, scalars):
        a, b = ptrs
        return bytes(_Block(a, a + 4096, b >> 4, 7, 0))
    block, patches, mask = native.measure(fill, (0x7F00_0000_1000, 0x7F00_0000_8000), (), _Block)
    assert block == fill((0x7F00_0000_1000, 0x7F00_0000_8000), ())
    assert mask == 0b01 and sorted(patches) == [(native.PTR, 0, 0, 0), (native.PTR, 0, 8, 4096)]
    assert native.apply(block, patches, {0: 0x7E00_0000_2000}) == fill((0x7E00_0000_2000, 0x7F00_0000_8000), ())

    def refuses(ptrs, scalars):
        if ptrs[0] != 0x7F00_0000_1000:
            raise InvalidArgumentError("no")
        return fill(ptrs, scalars)
    assert native.measure(refuses, (0x7F00_0000_1000, 0x7F00_0000_8000), (), _Block)[2] == 0b00


def _fresh(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


@pytest.mark.parametrize("env,why", [({"HKJIT_NATIVE": "0"}, "HKJIT_NATIVE=0"),
                                     ({"HKJIT_HOST_CC": "/nonexistent/cc"}, "no C compiler")])
def test_without_the_extension_hkjit_stays_python(tmp_path, env, why):
    """Native off, or unbuildable: the extension is None, says why, and the launch path is the Python
    function (every other test in this suite runs that path)."""
    proc = _fresh("""
        import hkjit
        from hkjit import launch, native
        assert native.extension() is None, native.extension()
        print(native.why_not)
        assert launch.call is launch._python_call
        hkjit.build("rms_norm", target="gfx950", rows=4, hidden=64, dtype="float32")
    """, HKJIT_CACHE_DIR=str(tmp_path / "cache"), **env)
    assert proc.returncode == 0, proc.stderr
    assert why in proc.stdout
