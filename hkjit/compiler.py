"""Compiler drivers: NVRTC and nvcc for sm_90a; hiprtc, hipcc and clang (>= 20) for gfx942/gfx950.

Every driver compiles the same generated unit with the same pinned options for a target (C++20,
full optimisation, the exact target id), so a cache entry built by one path equals in meaning one
built by another. Each driver's identity (name + version) goes into the cache key.

Two drivers can parse a kernel source and the tile-library headers it includes once and reuse the
result (a precompiled header, PCH; policy and storage in hkjit/pch.py). `pch_scope` says how far a
driver's PCH reaches: "disk" (clang: a file any later process can use), "process" (NVRTC >= 12.8:
its PCH is a dump of a heap that lies at a random address in each process, so only the process
that wrote it can read it), or None. A PCH never changes the code object, only the front end's
time; the options that name it are not part of `flags`, so neither is it part of the cache key.
"""

import functools
import hashlib
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import codeobj
from .errors import CompileError, CompilerNotFoundError
from .targets import Target

STD = "c++20"
DEFAULT_TIMEOUT_S = 900.0
_OUTPUT_SUFFIX = ".hkjit-out"       # compiler outputs beside the generated source (see _output_path)
_STALE_OUTPUT_S = 3600              # older ones were left by a killed compile: removed by the next one


def kernel_timeout_s() -> float:
    """HKJIT_COMPILE_TIMEOUT (seconds), read when a compile starts, so a bad value fails that
    compile with a clear error instead of `import hkjit`."""
    raw = os.environ.get("HKJIT_COMPILE_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise CompileError(f"HKJIT_COMPILE_TIMEOUT={raw!r} is not a positive number of seconds; "
                           f"unset it for the default ({DEFAULT_TIMEOUT_S:.0f} s)")
    return value

# The pinned options, per vendor, in each driver's own spelling.
AMD_FLAGS = ("-O3", f"-std={STD}")
CLANG_HIP_FLAGS = ("-x", "hip", "-nogpuinc", "-nogpulib", "--cuda-device-only", "--no-gpu-bundle-output")
NVCC_FLAGS = ("-O3", f"-std={STD}", "-Xptxas=-O3", "-Xptxas=-v", "--cubin")
NVRTC_FLAGS = (f"-std={STD}", "--ptxas-options=-O3", "--ptxas-options=-v")


@dataclass
class CompileResult:
    code: bytes
    log: str
    meta: dict = field(default_factory=dict)
    ptx: str = ""   # NVRTC only: the PTX it produced on the way (for inspection and tests)
    pch: str = ""   # what a precompiled header did: "used", "created" (NVRTC), "" none (hkjit/pch.py adds more)


@dataclass(frozen=True)
class PchUse:
    """A precompiled header for one compile: read it, or (NVRTC, create=True) write it while compiling."""
    path: Path
    create: bool = False


class Compiler:
    """One way of turning a source unit into a code object for a vendor's targets."""
    name = ""
    vendor = ""
    pch_scope = None   # "disk", "process" or None: see the module docstring

    @functools.cached_property
    def identity(self) -> str:
        """Name and exact version: part of every cache key."""
        return f"{self.name} {self.version()}"

    def version(self) -> str:
        raise NotImplementedError

    def fingerprint(self) -> list:
        """[path, mtime_ns, size] of the files that make this compiler what it is; while they are
        unchanged, its identity is too. Empty when they cannot be found."""
        return _stat_all(self._files())

    def _files(self) -> list:
        return []

    def flags(self, target: Target, include_dirs) -> list[str]:
        raise NotImplementedError

    def compile(self, source: str, source_path: Path, target: Target, include_dirs, kernel: str,
                pch: PchUse | None = None) -> CompileResult:
        raise NotImplementedError

    def build_pch(self, header: Path, source_path: Path, target: Target, include_dirs) -> bytes:
        """A precompiled header of the kernel source `header` (pch_scope "disk" only); scratch files
        go beside the generated unit at `source_path`."""
        raise NotImplementedError(f"{self.name} builds no precompiled header files")

    def static_info(self, code: bytes, log: str, kernel: str) -> dict:
        if self.vendor == "amd":
            info = codeobj.amd_kernel_info(code, kernel)
            info.pop("args", None)
            return info
        return codeobj.nvidia_kernel_info(log, kernel)


