"""Helpers for the simulator tests: build the small HIP kernels under tests/sim/kernels with
clang-22 (tests skip when it is missing), launch them on a SimDevice with NumPy arrays."""

import functools
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np
import pytest

from hkjit.sim import SimDevice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
CLANG = shutil.which("clang-22")
ARCHS = ("gfx942", "gfx950")
needs_clang = pytest.mark.skipif(CLANG is None, reason="clang-22 is not installed")
_CACHE = os.path.join(tempfile.gettempdir(), "hkjit-sim-test-kernels")


@functools.lru_cache(maxsize=None)
def _tree_digest(*dirs):
    """Digest of every file a build can include, so a cached object never outlives its headers."""
    h = hashlib.sha256()
    for d in dirs:
        for base, _, files in sorted(os.walk(d)):
            for name in sorted(files):
                with open(os.path.join(base, name), "rb") as f:
                    h.update(name.encode() + f.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def build(source, arch, defines=(), include=None):
    """Code object bytes of tests/sim/kernels/<source> (or of a source string) for arch."""
    if CLANG is None:
        pytest.skip("clang-22 is not installed")
    path = os.path.join(KERNELS, source) if not source.lstrip().startswith(("#", "extern", "//")) else None
    text = open(path).read() if path else source
    flags = [f"-D{d}" for d in defines]
    dirs = (os.path.join(ROOT, "include"), KERNELS) + ((include,) if include else ())
    key = hashlib.sha256((text + arch + " ".join(flags) + _tree_digest(*dirs)).encode()).hexdigest()[:20]
    os.makedirs(_CACHE, exist_ok=True)
    out = os.path.join(_CACHE, f"{key}.hsaco")
    if not os.path.exists(out):
        src = os.path.join(_CACHE, f"{key}.hip")
        with open(src, "w") as f:
            f.write(text)
        subprocess.run([CLANG, "-x", "hip", "-nogpuinc", "-nogpulib", "--cuda-device-only", "--no-gpu-bundle-output",
                        f"--offload-arch={arch}", "-O3", "-std=c++20", "-I", os.path.join(ROOT, "include"),
                        "-I", KERNELS, *(["-I", include] if include else []), *flags, "-o", out + ".tmp", src], check=True, capture_output=True)
        os.replace(out + ".tmp", out)
    with open(out, "rb") as f:
        return f.read()


def _hip_toolchain():
    """(HIP include root, device-library bitcode directory), or None where HIP's headers and the
    ROCm device libraries are not installed (Debian: libamdhip64-dev rocm-device-libs)."""
    for root in ("/opt/rocm", "/usr"):
        if not os.path.exists(os.path.join(root, "include", "hip", "hip_runtime.h")):
            continue
        for bc in [os.path.join(root, "amdgcn", "bitcode")] + [os.path.join(root, "lib", d, "amdgcn", "bitcode")
                                                                for d in ("x86_64-linux-gnu", "")]:
            if os.path.exists(os.path.join(bc, "ocml.bc")):
                return root, bc
    return None


HIP = _hip_toolchain()
needs_hip_headers = pytest.mark.skipif(CLANG is None or HIP is None,
                                       reason="HIP headers and ROCm device libraries are not installed "
                                              "(Debian: apt-get install libamdhip64-dev rocm-device-libs)")


@functools.lru_cache(maxsize=None)
def build_hip(source, arch):
    """Code object of tests/sim/kernels/<source> compiled against HIP's own headers, linking the
    device library (ocml/ockl) as hipcc would."""
    root, bc = HIP
    isa = next((f for f in (f"oclc_isa_version_{arch[3:]}.bc", "oclc_isa_version_940.bc")
                if os.path.exists(os.path.join(bc, f))))
    libs = ["hip.bc", "ocml.bc", "ockl.bc", "oclc_finite_only_off.bc", "oclc_unsafe_math_off.bc", "oclc_daz_opt_off.bc",
            "oclc_correctly_rounded_sqrt_on.bc", "oclc_wavefrontsize64_on.bc", "oclc_abi_version_500.bc", isa]
    link = [a for lib in libs for a in ("-Xclang", "-mlink-builtin-bitcode", "-Xclang", os.path.join(bc, lib))]
    src = os.path.join(KERNELS, source)
    with open(src, "rb") as f:
        key = hashlib.sha256(f.read() + arch.encode() + " ".join(link).encode()).hexdigest()[:20]
    os.makedirs(_CACHE, exist_ok=True)
    out = os.path.join(_CACHE, f"{key}.hip.hsaco")
    if not os.path.exists(out):
        # older HIP headers still read __AMDGCN_WAVEFRONT_SIZE, which clang no longer defines
        subprocess.run([CLANG, "-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output", f"--offload-arch={arch}",
                        "-O3", "-std=c++20", f"--rocm-path={root}", f"--hip-path={root}", "-nogpulib",
                        "-D__AMDGCN_WAVEFRONT_SIZE=64", *link, "-o", out + ".tmp", src], check=True, capture_output=True)
        os.replace(out + ".tmp", out)
    with open(out, "rb") as f:
        return f.read()


def run(code, name, arch, grid, block, args, dynamic_smem=0, checks=True):
    """Launch with args: a list of NumPy arrays (passed as pointers, copied back after) and
    Python ints / floats / np scalars (packed by value, 4 bytes unless np.int64). Returns the
    arrays after the launch."""
    dev = SimDevice(arch, checks=checks)
    k = dev.load(code, name)
    packed = b""
    bufs = []
    for a in args:
        if isinstance(a, np.ndarray):
            b = dev.alloc(max(a.nbytes, 4))
            dev.copy_in(b, a)
            bufs.append((b, a))
            packed += b"\0" * (-len(packed) % 8) + struct.pack("<Q", b.ptr)
        elif isinstance(a, (np.int64,)):
            packed += b"\0" * (-len(packed) % 8) + struct.pack("<q", int(a))
        elif isinstance(a, (float, np.float32)):
            packed += b"\0" * (-len(packed) % 4) + struct.pack("<f", float(a))
        else:
            packed += b"\0" * (-len(packed) % 4) + struct.pack("<i", int(a))
    k.launch(grid, block, dynamic_smem, packed)
    outs = []
    for b, a in bufs:
        o = np.empty_like(a)
        dev.copy_out(b, o)
        outs.append(o)
    run.last_kernel = k
    return outs


def bf16(x):
    """float32 array -> (bf16 bits as uint16, the values they hold as float32), RNE."""
    from hkjit.sim import fp
    bits = fp.f32_to_bf16(np.asarray(x, np.float32))
    return bits, fp.bf16_to_f32(bits)
