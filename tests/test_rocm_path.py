"""hkjit's ROCm path end to end, with no AMD GPU: the real hip-python loads the stand-in
libamdhip64.so and libhiprtc.so of tests/hip_standin (ROCm's ABI; kernels run on hkjit's CDNA
simulator, hiprtc programs are compiled by clang-22 with hiprtc's options), and hkjit runs through
hkjit/runtime/hip.py and the hiprtc driver of hkjit/compiler.py.

Two simulated devices: rocm:0 is gfx942:sramecc+:xnack- (MI300X), rocm:1 gfx950:sramecc+:xnack-
(MI355X). hip-python finds its libraries once per process, so every case runs in a fresh process
(the `case_*` functions below, run by `_run`); a failing case's traceback and the stand-in's own
messages come back in the test's failure. GEMMs are checked against float64 references at small
ragged shapes, outputs NaN-poisoned first, inputs fresh random numbers each run.
"""

import contextlib
import ctypes
import importlib
import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_clang

import hip_standin
from hip_standin.device_array import HipArray, ok as _ok

TESTS = Path(__file__).resolve().parent
try:   # hip-python imports without ROCm: the libraries are opened at the first call
    HAVE_HIP_PYTHON = all(hasattr(importlib.import_module("hip"), m) for m in ("hip", "hiprtc"))
except ImportError:
    HAVE_HIP_PYTHON = False

pytestmark = [
    needs_clang,
    pytest.mark.skipif(not HAVE_HIP_PYTHON, reason="hip-python not installed (pip install 'hkjit[rocm]')"),
    pytest.mark.skipif(hip_standin.c_compiler() is None, reason="no C compiler (cc, gcc, clang-22 or clang) to build the stand-ins"),
]


# --- running a case in a fresh process ----------------------------------------------------------------
@pytest.fixture(scope="session")
def standin_root(tmp_path_factory):
    """The stand-in libraries, built once into a temporary ROCm-like folder."""
    return hip_standin.build(tmp_path_factory.mktemp("rocm"))