def unit_id(source: str) -> str:
    """The compilation-unit id clang is given for `source` (`-cuid=`). Left to itself, clang hashes
    the input's path and the command line (which names a fresh temporary output file) into the
    `__hip_cuid_*` symbol it emits, so every compile of one unit gave different bytes. An id taken
    from the unit's text makes one cache key give one code object in any process and cache dir;
    the text is already in the key, so the id needs no place of its own there."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _run(cmd, source_path, what):
    timeout = kernel_timeout_s()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    except OSError as e:
        raise CompileError(f"{what} could not be started ({e})", command=cmd, source_path=source_path) from None
    except subprocess.TimeoutExpired as e:
        raise CompileError(f"{what} did not finish within {timeout:.0f} s "
                           "(raise HKJIT_COMPILE_TIMEOUT if the kernel is really that large)",
                           log=(e.stderr or "") if isinstance(e.stderr, str) else "", command=cmd,
                           source_path=source_path) from None
    log = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise CompileError(f"{what} failed (exit code {proc.returncode})", log=log, command=cmd,
                           source_path=source_path)
    return log


def _stat_all(paths) -> list:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            return []
        out.append([str(p), st.st_mtime_ns, st.st_size])
    return out


def _loaded_library(fragment: str):
    """Path of a shared library this process has loaded (Linux), e.g. 'libnvrtc'."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip().split(" ")[-1]
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


class _SubprocessCompiler(Compiler):
    """Drivers that are programs on disk: clang, hipcc, nvcc."""

    def __init__(self, path: str):
        self.path = path

    def _files(self):
        return [os.path.realpath(self.path)]

    def version(self) -> str:
        try:
            text = _version_text(self.path)
        except (OSError, subprocess.SubprocessError) as e:
            raise CompilerNotFoundError(f"{self.name} at {self.path} does not run ({e})") from None
        return " | ".join(l.strip() for l in text.splitlines() if l.strip() and not l.startswith("InstalledDir"))

    def unit_flags(self, source: str) -> list[str]:
        """Options that depend on the unit's text (derived from it, so not part of the key)."""
        return []

    def pch_flags(self, pch: PchUse) -> list[str]:
        raise NotImplementedError(f"{self.name} takes no precompiled header")

    def compile(self, source, source_path, target, include_dirs, kernel, pch=None):
        out = _output_path(Path(source_path))
        try:
            cmd = [self.path, *self.flags(target, include_dirs), *self.unit_flags(source),
                   *(self.pch_flags(pch) if pch else ()), "-o", str(out), str(source_path)]
            log = _run(cmd, source_path, self.name)
            try:
                code = out.read_bytes()
            except OSError as e:
                raise CompileError(f"{self.name} exited 0 but wrote no code object ({e}); is {self.path} "
                                   "really a compiler?", log=log, command=cmd, source_path=source_path) from None
        finally:
            out.unlink(missing_ok=True)
        return CompileResult(code, log, self.static_info(code, log, kernel), pch="used" if pch else "")


@functools.lru_cache(maxsize=None)
def _version_text(path: str) -> str:
    """`path --version`, asked once per process: finding clang and naming it both need it (about
    20 ms a run)."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, errors="replace", timeout=60)
    return (out.stdout or out.stderr).strip()


def write_private(path: Path, data: bytes) -> None:
    """Write a fresh file only this user can read, never through a link (O_EXCL)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def output_path(source_path: Path, tag: str = "") -> Path:
    """A compiler's scratch file beside the generated source (see _output_path); `tag` tells
    several apart (a PCH being built, the private copy of a PCH a compile reads)."""
    return _output_path(Path(source_path), tag)


def _output_path(source_path: Path, tag: str = "") -> Path:
    """Where a compiler program writes its code object: beside the generated source, in the
    cache's own 0700 sources/ folder (or the compile's private temporary folder), under a name
    unique to this process and thread. A compile killed by SIGKILL leaves only this file, inside
    hkjit's folder, and the next compile there removes such files once they are an hour old."""
    folder = source_path.parent
    now = time.time()
    try:
        for stale in folder.glob(f"*{_OUTPUT_SUFFIX}"):
            try:
                if now - stale.lstat().st_mtime > _STALE_OUTPUT_S:
                    stale.unlink()
            except OSError:
                pass
    except OSError:
        pass
    tag = f".{tag}" if tag else ""
    return folder / f"{source_path.name}{tag}.{os.getpid()}.{threading.get_ident()}{_OUTPUT_SUFFIX}"


