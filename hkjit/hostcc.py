"""Host C code built on first use: hkjit's own native helpers (the repeat-call launcher, framework
FFI handlers), compiled by the machine's C compiler into the cache and loaded from there.

    path = hostcc.build("dispatch", [Path(__file__).with_name("dispatch.c")], python_extension=True)

Why at first use rather than at install: hkjit installs as a pure-Python wheel everywhere, and
the helpers need headers that only the running machine has (Python's, jaxlib's). Every caller
keeps a pure-Python path for when this raises NativeBuildError: no compiler, no headers, a cache
that cannot hold the library.

The key covers what decides the library's bytes without running anything: the sources' bytes, the
bytes of `depends` (headers outside the sources), the flags, the Python ABI (for extensions), and
the compiler by resolved path, size and mtime (running `cc --version` would cost a process per
first call). Libraries live in `<cache root>/native/<name>-<key>.so`, made 0700 like every cache
folder, written to a temp file beside and renamed into place; a library that is a symbolic link,
not a regular file, or not ours is never loaded.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from contextlib import suppress
from pathlib import Path

from .cache import default_cache
from .cache.perms import check_private, make_private_dirs
from .errors import CompileError, HKJitError

FORMAT = 1
FLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-std=c11", "-Wall")
TIMEOUT_S = 120
_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
_built: dict = {}      # key -> path: a process builds and checks each library once


class NativeBuildError(HKJitError, RuntimeError):
    """A host helper could not be built or loaded here; its caller falls back to Python."""


def compiler() -> str:
    """The C compiler: HKJIT_HOST_CC (a path or a name on PATH), else cc, gcc or clang on PATH."""
    wanted = os.environ.get("HKJIT_HOST_CC")
    for name in ([wanted] if wanted else ["cc", "gcc", "clang"]):
        path = shutil.which(name)
        if path:
            return os.path.realpath(path)
    raise NativeBuildError(f"no C compiler ({'HKJIT_HOST_CC=' + wanted if wanted else 'cc, gcc or clang'}) "
                           "found on PATH; install one (e.g. apt-get install gcc) for hkjit's native helpers")


def key_for(name: str, sources, depends=(), flags=(), python_extension=False) -> str:
    cc = compiler()
    st = os.stat(cc)
    h = hashlib.sha256()
    for part in (f"hostcc{FORMAT}", name, cc, str(st.st_size), str(st.st_mtime_ns), *FLAGS, *flags,
                 _python_abi() if python_extension else "plain"):
        h.update(part.encode() + b"\0")
    for path in (*sources, *depends):
        h.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return h.hexdigest()[:32]


def build(name: str, sources, *, include_dirs=(), depends=(), flags=(), python_extension=False) -> Path:
    """The shared library built from `sources` (paths inside hkjit, fixed by its code, never user
    values), compiled once per key and reused by later processes. Raises NativeBuildError."""
    if not _NAME.fullmatch(name):
        raise NativeBuildError(f"hostcc: bad library name {name!r}")
    sources, include_dirs = [Path(s) for s in sources], [str(d) for d in include_dirs]
    if python_extension:
        include_dirs.append(sysconfig.get_paths()["include"])
    try:
        key = key_for(name, sources, depends, flags, python_extension)
    except OSError as e:
        raise NativeBuildError(f"hostcc: cannot read what {name} is built from: {e}") from None
    if key in _built:
        return _built[key]
    folder = _folder()
    path = folder / f"{name}-{key}.so"
    if not _usable(path):
        _compile(sources, include_dirs, flags, path)
        if not _usable(path):
            raise NativeBuildError(f"hostcc: {path} is not a regular file of this user's after building it")
    _built[key] = path
    return path


def _python_abi() -> str:
    return f"{sys.implementation.cache_tag}{sysconfig.get_config_var('EXT_SUFFIX')}"


def _folder() -> Path:
    """<cache root>/native, private; a private temp folder when the cache cannot hold it."""
    try:
        root = default_cache().root
        check_private(root, follow=True)
        folder = root / "native"
        make_private_dirs(folder)
        check_private(folder, follow=False)
        if os.access(folder, os.W_OK):
            return folder
    except (OSError, HKJitError):
        pass
    return Path(tempfile.mkdtemp(prefix="hkjit-native-"))


def _usable(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWOTH | stat.S_IWGRP)


def _compile(sources, include_dirs, flags, path: Path) -> None:
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp.so")
    cmd = [compiler(), *FLAGS, *flags, *(f"-I{d}" for d in include_dirs), *(str(s) for s in sources),
           "-o", str(tmp)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        with suppress(OSError):
            os.unlink(tmp)
        raise NativeBuildError(f"hostcc: {cmd[0]} could not run: {e}") from None
    if proc.returncode != 0:
        with suppress(OSError):
            os.unlink(tmp)
        err = CompileError(f"{cmd[0]} failed building {path.name}", log=proc.stderr, command=cmd)
        raise NativeBuildError(str(err))
    os.chmod(tmp, 0o700)
    os.replace(tmp, path)
