"""Stand-ins for ROCm's libamdhip64.so and libhiprtc.so that the real hip-python loads, so that
hkjit's ROCm path (runtime/hip.py, the hiprtc compiler driver) runs without an AMD GPU.

The libraries are small C files (amdhip64.c, hiprtc.c) with ROCm's ABI; on first use each imports
its Python half into the process's interpreter: runtime.py (devices, memory, code objects and
launches on hkjit's CDNA simulator) and rtc.py (hiprtc's programs, compiled by clang-22).

    root = hip_standin.build(tmp_dir)             # tmp_dir/lib/libamdhip64.so, libhiprtc.so
    env = hip_standin.environment(root)           # ROCM_PATH and LD_LIBRARY_PATH pointing there
    subprocess.run([sys.executable, ...], env={**os.environ, **env})

hip-python resolves the libraries when it first calls into them: from ROCM_PATH/lib (hip-python
>= 10) or by the bare soname through LD_LIBRARY_PATH (6.x, 7.x), which a process reads at start;
so a process that has already called into hip-python keeps whatever it found, and the stand-in
is used from a fresh process.
"""

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIBRARIES = {"libamdhip64.so": "amdhip64.c", "libhiprtc.so": "hiprtc.c"}


def c_compiler():
    """Path of a C compiler: CC, else cc, gcc, or clang-22 (which CI installs for the AMD code
    objects; Debian's clang-22 brings the C library headers and binutils), else clang."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang-22", "clang"):
        path = name and shutil.which(name)
        if path:
            return path
    return None


def hip_version_int():
    """HIP_VERSION (major * 10^7 + minor * 10^5 + patch) of the installed hip-python's HIP."""
    from .rtc import hip_version
    major, minor, patch = hip_version()
    return major * 10_000_000 + minor * 100_000 + patch


def build(dest) -> Path:
    """Compile both libraries into dest/lib; returns dest (a ROCm-like root). Raises
    subprocess.CalledProcessError with the compiler's output on failure."""
    dest = Path(dest)
    lib = dest / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    cc = c_compiler()
    if cc is None:
        raise FileNotFoundError("no C compiler (cc, gcc or clang) on PATH")
    pypath = str(HERE.parent).encode().hex()   # where `import hip_standin` finds this package
    for soname, source in LIBRARIES.items():
        cmd = [cc, "-std=c11", "-shared", "-fPIC", "-O2", "-g", "-Wall", "-Wextra", "-Werror",
               "-fvisibility=hidden", f'-DSTANDIN_PYPATH_HEX="{pypath}"',
               f"-DSTANDIN_HIP_VERSION={hip_version_int()}", "-o", str(lib / soname), str(HERE / source),
               f"-Wl,-soname,{soname}", "-ldl", "-pthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return dest


def environment(root) -> dict:
    """Variables that make hip-python load the stand-ins built under `root` (for a new process)."""
    lib = str(Path(root) / "lib")
    ld = os.environ.get("LD_LIBRARY_PATH")
    return {"ROCM_PATH": str(root), "LD_LIBRARY_PATH": lib + (os.pathsep + ld if ld else "")}