@pytest.fixture(scope="module")
def rocm_env(standin_root, tmp_path_factory):
    """Environment of a process that sees two ROCm devices through the stand-ins, compiles with
    hiprtc, and shares one private kernel cache with the module's other cases."""
    root = standin_root
    import hkjit
    pythonpath = [str(TESTS), str(Path(hkjit.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, **hip_standin.environment(root), "PYTHONPATH": os.pathsep.join(p for p in pythonpath if p),
           "HKJIT_CACHE_DIR": str(tmp_path_factory.mktemp("hkjit-cache")), "HKJIT_COMPILER": "hiprtc",
           "HKJIT_DEVICE": "rocm:0"}
    for name in ("HIP_STANDIN_DEVICES", "HIP_STANDIN_MEMORY", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        env.pop(name, None)
    return env


def _run(env, case, **overrides):
    """Run `case_<case>()` of this file in a new process; fail with everything it printed."""
    env = dict(env)
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    try:
        proc = subprocess.run([sys.executable, "-c", f"import test_rocm_path as t; t.case_{case}()"], cwd=TESTS,
                              env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"case_{case} did not finish in {e.timeout:.0f} s.\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}",
                    pytrace=False)
    if proc.returncode != 0:
        how = (f"was killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exited with {proc.returncode}")
        pytest.fail(f"case_{case} {how} in its own process.\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}",
                    pytrace=False)
    return proc.stdout


def test_abi_matches_hip_python(rocm_env):
    _run(rocm_env, "abi")


def test_devices(rocm_env):
    _run(rocm_env, "devices", HKJIT_DEVICE=None)


def test_gemm_from_numpy(rocm_env, tmp_path):
    _run(rocm_env, "gemm_numpy", HKJIT_CACHE_DIR=str(tmp_path / "cache"))   # counts its own compiles


def test_gemm_from_device_pointers(rocm_env):
    _run(rocm_env, "gemm_device_pointers")


def test_rms_norm_from_numpy_and_device_pointers(rocm_env):
    _run(rocm_env, "rms_norm")


def test_invalid_images(rocm_env):
    _run(rocm_env, "invalid_images")


def test_cached_image_the_runtime_rejects_is_rebuilt(rocm_env, tmp_path):
    cache = str(tmp_path / "cache")
    _run(rocm_env, "poison_cache", HKJIT_CACHE_DIR=cache)
    _run(rocm_env, "rebuild_rejected_image", HKJIT_CACHE_DIR=cache)


def test_launch_failures(rocm_env):
    _run(rocm_env, "launch_failures")


def test_out_of_memory(rocm_env):
    _run(rocm_env, "out_of_memory", HIP_STANDIN_MEMORY=str(48 * 1024))


def test_hiprtc_compile_error(rocm_env):
    _run(rocm_env, "compile_error")


def test_hip_python_without_a_hip_runtime(rocm_env, tmp_path):
    """hip-python installed, no usable ROCm: DeviceError for rocm:N, and AMD code still compiles (clang)."""
    _run(rocm_env, "no_runtime", ROCM_PATH=str(tmp_path), LD_LIBRARY_PATH=None, HKJIT_COMPILER=None)


# --- helpers used inside the case processes --------------------------------------------------------------
def _stats():
    from hip_standin import rtc, runtime
    return runtime.STATS, rtc.STATS


def _random(shape, dtype, rng):
    return rng.standard_normal(shape).astype(dtype)


def _check_gemm(out, a, b, *, bias=None, c=None, alpha=1.0, beta=0.0):
    """out against float64 alpha·a@b + beta·c + bias: per element within the output's rounding
    plus fp32 accumulation, and by relative Frobenius error."""
    import ml_dtypes
    eps = {np.dtype(ml_dtypes.bfloat16): 2.0 ** -8, np.dtype(np.float16): 2.0 ** -11,
           np.dtype(np.float32): 2.0 ** -23}[np.dtype(out.dtype)]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if c is not None:
        ref += beta * c.astype(np.float64)
        scale += abs(beta) * np.abs(c.astype(np.float64))
    if bias is not None:
        ref += bias.astype(np.float64)
        scale += np.abs(bias.astype(np.float64))
    got = out.astype(np.float64)
    assert np.isfinite(got).all(), "output has NaN/inf: an element was never written"
    bad = np.abs(got - ref) > eps * np.abs(ref) + 1e-5 * scale + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} elements off, first at {np.argwhere(bad)[0]}"
    assert np.linalg.norm(got - ref) <= 1e-2 * np.linalg.norm(ref)


# --- the cases (each runs in its own process, in the environment `rocm_env` sets up) ------------------------
def case_abi():
    """What the stand-in's C code puts where is what hip-python reads there: every filled field of
    hipDeviceProp_tR0600 and the error codes. And hip-python really loaded the stand-ins."""
    from hip import hip, hiprtc
    _ok(hip.hipGetDeviceCount())
    _ok(hiprtc.hiprtcVersion())
    from hkjit.compiler import _loaded_library
    root = Path(os.environ["ROCM_PATH"]) / "lib"
    assert _loaded_library("libamdhip64") == str(root / "libamdhip64.so"), _loaded_library("libamdhip64")
    assert _loaded_library("libhiprtc") == str(root / "libhiprtc.so"), _loaded_library("libhiprtc")

    lib = ctypes.CDLL(str(root / "libamdhip64.so"))   # the same handle hip-python holds

    class Field(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("offset", ctypes.c_size_t), ("size", ctypes.c_size_t)]

    class Code(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_int), ("text", ctypes.c_char_p)]

    props = hip.hipDeviceProp_t()
    assert hip.hipDeviceProp_t.c_sizeof(props) == ctypes.c_size_t.in_dll(lib, "hip_standin_prop_size").value
    raw = (ctypes.c_uint8 * hip.hipDeviceProp_t.c_sizeof(props)).from_address(props.as_c_void_p().value)
    fields = (Field * 64).in_dll(lib, "hip_standin_prop_fields")
    checked = 0
    for f in fields:
        if not f.name:
            break
        name = f.name.decode()
        ctypes.memset(raw, 0, len(raw))
        if f.size == 256:                                   # char[256]
            value = b"gfx950:sramecc+:xnack-"
            ctypes.memmove(ctypes.addressof(raw) + f.offset, value, len(value))
            got = getattr(props, name)
            assert (got.encode() if isinstance(got, str) else bytes(got).rstrip(b"\0")) == value, name
        else:
            count = f.size // 4 if f.size in (12,) else 1
            width = f.size // count
            values = [0x1234567 + 0x10101 * i for i in range(count)]
            for i, v in enumerate(values):
                ctypes.memmove(ctypes.addressof(raw) + f.offset + i * width, v.to_bytes(width, "little"), width)
            got = getattr(props, name)
            assert (list(got) if count > 1 else got) == (values if count > 1 else values[0]), (name, got)
        checked += 1
    assert checked >= 30

    for table, enum in (("hip_standin_error_codes", hip.hipError_t),):
        for code in (Code * 64).in_dll(lib, table):
            if not code.name:
                break
            assert int(getattr(enum, code.name.decode())) == code.value, code.name
    rtc_lib = ctypes.CDLL(str(root / "libhiprtc.so"))

    class RtcCode(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_int)]

    for code in (RtcCode * 16).in_dll(rtc_lib, "hiprtc_standin_result_codes"):
        if not code.name:
            break
        assert int(getattr(hiprtc.hiprtcResult, code.name.decode())) == code.value, code.name
    assert int(hip.HIP_LAUNCH_PARAM_BUFFER_POINTER) == 1 and int(hip.HIP_LAUNCH_PARAM_END) == 3


