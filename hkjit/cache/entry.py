"""The entry file format: header | metadata (JSON) | sha256 | payload.

header = magic, format version, metadata length, payload length; the sha256 covers header,
metadata and payload, so a truncated file or a flipped bit anywhere is caught on load. Files are
written whole and renamed into place (write_atomically)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from contextlib import suppress
from pathlib import Path

from .._version import __version__
from ..errors import CacheError, InvalidArgumentError
from ..values import Mutable
from .key import CACHE_FORMAT_VERSION

ENTRY_MAGIC = b"HKJITCE\x00"

_HEADER = struct.Struct("<8sIIQ")   # magic, format version, metadata length, payload length
_DIGEST_SIZE = 32
_MAX_METADATA = 16 << 20            # a corrupt length must not make us allocate gigabytes
_TOUCH_EVERY_S = 10.0       # refresh an entry's mtime on load at most this often (fewer metadata writes)


class CorruptEntryError(CacheError):
    """An entry file failed its checks (magic, format, lengths, key or checksum)."""

    def __init__(self, message, stat=None):
        super().__init__(message)
        self.stat = stat


def hkjit_version() -> str:
    """The hkjit version written into entries and bundle manifests."""
    return __version__


class Entry(Mutable):
    """A kernel's code and metadata under its key; `source` says where it came from ("built",
    "disk:<path>", "bundle:<path>") and is not compared."""
    __slots__ = ("key", "code", "meta", "source")
    _compare = ("key", "code", "meta")

    def __init__(self, key: str, code: bytes, meta: dict, source: str = ""):
        self.key, self.code, self.meta, self.source = key, code, meta, source


class EntryInfo(Mutable):
    """What `entries()` lists: an entry's header and metadata, without reading its payload. `size`:
    bytes on disk; `created`: when it was compiled (metadata); `last_used`: the mtime, refreshed on
    load (the LRU clock); `problem`: set when the header or metadata cannot be read."""
    __slots__ = ("key", "path", "size", "code_size", "created", "last_used", "hkjit_version", "meta", "problem")

    def __init__(self, key: str, path: Path, size: int, code_size: int, created: float, last_used: float,
                 hkjit_version: str, meta: dict, problem: str | None = None):
        self.key, self.path, self.size, self.code_size, self.created = key, path, size, code_size, created
        self.last_used, self.hkjit_version, self.meta, self.problem = last_used, hkjit_version, meta, problem


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


def read_entry_file(path: Path, key: str, touch: bool = True) -> tuple[Entry, os.stat_result]:
    """The entry in `path`, checked whole against `key`; a load refreshes its mtime (the LRU clock)
    unless touch=False. A CorruptEntryError carries the stat of the file read, so the caller sets
    aside that file and not one another process has put there since."""
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


def write_temp(path: Path, data: bytes, mode: int = 0o644) -> Path:
    """Write `data` whole (fsynced) to a fresh temp file beside `path` and return its name; the temp
    file is removed if anything fails (a full disk included). O_EXCL: never through a planted link."""
    import secrets   # here: reading entries (a warm start) never writes one
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())   # else a power cut after the rename can leave a zero-length entry
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def write_atomically(path: Path, data: bytes, mode: int = 0o644):
    """Write `data` to a temp file beside `path`, fsync it, and rename it over `path`, so no reader
    ever sees a partial file. The temp file is removed if anything fails."""
    tmp = write_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def place_all(items) -> int:
    """Write every (path, data) of `items` or none: each is staged as a temp file beside its path,
    and all are renamed in only once every one is staged. On any failure (a bad item raised by the
    iterator, a full disk) the temps and every file placed by this call are removed, leaving the
    folder as it was. Returns how many files were placed."""
    staged, placed = [], []
    try:
        for path, data in items:
            staged.append((write_temp(path, data), path))
        for tmp, path in staged:
            os.replace(tmp, path)
            placed.append(path)
    except BaseException:
        for tmp, _ in staged:
            with suppress(OSError):
                os.unlink(tmp)
        for path in placed:
            with suppress(OSError):
                os.unlink(path)
        raise
    return len(placed)
