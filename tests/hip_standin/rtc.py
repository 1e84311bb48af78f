"""hiprtc's program API behind the stand-in libhiprtc.so, served by clang-22.

A compile runs clang the way hiprtc drives it (hiprtcInternal.cpp + comgr): hiprtc's own options
first (-O3, the HIP version macros, -D__HIPCC_RTC__, -include hiprtc_runtime.h, -std=c++14,
-nogpuinc), then the caller's, then what comgr adds to build a device-only code object. The caller's
options come later, so theirs win (a caller's -std=c++20 replaces hiprtc's c++14). The source is
compiled from a fresh folder, as comgr compiles from memory: nothing beside the caller's original
file is visible, only what -I names or hiprtcCreateProgram supplies.

Not modelled: ROCm's device libraries (ocml/ockl; comgr links them, clang-22 here has none: a unit
calling them fails to link), the name-expression API, and finding the target from the current
device when no --offload-arch is given (the stand-in asks for one).

Environment: HIP_STANDIN_CLANG (default clang-22). `STATS` counts programs and compiles.
"""

import ctypes
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from ctypes import POINTER, c_char, c_char_p, c_int, c_uint64
from pathlib import Path, PurePosixPath

SUCCESS, INVALID_INPUT, INVALID_PROGRAM, INVALID_OPTION, COMPILATION, INTERNAL_ERROR = 0, 3, 4, 5, 6, 11
HERE = Path(__file__).resolve().parent
STATS = {"created": 0, "compiled": 0, "failed": 0, "destroyed": 0, "commands": []}


def _say(message):
    print(f"hiprtc stand-in: {message}", file=sys.stderr, flush=True)


def hip_version():
    """(major, minor, patch) of the HIP that the installed hip-python was generated from."""
    import hip
    return tuple(int(x) for x in hip.HIP_VERSION_TUPLE[:3])


def hiprtc_options():
    """The options hiprtc puts before the caller's (ROCm 7's hiprtcInternal.cpp, Linux)."""
    major, minor, patch = hip_version()
    return ["-O3", "-mcumode", "-mwavefrontsize64", f"--hip-version={major}.{minor}.{patch}",
            f"-DHIP_VERSION_MAJOR={major}", f"-DHIP_VERSION_MINOR={minor}", f"-DHIP_VERSION_PATCH={patch}",
            "-D__HIPCC_RTC__", "-include", "hiprtc_runtime.h", "-std=c++14", "-nogpuinc",
            "-Wno-gnu-line-marker", "-Wno-missing-prototypes"]


# What comgr adds to compile HIP source to a linked device code object (ROCm's device libraries
# aside: see the module docstring).
COMGR_OPTIONS = ["-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output", "-nogpulib"]


def _safe_name(name, what):
    """A relative path with no '..' for a file written into the compile folder, or ValueError."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\0" in name:
        raise ValueError(f"{what} {name!r} is not a relative file name")
    return str(path)


class Program:
    def __init__(self, source, name, headers):
        self.source, self.name, self.headers = source, name, headers
        self.log, self.code = "", b""


class Rtc:
    def __init__(self):
        self.programs = {}
        self.next_id = 0
        self.lock = threading.RLock()
        self.clang = shutil.which(os.environ.get("HIP_STANDIN_CLANG", "clang-22"))

    def create(self, src, name, num_headers, headers, include_names, out):
        try:
            hdrs = {_safe_name(include_names[i].decode(), "header"): headers[i].decode() for i in range(num_headers)}
        except (ValueError, UnicodeDecodeError) as e:
            _say(f"hiprtcCreateProgram: {e}")
            return INVALID_INPUT
        self.next_id += 1
        self.programs[self.next_id] = Program(src.decode(), name.decode() or "default_program", hdrs)
        STATS["created"] += 1
        out[0] = self.next_id
        return SUCCESS

    def compile(self, pid, num_options, options):
        prog = self.programs[pid]
        user = [options[i].decode() for i in range(num_options)]
        # hiprtc accepts NVRTC's spelling of the target
        user = [("--offload-arch=" + o.split("=", 1)[1]) if o.startswith("--gpu-architecture=") else o for o in user]
        if not any(o.startswith("--offload-arch=") for o in user):
            prog.log = "hiprtc stand-in: pass --offload-arch=<gfx...>; finding it from the current device is not modelled\n"
            return INVALID_OPTION
        with tempfile.TemporaryDirectory(prefix="hiprtc-standin-") as tmp:
            tmp = Path(tmp)
            shutil.copy(HERE / "hiprtc_runtime.h", tmp / "hiprtc_runtime.h")
            for hname, text in prog.headers.items():
                (tmp / hname).parent.mkdir(parents=True, exist_ok=True)
                (tmp / hname).write_text(text)
            src = tmp / _safe_name(PurePosixPath(prog.name).name, "program name")
            src.write_text(prog.source)
            out = tmp / "code.o"
            cmd = [self.clang, *hiprtc_options(), *user, *COMGR_OPTIONS, "-o", str(out), src.name]
            STATS["commands"].append(cmd)
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900)
            prog.log = proc.stdout + proc.stderr
            if proc.returncode != 0:
                STATS["failed"] += 1
                return COMPILATION
            prog.code = out.read_bytes()
        STATS["compiled"] += 1
        return SUCCESS

    def log(self, pid, dst, size):
        data = self.programs[pid].log.encode() + b"\0"
        size[0] = len(data)
        if dst:
            ctypes.memmove(dst, data, len(data))
        return SUCCESS

    def code(self, pid, dst, size):
        data = self.programs[pid].code
        size[0] = len(data)
        if dst:
            ctypes.memmove(dst, data, len(data))
        return SUCCESS

    def destroy(self, pid):
        del self.programs[pid]
        STATS["destroyed"] += 1
        return SUCCESS


_F = ctypes.CFUNCTYPE
_OPS = [
    ("create", _F(c_int, c_char_p, c_char_p, c_int, POINTER(c_char_p), POINTER(c_char_p), POINTER(c_uint64))),
    ("compile", _F(c_int, c_uint64, c_int, POINTER(c_char_p))),
    ("log", _F(c_int, c_uint64, POINTER(c_char), POINTER(c_uint64))),
    ("code", _F(c_int, c_uint64, POINTER(c_char), POINTER(c_uint64))),
    ("destroy", _F(c_int, c_uint64)),
]


class _Table(ctypes.Structure):
    _fields_ = [(name, proto) for name, proto in _OPS]


RTC = None
_callbacks = []


def _guarded(method):
    @functools.wraps(method)
    def call(*args):
        try:
            with RTC.lock:
                return method(*args)
        except Exception:
            _say(f"internal error in {method.__name__}:\n{traceback.format_exc()}")
            return INTERNAL_ERROR
    return call


def install(table_address):
    """Called by libhiprtc.so on its first use: fill its table of entry points."""
    global RTC
    RTC = Rtc()
    if RTC.clang is None:
        raise RuntimeError("hiprtc stand-in: clang-22 not found (set HIP_STANDIN_CLANG)")
    table = _Table.from_address(table_address)
    for name, proto in _OPS:
        thunk = proto(_guarded(getattr(RTC, name)))
        _callbacks.append(thunk)
        setattr(table, name, thunk)