def case_devices():
    """Both devices through hkjit.runtime (HKJIT_DEVICE unset: the first ROCm GPU is the default),
    their targets from gcnArchName, and `hkjit info`."""
    from hkjit import cli, runtime
    from hkjit.errors import DeviceError
    assert runtime.gpu_count("rocm") == 2
    dev0, dev1 = runtime.default_device(), runtime.get("rocm", 1)
    assert (dev0.kind, dev0.index) == ("rocm", 0)
    assert dev0.target.id == "gfx942:sramecc+:xnack-" and dev0.multiprocessors == 304
    assert dev1.target.id == "gfx950:sramecc+:xnack-" and dev1.multiprocessors == 256
    assert "MI355X" in dev1.name
    with pytest.raises(DeviceError, match="does not exist"):
        runtime.get("rocm", 2)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["info"]) == 0
    text = out.getvalue()
    assert "rocm:0" in text and "rocm:1" in text and "gfx950:sramecc+:xnack-" in text, text
    assert re.search(r"hiprtc +hiprtc \d+\.\d+", text), text


def case_gemm_numpy():
    """hkjit.gemm from NumPy arrays on rocm:0 (HKJIT_DEVICE) and rocm:1 (device=): dtypes, a
    transposed operand and the epilogue, each kernel compiled by hiprtc and launched through HIP."""
    import ml_dtypes
    import hkjit
    from hip import hip
    from hkjit import cache
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng()
    _ok(hip.hipSetDevice(0))
    launches = 0
    # ragged shapes; (M, N, K, in dtype, out dtype, B transposed, epilogue, device)
    cases = [(37, 50, 29, bf16, np.float32, False, False, None),
             (100, 72, 96, np.float16, np.float16, True, False, None),
             (65, 128, 40, bf16, bf16, False, True, None),
             (53, 36, 70, bf16, np.float32, False, False, "rocm:1")]
    for m, n, k, dt, odt, b_t, epilogue, device in cases:
        a = _random((m, k), dt, rng)
        b = _random((n, k), dt, rng).T if b_t else _random((k, n), dt, rng)
        out = np.full((m, n), np.nan, odt)
        kw = {}
        if epilogue:
            kw = dict(bias=_random((n,), odt, rng), c=_random((m, n), odt, rng), alpha=0.75, beta=-0.5)
        got = hkjit.gemm(a, b, out=out, device=device, **kw)
        assert got is out
        launches += 1
        _check_gemm(out, a, b, **kw)
    runtime_stats, rtc_stats = _stats()
    assert runtime_stats["launches"] == {0: 3, 1: 1}, runtime_stats
    assert rtc_stats["compiled"] == 4 and rtc_stats["destroyed"] == rtc_stats["created"], rtc_stats
    assert _ok(hip.hipGetDevice()) == 0, "hkjit left another device current"
    entries = cache.default_cache().entries()
    assert entries and all(e.meta["compiler"].startswith("hiprtc ") for e in entries), [e.meta for e in entries]
    assert {e.meta["target"] for e in entries} == {"gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-"}