# clang checks each header a PCH was built from before it uses the PCH. By size and mtime alone, a
# header only touched (a checkout, a reinstall) would make it refuse a PCH that is still right; with
# this it compares the content where the mtime differs.
_CLANG_PCH_CHECK = ("-Xclang", "-fvalidate-ast-input-files-content")


class ClangCompiler(_SubprocessCompiler):
    name, vendor = "clang", "amd"
    pch_scope = "disk"

    def flags(self, target, include_dirs):
        return [*CLANG_HIP_FLAGS, f"--offload-arch={target.id}", *AMD_FLAGS,
                *(f"-I{d}" for d in include_dirs)]

    def unit_flags(self, source):
        return [f"-cuid={unit_id(source)}"]   # hipcc hands it on to clang unchanged

    def pch_flags(self, pch):
        # The unit's own #include of the kernel source then finds it read already (#pragma once).
        return [*_CLANG_PCH_CHECK, "-include-pch", str(pch.path)]

    def build_pch(self, header, source_path, target, include_dirs):
        # Built from the kernel source itself, so every file the PCH names lies in the installation
        # (clang needs each of them, the PCH's own main file too, where it is used later). The same
        # options as the units that use it: clang refuses a PCH built for other language options or
        # another target. -S: a device-only compile would otherwise go on to link.
        out = _output_path(Path(source_path), "pch")
        try:
            cmd = [self.path, *self.flags(target, include_dirs), *_CLANG_PCH_CHECK, "-Xclang", "-emit-pch",
                   "-S", "-o", str(out), str(header)]
            log = _run(cmd, header, f"{self.name} (precompiled header)")
            try:
                return out.read_bytes()
            except OSError as e:
                raise CompileError(f"{self.name} exited 0 but wrote no precompiled header ({e})", log=log,
                                   command=cmd, source_path=header) from None
        finally:
            out.unlink(missing_ok=True)


class HipccCompiler(ClangCompiler):
    name = "hipcc"
    pch_scope = None   # hipcc adds options of its own: not tried


class NvccCompiler(_SubprocessCompiler):
    name, vendor = "nvcc", "nvidia"

    def flags(self, target, include_dirs):
        arch = target.arch.removeprefix("sm_")
        return [f"-gencode=arch=compute_{arch},code=sm_{arch}", *NVCC_FLAGS, *(f"-I{d}" for d in include_dirs)]


# NVRTC's own lines about a precompiled header; taken out of the log, which then reads as without one.
_NVRTC_PCH_NOTE = re.compile(r'^"[^"\n]*": (creating|using) precompiled header file "[^"\n]*"\n', re.M)


