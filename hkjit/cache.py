"""hkjit's kernel cache: keys, the entry file format, cross-process single-flight, bundles.

Lookup order: the in-memory table, then read-only bundles (HKJIT_BUNDLE_PATH), then the writable
disk cache (HKJIT_CACHE_DIR, else `platformdirs.user_cache_dir("hkjit")`), then a compile.

Disk layout under the root (created 0700: a cache others can write is a cache others can poison):

    entries/<key[:2]>/<key>.hkc           one file per compiled kernel (fan-out keeps dirs small)
    entries/<key[:2]>/.<key>.<pid>.<rand>.tmp   an entry being written; renamed into place whole
    locks/<key>.lock                      flock'd while one process compiles <key>
    locks/prune.lock                      flock'd while one process evicts entries
    quarantine/                           entries found corrupt or unloadable, kept for post-mortems
    toolchains.json                       compilers of kernels imported from bundles (see toolchains())

Entry file: header | metadata (JSON) | sha256 | payload, where header = magic, format version,
metadata length, payload length, and the sha256 covers header, metadata and payload, so a
truncated file or a flipped bit anywhere is caught on load.

Concurrency rules (they are what makes 16-64 processes on one cold key safe):
* Only the holder of locks/<key>.lock writes entries/<key>.hkc, always to a temp file that is
  `os.replace`d into place: a reader sees the old whole file, the new whole file, or nothing.
* Readers take no lock. A file unlinked (pruned, replaced) after a reader opened it stays readable.
* flock dies with its holder, so a compile killed by SIGKILL leaves no stuck lock (PyTorch's O_EXCL
  lock files do: pytorch#59146). Its temp file is removed by the next holder of that key's lock.
* Prune evicts an entry only while holding that entry's key lock and only if it was not used in
  the last `grace` seconds; loading an entry refreshes its mtime, which is the LRU clock.
"""

import errno
import hashlib
import json
import os
import shutil
import re
import secrets
import struct
import sys
import threading
import time
import warnings
import zipfile
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

from .errors import BundleError, CacheError, InvalidArgumentError, OfflineMissError

try:
    import fcntl
except ImportError:  # Windows: filelock's msvcrt lock stands in (see _KeyLock)
    fcntl = None

CACHE_FORMAT_VERSION = 1
ENTRY_MAGIC = b"HKJITCE\x00"
ENTRY_SUFFIX = ".hkc"
BUNDLE_MANIFEST = "hkjit-bundle.json"
BUNDLE_FORMAT_VERSION = 1
DEFAULT_LOCK_TIMEOUT_S = 600.0
PRUNE_GRACE_S = 60.0        # an entry used this recently is "in use": prune never evicts it
_TOUCH_EVERY_S = 10.0       # refresh an entry's mtime on load at most this often (fewer metadata writes)
_STALE_TEMP_S = 3600.0      # prune removes temp files this old even without their key lock (Windows)

_HEADER = struct.Struct("<8sIIQ")   # magic, format version, metadata length, payload length
_DIGEST_SIZE = 32
_MAX_METADATA = 16 << 20            # a corrupt length must not make us allocate gigabytes
_KEY_RE = re.compile(r"^[0-9a-f]{16,128}$")
_FORMAT_PART = "hkjit_cache_format"
_TOOLCHAINS_FILE = "toolchains.json"   # toolchains of kernels imported from bundles
_TRUE = ("1", "true", "yes", "on")


class CacheWarning(UserWarning):
    """The cache could not be used as configured; hkjit carries on (in memory, or without an entry)."""


class CorruptEntryError(CacheError):
    """An entry file failed its checks (magic, format, lengths, key or checksum)."""

    def __init__(self, message, stat=None):
        super().__init__(message)
        self.stat = stat


def hkjit_version() -> str:
    pkg = sys.modules.get("hkjit")
    return str(getattr(pkg, "__version__", None) or "0+unknown")


# ----------------------------------------------------------------------------------------- keys