def case_gemm_device_pointers():
    """hkjit.gemm on hipMalloc'd buffers handed over through DLPack, on device 0 and device 1,
    whichever device the caller has current (and left current afterwards)."""
    import ml_dtypes
    import hkjit
    from hip import hip
    rng = np.random.default_rng()
    for device, current in ((0, 0), (1, 0), (0, 1)):
        _ok(hip.hipSetDevice(current))
        m, n, k = (48, 40, 72) if device == 0 else (70, 24, 56)
        a = _random((m, k), ml_dtypes.bfloat16, rng)
        b = _random((k, n), ml_dtypes.bfloat16, rng)
        A, B = HipArray(a, device), HipArray(b, device)
        O = HipArray(np.full((m, n), np.nan, np.float32), device)
        before = dict(_stats()[0]["launches"])
        assert hkjit.gemm(A, B, out=O) is O
        assert _stats()[0]["launches"].get(device, 0) == before.get(device, 0) + 1
        assert _ok(hip.hipGetDevice()) == current, "hkjit changed the caller's current device"
        _ok(hip.hipDeviceSynchronize())
        _check_gemm(O.numpy(), a, b)
        for x in (A, B, O):
            _ok(hip.hipFree(x.ptr))


def case_rms_norm():
    """hkjit.rms_norm through HIP: NumPy rows on rocm:0 and rocm:1, and hipMalloc'd rows (DLPack)
    written in place, each against a float64 reference."""
    import hkjit
    from hip import hip
    rng = np.random.default_rng()

    def reference(x, w, eps):
        x64 = x.astype(np.float64)
        return x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * w.astype(np.float64)
    for shape, dt, device in (((5, 300), np.float16, None), ((3, 129), np.float32, "rocm:1")):
        x = _random(shape, dt, rng)
        w = (rng.random(shape[-1]) + 0.5).astype(dt)
        out = np.full(shape, np.nan, dt)
        assert hkjit.rms_norm(x, w, 1e-5, out=out, device=device) is out
        ref = reference(x, w, 1e-5)
        assert np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref) < 2e-3
    x = _random((4, 200), np.float32, rng)
    w = (rng.random(200) + 0.5).astype(np.float32)
    X, W = HipArray(np.array(x), 1), HipArray(w, 1)
    assert hkjit.rms_norm(X, W, 1e-5, out=X) is X              # in place on device 1
    _ok(hip.hipDeviceSynchronize())
    ref = reference(x, w, 1e-5)
    assert np.linalg.norm(X.numpy() - ref) / np.linalg.norm(ref) < 1e-5
    for a in (X, W):
        _ok(hip.hipFree(a.ptr))


def case_invalid_images():
    """Code objects the runtime rejects raise InvalidImageError (a LaunchError): not a code
    object, built for the other device's chip, a kernel the object does not have."""
    from hkjit import compiler, runtime, targets
    from hkjit.errors import LaunchError
    from hkjit.runtime.hip import InvalidImageError
    dev0 = runtime.get("rocm", 0)
    with pytest.raises(InvalidImageError, match="hipErrorInvalidImage"):
        dev0.load(b"this is not an AMDGPU code object, just bytes" * 4, "k")
    src = 'extern "C" __global__ void k(float* x) { x[__builtin_amdgcn_workitem_id_x()] = 2.0f; }\n'
    hiprtc = compiler.find_compiler(targets.parse("gfx950"), "hiprtc")
    gfx950 = hiprtc.compile(src, Path("k.hip"), runtime.get("rocm", 1).target, [], "k").code
    with pytest.raises(InvalidImageError, match="hipErrorNoBinaryForGpu") as e:
        dev0.load(gfx950, "k")
    assert isinstance(e.value, LaunchError) and "rocm:0" in str(e.value)
    with pytest.raises(InvalidImageError, match="hipErrorNotFound"):
        runtime.get("rocm", 1).load(gfx950, "not_there")
    assert runtime.get("rocm", 1).load(gfx950, "k").name == "k"
    assert _stats()[0]["rejected_images"] == 1       # the chip mismatch (bytes that are no ELF stop in C)