class NvrtcCompiler(Compiler):
    name, vendor = "nvrtc", "nvidia"

    def __init__(self):
        from cuda.bindings import nvrtc  # noqa: F401  (raises ImportError when absent)
        self._nvrtc = nvrtc
        major, minor = self._check(nvrtc.nvrtcVersion(), "nvrtcVersion")
        if (major, minor) >= (12, 8) and hasattr(nvrtc, "nvrtcGetPCHCreateStatus"):
            self.pch_scope = "process"
        # NVRTC >= 12.9 keeps a cache of its own, on disk (~/.nv/ComputeCache, seen with NVRTC 13.0
        # on an H200 host), and answers from it when a PCH is in use: files outside hkjit's folders,
        # unchecked, and a second cache beside hkjit's. --no-cache changes no code object (tests
        # compare), so like the PCH options it stays out of `flags` and the key.
        self.runtime_options = ["--no-cache"] if (major, minor) >= (12, 9) else []

    def _check(self, result, what, program=None, source_path=None, cmd=None):
        err, *rest = result
        if err != self._nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = self._log(program) if program is not None else ""
            raise CompileError(f"NVRTC {what} failed: {err.name}", log=log, command=cmd, source_path=source_path)
        return rest[0] if len(rest) == 1 else rest

    def _log(self, program):
        n = self._nvrtc.nvrtcGetProgramLogSize(program)[1]
        buf = b" " * n
        self._nvrtc.nvrtcGetProgramLog(program, buf)
        return buf.rstrip(b"\0 ").decode(errors="replace")

    def version(self):
        major, minor = self._check(self._nvrtc.nvrtcVersion(), "nvrtcVersion")
        return f"{major}.{minor}"

    def _files(self):
        lib = _loaded_library("libnvrtc")
        return [self._nvrtc.__file__, lib] if lib else []

    def flags(self, target, include_dirs):
        return [f"--gpu-architecture={target.arch}", *NVRTC_FLAGS, *(f"-I{d}" for d in include_dirs)]

    def compile(self, source, source_path, target, include_dirs, kernel, pch=None):
        nv = self._nvrtc
        opts = [*self.flags(target, include_dirs), *self.runtime_options]
        if pch is not None:
            opts.append(f"--{'create' if pch.create else 'use'}-pch={pch.path}")
        cmd = ["nvrtc", *opts, str(source_path)]
        prog = self._check(nv.nvrtcCreateProgram(source.encode(), str(source_path).encode(), 0, [], []),
                           "nvrtcCreateProgram", cmd=cmd, source_path=source_path)
        try:
            self._check(nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts]), "compilation",
                        program=prog, source_path=source_path, cmd=cmd)
            log = self._log(prog)
            done = ""
            if pch is not None:
                done = self._pch_outcome(prog, pch, log)
                log = _NVRTC_PCH_NOTE.sub("", log)
            size = self._check(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            code = b" " * size
            self._check(nv.nvrtcGetCUBIN(prog, code), "nvrtcGetCUBIN")
            size = self._check(nv.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            ptx = b" " * size
            self._check(nv.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        finally:
            nv.nvrtcDestroyProgram(prog)
        return CompileResult(code, log, self.static_info(code, log, kernel), ptx.rstrip(b"\0 ").decode(errors="replace"),
                             pch=done)

    def _pch_outcome(self, prog, pch, log) -> str:
        """"created", "used" or "" (NVRTC compiled without it: a heap too small to create it, or a
        PCH it would not read, which it says in the log and then ignores)."""
        if pch.create:
            status = self._nvrtc.nvrtcGetPCHCreateStatus(prog)[0]
            return "created" if status == self._nvrtc.nvrtcResult.NVRTC_SUCCESS else ""
        return "used" if "using precompiled header file" in log else ""


class HiprtcCompiler(Compiler):
    """hiprtc through hip-python (ROCm machines; in CI, against the stand-in in tests/hip_standin)."""
    name, vendor = "hiprtc", "amd"

    def __init__(self):
        from hip import hiprtc  # noqa: F401
        self._hiprtc = hiprtc
        self.version()

    def _check(self, result, what, program=None, source_path=None, cmd=None):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != self._hiprtc.hiprtcResult.HIPRTC_SUCCESS:
            log = self._log(program) if program is not None else ""
            raise CompileError(f"hiprtc {what} failed: {getattr(err, 'name', err)}", log=log, command=cmd,
                               source_path=source_path)
        return rest[0] if len(rest) == 1 else rest

    def _log(self, program) -> str:
        n = self._hiprtc.hiprtcGetProgramLogSize(program)[1]
        buf = bytearray(max(n, 1))
        self._hiprtc.hiprtcGetProgramLog(program, buf)
        return bytes(buf).rstrip(b"\0").decode(errors="replace")

    def version(self):
        major, minor = self._check(self._hiprtc.hiprtcVersion(), "hiprtcVersion")
        return f"{major}.{minor}"

    def _files(self):
        lib = _loaded_library("libhiprtc")
        return [self._hiprtc.__file__, lib] if lib else []

    def flags(self, target, include_dirs):
        return [f"--offload-arch={target.id}", *AMD_FLAGS, *(f"-I{d}" for d in include_dirs)]

    def compile(self, source, source_path, target, include_dirs, kernel, pch=None):
        rtc = self._hiprtc
        # hiprtc runs clang's driver inside comgr on a copy of the source in a temporary folder:
        # the same -cuid keeps its output independent of that folder too.
        opts = [*self.flags(target, include_dirs), f"-cuid={unit_id(source)}"]
        cmd = ["hiprtc", *opts, str(source_path)]
        prog = self._check(rtc.hiprtcCreateProgram(source.encode(), str(source_path).encode(), 0, None, None),
                           "hiprtcCreateProgram", cmd=cmd, source_path=source_path)
        try:
            self._check(rtc.hiprtcCompileProgram(prog, len(opts), [o.encode() for o in opts]), "compilation",
                        program=prog, source_path=source_path, cmd=cmd)
            log = self._log(prog)
            size = self._check(rtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize")
            buf = bytearray(size)
            self._check(rtc.hiprtcGetCode(prog, buf), "hiprtcGetCode")
        finally:
            # hiprtcDestroyProgram takes a hiprtcProgram*: the address of the handle, not the handle
            rtc.hiprtcDestroyProgram(prog.createRef())
        code = bytes(buf)
        return CompileResult(code, log, self.static_info(code, log, kernel))


def _clang_major(path: str) -> int:
    try:
        out = _version_text(path)
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if m else 0


def _find_clang():
    explicit = os.environ.get("HKJIT_CLANG")
    if explicit:
        path = shutil.which(explicit) or explicit
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise CompilerNotFoundError(f"HKJIT_CLANG={explicit!r} is not an executable file; point it at "
                                        "a clang >= 20 (e.g. /usr/bin/clang-22) or unset it")
        if _clang_major(path) < 20:
            raise CompilerNotFoundError(f"HKJIT_CLANG={explicit!r} is not a clang >= 20 (its --version names "
                                        "no 'clang version 20' or later); point it at one or unset it")
        return ClangCompiler(path)
    for name in ("clang-22", "clang-21", "clang-20", "clang"):
        path = shutil.which(name)
        if path and _clang_major(path) >= 20:
            return ClangCompiler(path)
    return None


def _try(factory):
    try:
        return factory()
    except (ImportError, OSError, RuntimeError, CompileError):
        return None


_FINDERS = {
    "hiprtc": lambda: _try(HiprtcCompiler),
    "hipcc": lambda: HipccCompiler(shutil.which("hipcc")) if shutil.which("hipcc") else None,
    "clang": _find_clang,
    "nvrtc": lambda: _try(NvrtcCompiler),
    "nvcc": lambda: NvccCompiler(shutil.which("nvcc")) if shutil.which("nvcc") else None,
}
ORDER = {"amd": ("hiprtc", "hipcc", "clang"), "nvidia": ("nvrtc", "nvcc")}
_INSTALL_HINT = {
    "amd": "install ROCm's hip-python (pip install 'hkjit[rocm]') or hipcc, or a clang >= 20 "
           "(Debian: apt-get install clang-22 lld-22), or point HKJIT_CLANG at one",
    "nvidia": "pip install 'hkjit[cuda]' (cuda-bindings + nvidia-cuda-nvrtc), or put nvcc on PATH",
}


@functools.lru_cache(maxsize=None)
def _found(name: str):
    return _FINDERS[name]()


def find_compiler(target: Target, requested: str | None = None) -> Compiler:
    """The compiler for `target`: the requested one (keyword or HKJIT_COMPILER), else the first
    available in the vendor's order."""
    requested = requested or os.environ.get("HKJIT_COMPILER") or None
    order = ORDER[target.vendor]
    if requested:
        if requested not in order:
            raise CompilerNotFoundError(f"compiler {requested!r} cannot build for {target.id}; "
                                        f"choose one of {', '.join(order)}")
        found = _found(requested)
        if found is None:
            raise CompilerNotFoundError(f"compiler {requested!r} was requested but is not available: "
                                        + _INSTALL_HINT[target.vendor])
        return found
    for name in order:
        found = _found(name)
        if found is not None:
            return found
    raise CompilerNotFoundError(f"no compiler for {target.id} found (tried {', '.join(order)}): "
                                + _INSTALL_HINT[target.vendor])


def available() -> list[tuple[str, str]]:
    """(name, identity or 'not found') of every compiler hkjit knows, for `hkjit info`."""
    out = []
    for vendor, names in ORDER.items():
        for name in names:
            c = _found(name)
            out.append((name, c.identity if c else "not found"))
    return out


def forget() -> None:
    """Forget which compilers were found (the next build looks again: PATH, HKJIT_CLANG, …)."""
    _found.cache_clear()
    _version_text.cache_clear()