def make_key(parts: dict) -> str:
    """sha256 (hex) of the canonical JSON of `parts` plus the cache format version.

    Canonical = sorted keys, no whitespace, ASCII only, so the same parts give the same key in
    every process, Python version and locale."""
    if not isinstance(parts, dict):
        raise InvalidArgumentError(f"make_key takes a dict of key parts, got {type(parts).__name__}")
    if _FORMAT_PART in parts:
        raise InvalidArgumentError(f"key part {_FORMAT_PART!r} is reserved for the cache itself")
    try:
        text = json.dumps({**parts, _FORMAT_PART: CACHE_FORMAT_VERSION}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"cache key parts must be plain JSON values (str, int, float, bool, "
                                   f"None, lists, dicts with str keys): {e}") from None
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_key(key) -> str:
    """A key is lowercase hex; anything else (a path separator above all) never reaches the disk."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise InvalidArgumentError(f"not a cache key: {key!r} (expected the hex string make_key returns)")
    return key


def entry_relpath(key: str) -> str:
    """Where an entry lives, relative to a cache root or a bundle: entries/<key[:2]>/<key>.hkc."""
    return f"entries/{key[:2]}/{key}{ENTRY_SUFFIX}"


# ---------------------------------------------------------------------------------- entry format

@dataclass
class Entry:
    key: str
    code: bytes
    meta: dict
    source: str = field(default="", compare=False)   # "built", "disk:<path>", "bundle:<path>"


@dataclass
class EntryInfo:
    """What `entries()` lists: an entry's header and metadata, without reading its payload."""
    key: str
    path: Path
    size: int               # bytes on disk
    code_size: int
    created: float          # when it was compiled (metadata)
    last_used: float        # mtime: refreshed on load, the LRU clock
    hkjit_version: str
    meta: dict
    problem: str | None = None   # set when the header or metadata cannot be read


def encode_entry(key: str, code: bytes, meta: dict, *, created: float | None = None) -> bytes:
    info = {"key": key, "meta": meta, "created": time.time() if created is None else created,
            "hkjit_version": hkjit_version(), "code_size": len(code), "format": CACHE_FORMAT_VERSION}
    try:
        metadata = json.dumps(info, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"entry metadata for {key} must be JSON-serialisable: {e}") from None
    header = _HEADER.pack(ENTRY_MAGIC, CACHE_FORMAT_VERSION, len(metadata), len(code))
    digest = hashlib.sha256(header)
    digest.update(metadata)
    digest.update(code)
    return b"".join((header, metadata, digest.digest(), code))