_REJECT_SHAPE = (40, 24, 32)


def case_poison_cache():
    """Compile and run a GEMM on rocm:0, then replace its cache entry (valid checksum) with a code
    object for the other chip: an entry the HIP runtime will refuse to load."""
    import ml_dtypes
    import hkjit
    from hkjit import compiler, runtime
    from hkjit import cache as cache_mod
    m, n, k = _REJECT_SHAPE
    rng = np.random.default_rng()
    hkjit.gemm(_random((m, k), ml_dtypes.bfloat16, rng), _random((k, n), ml_dtypes.bfloat16, rng))
    cache = cache_mod.default_cache()
    (entry,) = cache.entries()
    src = 'extern "C" __global__ void hkjit_gemm(float* x) { x[0] = 1.0f; }\n'
    wrong = compiler.find_compiler(runtime.get("rocm", 1).target).compile(
        src, Path("wrong.hip"), runtime.get("rocm", 1).target, [], "hkjit_gemm").code
    entry.path.unlink()
    cache.put(entry.key, wrong, entry.meta)


def case_rebuild_rejected_image():
    """A new process finds the poisoned entry; the runtime rejects it; hkjit sets it aside,
    compiles again and runs."""
    import ml_dtypes
    import hkjit
    from hkjit import cache
    m, n, k = _REJECT_SHAPE
    rng = np.random.default_rng()
    a, b = _random((m, k), ml_dtypes.bfloat16, rng), _random((k, n), ml_dtypes.bfloat16, rng)
    out = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    hkjit.gemm(a, b, out=out)
    _check_gemm(out, a, b)
    runtime_stats, rtc_stats = _stats()
    assert runtime_stats["rejected_images"] == 1 and rtc_stats["compiled"] == 1, (runtime_stats, rtc_stats)
    assert cache.default_cache().stats()["quarantined"] == 1


def case_launch_failures():
    """A launch HIP refuses (block too large, too much LDS, a stream of another device) raises
    LaunchError at once; a kernel that faults raises LaunchError at the next synchronisation (HIP
    reports it asynchronously), after which the device works again."""
    import ml_dtypes
    import hkjit
    from hip import hip
    from hkjit import compiler, runtime
    from hkjit.errors import LaunchError
    dev = runtime.get("rocm", 0)
    src = 'extern "C" __global__ void k(float* x) { x[__builtin_amdgcn_workitem_id_x()] = 2.0f; }\n'
    code = compiler.find_compiler(dev.target).compile(src, Path("k.hip"), dev.target, [], "k").code
    kernel = dev.load(code, "k")

    class Args(ctypes.Structure):
        _fields_ = [("x", ctypes.c_void_p)]

    buf = dev.alloc(256 * 4)
    with pytest.raises(LaunchError, match="hipErrorInvalidConfiguration"):
        kernel.launch((1, 1, 1), (2048, 1, 1), 0, Args(buf))
    with pytest.raises(LaunchError, match="hipErrorInvalidValue"):    # more LDS than the chip has
        kernel.launch((1, 1, 1), (64, 1, 1), 1 << 20, Args(buf))
    _ok(hip.hipSetDevice(1))
    other = _ok(hip.hipStreamCreate())                                  # a stream of device 1
    stream = (_ok(hip.hipSetDevice(0)), _ok(hip.hipStreamCreate()))[1]
    with pytest.raises(LaunchError, match="invalid resource handle"):
        kernel.launch((1, 1, 1), (256, 1, 1), 0, Args(buf), other)
    start, stop = _ok(hip.hipEventCreate()), _ok(hip.hipEventCreate())   # events bracket the launch
    _ok(hip.hipEventRecord(start, stream))
    kernel.launch((1, 1, 1), (256, 1, 1), 0, Args(buf), stream)
    _ok(hip.hipEventRecord(stop, stream))
    dev.synchronize(stream)
    assert _ok(hip.hipEventElapsedTime(start, stop)) > 0
    host = np.zeros(256, np.float32)
    dev.copy_out(host.ctypes.data, buf, host.nbytes)
    assert (host == 2.0).all()

    kernel.launch((1, 1, 1), (64, 1, 1), 0, Args(0x1000))              # an address nothing maps
    with pytest.raises(LaunchError, match="hipErrorIllegalAddress"):
        dev.synchronize()
    dev.synchronize()                                                   # reported once

    # The same through hkjit.gemm: an output buffer one row long for a 64-row result.
    rng = np.random.default_rng()
    a, b = _random((64, 32), ml_dtypes.bfloat16, rng), _random((32, 48), ml_dtypes.bfloat16, rng)
    A, B = HipArray(a, 0), HipArray(b, 0)
    O = HipArray(np.zeros((64, 48), np.float32), 0, rows_allocated=1)
    hkjit.gemm(A, B, out=O)
    with pytest.raises(LaunchError, match="hipErrorIllegalAddress"):
        dev.synchronize()
    out = hkjit.gemm(a, b, out_dtype="float32")                         # the device works again
    _check_gemm(out, a, b)
    assert _stats()[0]["faults"] == 2
    _ok(hip.hipFree(buf))


def case_out_of_memory():
    """Devices of 48 KiB: a GEMM whose operands do not fit raises DeviceError naming the
    shortage, and frees what it had staged."""
    import ml_dtypes
    import hkjit
    from hip import hip
    from hkjit.errors import DeviceError
    rng = np.random.default_rng()
    a, b = _random((128, 96), ml_dtypes.bfloat16, rng), _random((96, 128), ml_dtypes.bfloat16, rng)
    with pytest.raises(DeviceError, match="hipErrorOutOfMemory.*out of memory") as e:
        hkjit.gemm(a, b)
    assert "rocm:0" in str(e.value)
    free, total = _ok(hip.hipMemGetInfo())
    assert free == total == 48 * 1024, (free, total)
    small_a, small_b = a[:40, :64], b[:64, :48]                         # 5 KiB + 6 KiB + 4 KiB out
    _check_gemm(hkjit.gemm(small_a, small_b), small_a, small_b)


def case_compile_error():
    """A unit hiprtc rejects raises CompileError with clang's diagnostics; programs are destroyed."""
    from hkjit import compiler, targets
    from hkjit.errors import CompileError
    comp = compiler.find_compiler(targets.parse("gfx942"))
    assert comp.name == "hiprtc"
    with pytest.raises(CompileError, match="undeclared identifier 'not_declared'") as e:
        comp.compile('extern "C" __global__ void k(float* x) { x[0] = not_declared; }\n', Path("bad.hip"),
                     targets.parse("gfx942"), [], "k")
    assert "HIPRTC_ERROR_COMPILATION" in str(e.value) and e.value.command[0] == "hiprtc"
    _, rtc_stats = _stats()
    assert rtc_stats["failed"] == 1 and rtc_stats["destroyed"] == rtc_stats["created"] == 1


def case_no_runtime():
    from hkjit import compiler, runtime, targets
    from hkjit.errors import DeviceError
    assert runtime.gpu_count("rocm") == 0
    # No libamdhip64 at all, or a system one (e.g. Debian's libamdhip64-5) that sees no GPU.
    with pytest.raises(DeviceError, match="HIP runtime|ROCm device 0 does not exist"):
        runtime.from_string("rocm:0")
    assert compiler.find_compiler(targets.parse("gfx942")).name == "clang"