def _parse_header(blob) -> tuple[int, int]:
    """(metadata length, payload length) from the first bytes of an entry; CorruptEntryError if bad."""
    if len(blob) < _HEADER.size:
        raise CorruptEntryError(f"truncated: {len(blob)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, meta_len, code_len = _HEADER.unpack_from(blob)
    if magic != ENTRY_MAGIC:
        raise CorruptEntryError("bad magic: not an hkjit cache entry")
    if version != CACHE_FORMAT_VERSION:
        raise CorruptEntryError(f"format version {version}, this hkjit reads {CACHE_FORMAT_VERSION}")
    if meta_len > _MAX_METADATA:
        raise CorruptEntryError(f"metadata length {meta_len} is implausible")
    return meta_len, code_len


def decode_entry(blob: bytes, key: str | None = None) -> tuple[Entry, dict]:
    """(Entry, metadata block) from an entry file's bytes; CorruptEntryError on any mismatch."""
    meta_len, code_len = _parse_header(blob)
    expected = _HEADER.size + meta_len + _DIGEST_SIZE + code_len
    if len(blob) != expected:
        raise CorruptEntryError(f"{'truncated' if len(blob) < expected else 'trailing data'}: "
                                f"{len(blob)} bytes, the header says {expected}")
    view = memoryview(blob)
    meta_end = _HEADER.size + meta_len
    stored = bytes(view[meta_end:meta_end + _DIGEST_SIZE])
    digest = hashlib.sha256(view[:meta_end])
    digest.update(view[meta_end + _DIGEST_SIZE:])
    if digest.digest() != stored:
        raise CorruptEntryError("checksum mismatch: the file was damaged after it was written")
    try:
        info = json.loads(bytes(view[_HEADER.size:meta_end]))
    except ValueError:
        raise CorruptEntryError("metadata is not JSON") from None
    if key is not None and info.get("key") != key:
        raise CorruptEntryError(f"holds key {info.get('key')!r}, expected {key}")
    return Entry(info["key"], bytes(view[meta_end + _DIGEST_SIZE:]), info.get("meta", {})), info


def read_entry_info(path: Path) -> EntryInfo:
    """Header and metadata of an entry file (payload unread, checksum unchecked)."""
    path = Path(path)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        head = f.read(_HEADER.size)
        try:
            meta_len, code_len = _parse_header(head)
            info = json.loads(f.read(meta_len))
        except (CorruptEntryError, ValueError) as e:
            return EntryInfo(path.stem, path, st.st_size, 0, 0.0, st.st_mtime, "", {}, problem=str(e))
    return EntryInfo(info.get("key", path.stem), path, st.st_size, code_len, info.get("created", 0.0),
                     st.st_mtime, info.get("hkjit_version", ""), info.get("meta", {}))


def _read_entry_file(path: Path, key: str, touch: bool = True) -> tuple[Entry, os.stat_result]:
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        try:
            entry, _ = decode_entry(f.read(), key)
        except CorruptEntryError as e:
            raise CorruptEntryError(str(e), st) from None
        if touch and time.time() - st.st_mtime > _TOUCH_EVERY_S:
            _touch(f.fileno())
    entry.source = f"disk:{path}"
    return entry, st


def _touch(fd: int):
    # The LRU clock. A read-only cache cannot record use; that only makes its LRU order coarser.
    with suppress(OSError, NotImplementedError):
        os.utime(fd)


def write_atomically(path: Path, data: bytes, mode: int = 0o644):
    """Write `data` to a temp file beside `path`, fsync it, and rename it over `path`, so no reader
    ever sees a partial file. The temp file is removed if anything fails."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())   # else a power cut after the rename can leave a zero-length entry
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------------------- locks

class _KeyLock:
    """An exclusive flock on a lock file, polled with a bounded wait.

    The OS drops a flock when its holder exits or is killed, so no crash leaves a stuck lock. The
    holder unlinks the file on release so locks/ does not keep one file per kernel forever; a waiter
    that then wins the lock on the unlinked inode sees that the path names another file, and retries."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = None
        self._fallback = None

    def try_acquire(self) -> bool:
        if fcntl is None:
            return self._try_fallback()
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            if self._names(fd):
                self._fd = fd
                self._note_holder()
                return True
            os.close(fd)   # its last holder released and removed it just now: lock the new file

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True

    def release(self):
        if self._fallback is not None:
            self._fallback.release()
            self._fallback = None
            return
        if self._fd is not None:
            with suppress(OSError):
                os.unlink(self.path)   # still ours: only a holder removes the file
            os.close(self._fd)
            self._fd = None

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (pid, host, since), for timeout messages."""
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def _names(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def _note_holder(self):
        with suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()} on {os.uname().nodename} since "
                                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)

    def _try_fallback(self) -> bool:
        import filelock
        lock = filelock.FileLock(str(self.path))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            return False
        self._fallback = lock
        return True


# -------------------------------------------------------------------------------------- bundles

class Bundle:
    """A read-only set of precompiled entries: a directory or a .zip holding `hkjit-bundle.json`
    and `entries/<key[:2]>/<key>.hkc`. The manifest lists every entry's key, path, size and the
    sha256 of its file; an entry that does not match is rejected (BundleError), never used.
    Nothing here ever writes to the bundle."""

    def __init__(self, path):
        self.path = Path(path).expanduser()
        self._manifest = None
        self._index = None
        self._zip = None
        self._loaded_stamp = None
        self._mutex = threading.RLock()   # loading the manifest reads a zip member under it too

    def __repr__(self):
        return f"Bundle({str(self.path)!r})"

    @property
    def exists(self) -> bool:
        return self.path.exists()

    @property
    def manifest(self) -> dict:
        if self._manifest is None:
            with self._mutex:
                if self._manifest is None:
                    self._manifest = self._load_manifest()
        return self._manifest

    @property
    def index(self) -> dict:
        """key -> manifest record."""
        if self._index is None:
            self._index = {r["key"]: r for r in self.manifest["entries"]}
        return self._index

    def toolchains(self, target_id: str) -> list[dict]:
        """The compilers (identity, flags) this bundle's entries for `target_id` were built with."""
        return [t for t in self.manifest.get("toolchains", []) if t.get("target") == target_id]

    def get(self, key: str) -> Entry | None:
        record = self.index.get(key)
        if record is None:
            return None
        try:
            blob = self.read_member(record["path"])
            problem = self._check_record(record, blob)
        except BundleError as e:
            problem = str(e)
        if problem and self._reload_if_replaced():
            return self.get(key)   # rebuilt in place since we read its manifest: use the new one
        if problem:
            raise BundleError(f"bundle {self.path}: entry {key} ({record['path']}) was rejected: {problem}. "
                              f"The bundle was damaged or tampered with after it was built; run "
                              f"`hkjit bundle verify {self.path}` and rebuild or re-copy it.")
        entry, _ = decode_entry(blob, key)
        entry.source = f"bundle:{self.path}"
        return entry

    def read_member(self, relpath: str) -> bytes:
        _check_member_path(relpath, self.path)
        try:
            if self._is_zip():
                with self._mutex:
                    return self._zipfile().read(relpath)
            return (self.path / relpath).read_bytes()
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            raise BundleError(f"bundle {self.path}: cannot read {relpath}: {e}; the bundle is incomplete, "
                              "rebuild or re-copy it") from None

    def verify(self) -> list[str]:
        """Every problem found, one line each; empty when every listed entry is whole and genuine."""
        try:
            records = self.manifest["entries"]
        except BundleError as e:
            return [str(e)]
        problems = []
        for record in records:
            try:
                problem = self._check_record(record, self.read_member(record["path"]))
            except BundleError as e:
                problem = str(e)
            if problem:
                problems.append(f"{record['path']}: {problem}")
        return problems

    @staticmethod
    def _check_record(record: dict, blob: bytes) -> str | None:
        if len(blob) != record.get("size"):
            return f"size {len(blob)} bytes, the manifest says {record.get('size')}"
        actual = hashlib.sha256(blob).hexdigest()
        if actual != record.get("sha256"):
            return f"sha256 {actual}, the manifest says {record.get('sha256')}"
        try:
            decode_entry(blob, record["key"])
        except CorruptEntryError as e:
            return f"not a valid entry: {e}"
        return None

    def _is_zip(self) -> bool:
        return self.path.is_file()

    def _stamp(self):
        with suppress(OSError):
            st = os.stat(self.path if self._is_zip() else self.path / BUNDLE_MANIFEST)
            return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size
        return None

    def _reload_if_replaced(self) -> bool:
        if self._manifest is None or self._stamp() == self._loaded_stamp:
            return False
        with self._mutex:
            self._manifest = self._index = None
            if self._zip is not None:
                self._zip.close()
                self._zip = None
        return True

    def _zipfile(self) -> zipfile.ZipFile:
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.path)
        return self._zip

    def _load_manifest(self) -> dict:
        self._loaded_stamp = self._stamp()
        if not self.path.exists():
            raise BundleError(f"bundle {self.path} does not exist; fix HKJIT_BUNDLE_PATH or copy the bundle there")
        try:
            manifest = json.loads(self.read_member(BUNDLE_MANIFEST))
        except ValueError as e:
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is not JSON ({e}); rebuild the bundle") from None
        except zipfile.BadZipFile:
            raise BundleError(f"bundle {self.path} is a file but not a zip archive") from None
        if manifest.get("format") != "hkjit-bundle" or not isinstance(manifest.get("entries"), list):
            raise BundleError(f"bundle {self.path}: {BUNDLE_MANIFEST} is not an hkjit bundle manifest")
        if manifest.get("version") != BUNDLE_FORMAT_VERSION:
            raise BundleError(f"bundle {self.path} has format {manifest.get('version')}, this hkjit reads "
                              f"{BUNDLE_FORMAT_VERSION}; rebuild it with this hkjit's `hkjit precompile`")
        if manifest.get("hkjit_version") != hkjit_version():
            warnings.warn(f"bundle {self.path} was built by hkjit {manifest.get('hkjit_version')}, this is "
                          f"hkjit {hkjit_version()}: its kernels will not match and will be compiled again "
                          "(rebuild the bundle with this version)", CacheWarning, stacklevel=3)
        return manifest


def _check_member_path(relpath: str, bundle: Path):
    # A tampered manifest must not make us read outside the bundle.
    p = PurePosixPath(relpath)
    if p.is_absolute() or ".." in p.parts or "\\" in relpath:
        raise BundleError(f"bundle {bundle}: manifest names an entry outside the bundle: {relpath!r}")


def bundle_paths_from_env() -> list[str]:
    value = os.environ.get("HKJIT_BUNDLE_PATH", "")
    return [p for p in value.split(os.pathsep) if p]


# ---------------------------------------------------------------------------------------- cache

def parse_size(value) -> int:
    """Bytes from 123, '500M', '10G', '1.5GiB', '2T' (K/M/G/T are powers of 1024)."""
    if isinstance(value, int) and value >= 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*", str(value), re.I)
    if not m:
        raise InvalidArgumentError(f"cannot read size {value!r}; write bytes or e.g. 500M, 10G, 1.5GiB")
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


_offline_override: bool | None = None


def set_offline(flag: bool | None):
    """Turn offline mode on or off for every cache that was not given `offline=` explicitly
    (None: back to HKJIT_OFFLINE)."""
    global _offline_override
    _offline_override = None if flag is None else bool(flag)


class Cache:
    def __init__(self, root: str | os.PathLike | None = None, *, bundle_paths=None, offline=None,
                 max_size=None, lock_timeout: float | None = None):
        if root is None:
            root = os.environ.get("HKJIT_CACHE_DIR") or _default_root()
        self.root = Path(root).expanduser()
        paths = bundle_paths_from_env() if bundle_paths is None else bundle_paths
        self.bundles = [p if isinstance(p, Bundle) else Bundle(p) for p in paths]
        self._offline = offline
        if max_size is None:
            max_size = os.environ.get("HKJIT_CACHE_MAX_SIZE") or None
        self.max_size = None if max_size is None else parse_size(max_size)
        self.lock_timeout = _lock_timeout() if lock_timeout is None else float(lock_timeout)
        self._memory: dict[str, Entry] = {}
        self._seen_on_disk: dict[str, tuple] = {}     # key -> (dev, inode) of the file we loaded
        self._rejected: dict[str, str] = {}           # key -> why its bundle copy must not be used
        self._mutex = threading.Lock()
        self._key_mutexes: dict[str, threading.Lock] = {}
        self._warned: set = set()
        self._counts = dict(memory_hits=0, bundle_hits=0, disk_hits=0, misses=0, builds=0,
                            corrupt=0, write_failures=0)

    def __repr__(self):
        return f"Cache({str(self.root)!r}, bundles={[str(b.path) for b in self.bundles]})"

    @property
    def offline(self) -> bool:
        if self._offline is not None:
            return self._offline
        if _offline_override is not None:
            return _offline_override
        return os.environ.get("HKJIT_OFFLINE", "").strip().lower() in _TRUE

    @offline.setter
    def offline(self, flag):
        self._offline = flag

    def entry_path(self, key: str) -> Path:
        return self.root / entry_relpath(key)

    def lock_path(self, key: str) -> Path:
        return self.root / "locks" / f"{key}.lock"

    # ---- lookups

    def get(self, key) -> Entry | None:
        """The entry for `key` from memory, a bundle or the disk cache, or None. A corrupt disk
        entry is moved to quarantine/ and reported as a miss; a bad bundle entry raises BundleError."""
        entry = self._memory.get(key)
        if entry is not None:
            self._counts["memory_hits"] += 1
            return entry
        check_key(key)
        entry = self._from_bundles(key)
        if entry is None:
            entry = self._from_disk(key)
        if entry is None:
            self._counts["misses"] += 1
            return None
        return self._remember(entry)

    def get_or_build(self, key, build: Callable[[], tuple[bytes, dict]], *,
                     describe: Callable[[], str] | None = None) -> tuple[Entry, bool]:
        """(entry, built_now). At most one process compiles a key at a time; the others wait for
        its entry (bounded by HKJIT_LOCK_TIMEOUT). Offline mode raises OfflineMissError instead."""
        entry = self.get(key)
        if entry is not None:
            return entry, False
        if self.offline:
            raise self._offline_miss(key, describe)
        with self._key_mutex(key):   # threads of this process queue here, not on the file lock
            entry = self._memory.get(key)
            if entry is not None:
                return entry, False
            entry, built = self._build_under_lock(key, build)
        if built and self.max_size is not None:
            self.prune(self.max_size, wait=False)
        return entry, built

    def put(self, key, code: bytes, meta: dict) -> Entry:
        """Store an entry compiled elsewhere (cache import, precompile). Allowed offline: storing
        is not compiling. An entry already on disk for `key` is kept (same key, same meaning)."""
        check_key(key)
        with self._key_mutex(key):
            entry, _ = self._build_under_lock(key, lambda: (code, meta))
        return entry

    def invalidate(self, key, reason: str) -> None:
        """The caller could not load this entry's code (an invalid image): set the disk copy aside,
        stop using a bundle's copy, and forget it, so the next get_or_build compiles it again."""
        check_key(key)
        with self._mutex:
            entry = self._memory.pop(key, None)
        if entry is not None and entry.source.startswith("bundle:"):
            self._rejected[key] = f"{entry.source[len('bundle:'):]} holds an unusable copy: {reason}"
            warnings.warn(f"hkjit: bundle entry {key} could not be used ({reason}); "
                          "compiling it instead", CacheWarning, stacklevel=2)
            return
        seen = self._seen_on_disk.pop(key, None)
        self._set_aside(self.entry_path(key), seen, reason)

    def toolchains(self, target_id: str) -> list[dict]:
        """The compilers ({"target", "compiler", "flags"}) that the kernels for `target_id` in the
        bundles, then in the cache (imported ones), were built with. A process with no compiler
        computes its keys with these, so it finds kernels compiled elsewhere."""
        found = []
        for bundle in self.bundles:
            if bundle.exists:
                found += [t for t in bundle.toolchains(target_id) if t not in found]
        found += [t for t in self._imported_toolchains() if t.get("target") == target_id and t not in found]
        return found

    def add_toolchains(self, toolchains: list[dict]) -> None:
        """Remember the toolchains of imported kernels (see `toolchains`); best effort."""
        known = self._imported_toolchains()
        merged = known + [t for t in toolchains if t not in known]
        if merged == known:
            return
        try:
            self._mkdirs(".")
            write_atomically(self.root / _TOOLCHAINS_FILE, json.dumps(merged, indent=1).encode())
        except OSError as e:
            self._degrade(e, f"write {self.root / _TOOLCHAINS_FILE}")

    def _imported_toolchains(self) -> list[dict]:
        try:
            found = json.loads((self.root / _TOOLCHAINS_FILE).read_text())
        except (OSError, ValueError):
            return []
        return found if isinstance(found, list) else []

    # ---- maintenance

    def entries(self) -> list[EntryInfo]:
        infos = []
        for path in self._entry_files():
            with suppress(FileNotFoundError):   # pruned while we listed
                infos.append(read_entry_info(path))
        return infos

    def stats(self) -> dict:
        infos = self.entries()
        quarantined = [p for p in self._quarantine_files() if p.suffix == ENTRY_SUFFIX]
        return {
            "root": str(self.root),
            "entries": len(infos),
            "bytes": sum(i.size for i in infos),
            "max_size": self.max_size,
            "quarantined": len(quarantined),
            "memory_entries": len(self._memory),
            "bundles": [str(b.path) for b in self.bundles],
            "offline": self.offline,
            **self._counts,
        }

    def verify(self) -> list[tuple[Path, str]]:
        """Check every entry's checksum; set aside the corrupt ones. Returns (path, problem) pairs."""
        problems = []
        for path in self._entry_files():
            key = path.stem
            try:
                _read_entry_file(path, key, touch=False)
            except FileNotFoundError:
                continue
            except CorruptEntryError as e:
                problems.append((path, str(e)))
                self._set_aside(path, (e.stat.st_dev, e.stat.st_ino), str(e))
            except OSError as e:
                problems.append((path, f"unreadable: {e}"))
        return problems

    def prune(self, max_size, *, grace: float | None = None, wait: bool = True) -> dict:
        """Evict least recently used entries until the cache holds at most `max_size` bytes.

        Never evicts an entry used in the last `grace` seconds or one whose key lock is held (being
        built); readers that already opened an evicted file keep reading it. Quarantined files go
        first, then stale temp files. One pruner at a time (locks/prune.lock); with wait=False a
        prune already running elsewhere makes this call return at once."""
        max_size = parse_size(max_size)
        grace = PRUNE_GRACE_S if grace is None else grace
        report = dict(removed=0, freed=0, kept=0, bytes=0, skipped_in_use=0, ran=False)
        lock = _KeyLock(self.root / "locks" / "prune.lock")
        try:
            self._mkdirs("locks")
            got = lock.acquire(self.lock_timeout) if wait else lock.try_acquire()
        except OSError as e:
            self._degrade(e, "take the prune lock")
            return report
        if not got:
            if wait:
                raise CacheError(f"timed out after {self.lock_timeout:.0f} s waiting for {lock.path} "
                                 f"(held by {lock.holder()}); another prune is running")
            return report
        try:
            report["ran"] = True
            self._remove_stale_temps()
            self._evict(max_size, grace, report)
        finally:
            lock.release()
        return report

    def clear(self) -> dict:
        """Remove every entry not in use right now (see prune), the quarantine and the memory table."""
        report = self.prune(0, grace=0)
        for path in self._quarantine_files():
            with suppress(OSError):
                path.unlink()
        # hkjit.jit's key index (spec -> key shortcuts): harmless when stale, but `clear` means clear.
        shutil.rmtree(self.root / "index", ignore_errors=True)
        with self._mutex:
            self._memory.clear()
        return report

    # ---- internals: lookup

    def _remember(self, entry: Entry) -> Entry:
        with self._mutex:
            return self._memory.setdefault(entry.key, entry)

    def _from_bundles(self, key: str) -> Entry | None:
        if key in self._rejected:
            return None
        for bundle in self.bundles:
            if not bundle.exists:
                self._warn_once(("missing bundle", bundle.path),
                                f"hkjit: bundle {bundle.path} (HKJIT_BUNDLE_PATH) does not exist; skipping it")
                continue
            entry = bundle.get(key)
            if entry is not None:
                self._counts["bundle_hits"] += 1
                return entry
        return None

    def _from_disk(self, key: str) -> Entry | None:
        path = self.entry_path(key)
        try:
            entry, st = _read_entry_file(path, key)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except CorruptEntryError as e:
            self._set_aside(path, (e.stat.st_dev, e.stat.st_ino), str(e))
            return None
        except OSError as e:   # unreadable (permissions, I/O error): a miss, said once
            self._warn_once(("unreadable", path), f"hkjit: cannot read cache entry {path}: {e}; compiling instead")
            return None
        self._seen_on_disk[key] = (st.st_dev, st.st_ino)
        self._counts["disk_hits"] += 1
        return entry

    def _offline_miss(self, key: str, describe) -> OfflineMissError:
        what = f"the kernel with cache key {key}"
        if describe is not None:
            try:
                what = describe()
            except Exception as e:   # the error must still name the key
                what += f" (describing it failed: {e})"
        searched = ", ".join(f"{b.path}{'' if b.exists else ' (missing)'}" for b in self.bundles) \
            or "none (HKJIT_BUNDLE_PATH is empty)"
        rejected = f"\nA bundle's copy was rejected: {self._rejected[key]}" if key in self._rejected else ""
        return OfflineMissError(
            f"offline mode is on (HKJIT_OFFLINE=1 or hkjit.set_offline(True)), so hkjit compiles "
            f"nothing, and no bundle or cache holds this kernel:\n{what}\nkey: {key}\n"
            f"bundles searched: {searched}; cache: {self.root}{rejected}\n"
            "Fix: add the manifest line to your precompile manifest, run `hkjit precompile`, and "
            "deploy the new bundle (or turn offline mode off to compile it here).")

    # ---- internals: building and writing

    def _key_mutex(self, key: str) -> threading.Lock:
        with self._mutex:
            return self._key_mutexes.setdefault(key, threading.Lock())

    def _build_under_lock(self, key: str, build) -> tuple[Entry, bool]:
        lock = self._lock(key)
        try:
            if lock is not None:
                entry = self._from_disk(key)   # built by another process while we waited
                if entry is not None:
                    return self._remember(entry), False
                self._remove_stale_temps(key)
            code, meta = build()
            if not isinstance(code, (bytes, bytearray, memoryview)) or not isinstance(meta, dict):
                raise CacheError(f"build function for {key} returned {type(code).__name__}, "
                                 f"{type(meta).__name__}; it must return (bytes, dict)")
            entry = Entry(key, bytes(code), meta, "built")
            if lock is not None:
                self._write_entry(entry)
            self._counts["builds"] += 1
            return self._remember(entry), True
        finally:
            if lock is not None:
                lock.release()

    def _lock(self, key: str) -> _KeyLock | None:
        """This key's compile lock, or None when the cache dir is unusable (we then build in memory)."""
        lock = _KeyLock(self.lock_path(key))
        try:
            self._mkdirs("locks")
            got = lock.acquire(self.lock_timeout)
        except OSError as e:
            self._degrade(e, f"create the lock file {lock.path}")
            return None
        if not got:
            raise CacheError(
                f"timed out after {self.lock_timeout:.0f} s waiting for the compile lock {lock.path}, "
                f"held by {lock.holder()} while it compiles the same kernel. If that process is hung, "
                "end it (the lock dies with it); if its compile is just slow, raise HKJIT_LOCK_TIMEOUT "
                "(seconds).")
        return lock

    def _write_entry(self, entry: Entry) -> bool:
        path = self.entry_path(entry.key)
        blob = encode_entry(entry.key, entry.code, entry.meta)
        try:
            self._mkdirs(path.parent.relative_to(self.root))
            write_atomically(path, blob)
        except OSError as e:
            self._counts["write_failures"] += 1
            self._degrade(e, f"write {path}")
            return False
        return True

    def _degrade(self, error: OSError, what: str):
        name = errno.errorcode.get(error.errno, "error") if error.errno else type(error).__name__
        self._warn_once(("degraded", error.errno),
                        f"hkjit: could not {what}: {error.strerror or error} [{name}]. Kernels this process "
                        "compiles stay in memory only, and the next process compiles them again. Fix: free "
                        "disk space or permissions there, or point HKJIT_CACHE_DIR at a writable directory.")

    def _mkdirs(self, relative) -> Path:
        """Create root/relative and every missing folder on the way, each 0700 (Path.mkdir's
        parents=True would give the parents the umask's default, e.g. 0755)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        current = self.root
        for part in Path(relative).parts:
            current = current / part
            current.mkdir(mode=0o700, exist_ok=True)
        return current

    def _warn_once(self, tag, message: str):
        if tag not in self._warned:
            self._warned.add(tag)
            warnings.warn(message, CacheWarning, stacklevel=4)

    def _set_aside(self, path: Path, seen: tuple | None, reason: str):
        """Move a bad entry to quarantine/ unless another process already replaced it with a good one."""
        self._counts["corrupt"] += 1
        try:
            st = os.stat(path)
            if seen is not None and (st.st_dev, st.st_ino) != seen:
                return
            qdir = self._mkdirs("quarantine")
            target = qdir / f"{path.stem}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}{ENTRY_SUFFIX}"
            os.replace(path, target)
            with suppress(OSError):
                target.with_suffix(".why").write_text(reason + "\n")
        except FileNotFoundError:
            return   # already set aside (or pruned) by another process
        except OSError as e:
            self._warn_once(("quarantine", path), f"hkjit: cache entry {path} is bad ({reason}) but could "
                                                  f"not be moved aside: {e}; compiling it in memory instead")
            return
        warnings.warn(f"hkjit: cache entry {path} was bad ({reason}); moved to {target} and compiling it "
                      "again", CacheWarning, stacklevel=4)

    # ---- internals: maintenance

    def _entry_files(self):
        entries = self.root / "entries"
        if entries.is_dir():
            yield from sorted(entries.glob(f"*/*{ENTRY_SUFFIX}"))

    def _quarantine_files(self):
        qdir = self.root / "quarantine"
        if qdir.is_dir():
            yield from (p for p in qdir.iterdir() if p.is_file())

    def _remove_stale_temps(self, key: str | None = None):
        """Temp files left by killed writers. A temp file whose key lock we can take has no writer:
        the caller holds that lock already when `key` is given."""
        folder = self.root / "entries" / key[:2] if key else self.root / "entries"
        pattern = f".{key}.*.tmp" if key else "*/.*.tmp"
        for tmp in list(folder.glob(pattern)) if folder.is_dir() else ():
            if key is None and not self._writer_gone(tmp):
                continue
            with suppress(OSError):
                tmp.unlink()

    def _writer_gone(self, tmp: Path) -> bool:
        if fcntl is None:
            with suppress(OSError):
                return time.time() - tmp.stat().st_mtime > _STALE_TEMP_S
            return False
        key = tmp.name[1:].split(".", 1)[0]
        lock = _KeyLock(self.lock_path(key))
        with suppress(OSError):
            if lock.try_acquire():
                lock.release()
                return tmp.exists()
        return False

    def _evict(self, max_size: int, grace: float, report: dict):
        for path in list(self._quarantine_files()):
            with suppress(OSError):
                path.unlink()
        files = []
        for path in self._entry_files():
            with suppress(FileNotFoundError):
                st = path.stat()
                files.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in files)
        recent = time.time_ns() - int(grace * 1e9)
        for mtime_ns, size, path in sorted(files):
            if total <= max_size:
                break
            if mtime_ns > recent or not self._evict_one(path, mtime_ns):
                report["skipped_in_use"] += 1
                continue
            total -= size
            report["removed"] += 1
            report["freed"] += size
        report["kept"] = len(files) - report["removed"]
        report["bytes"] = total

    def _evict_one(self, path: Path, scanned_mtime_ns: int) -> bool:
        lock = _KeyLock(self.lock_path(path.stem))
        if not lock.try_acquire():
            return False   # being built or rebuilt right now
        try:
            if path.stat().st_mtime_ns != scanned_mtime_ns:
                return False   # used (or replaced) since we scanned it
            path.unlink()
            return True
        except FileNotFoundError:
            return False
        finally:
            lock.release()


def _default_root() -> str:
    import platformdirs
    return platformdirs.user_cache_dir("hkjit")


def _lock_timeout() -> float:
    value = os.environ.get("HKJIT_LOCK_TIMEOUT", "")
    try:
        return float(value) if value else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise InvalidArgumentError(f"HKJIT_LOCK_TIMEOUT={value!r} is not a number of seconds") from None


_default: Cache | None = None
_default_mutex = threading.Lock()


def default_cache() -> Cache:
    """The process-wide cache (HKJIT_CACHE_DIR, HKJIT_BUNDLE_PATH, HKJIT_OFFLINE, HKJIT_CACHE_MAX_SIZE)."""
    global _default
    if _default is None:
        with _default_mutex:
            if _default is None:
                _default = Cache()
    return _default


def reset_default_cache():
    """Forget the process-wide cache so the next default_cache() reads the environment again."""
    global _default
    with _default_mutex:
        _default = None
