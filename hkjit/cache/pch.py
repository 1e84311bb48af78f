"""Precompiled headers (PCH) in the cache: a second kind of entry, beside the kernels.

A PCH is a compiler's parsed form of one kernel source and the tile-library headers it includes,
for one compiler, target and set of options (hkjit/pch.py makes the key and decides when to use
one). It is kept with the same care as a kernel:

    pch/<key[:2]>/<key>.hkpch     the entry file format (header | metadata | sha256 | payload)

written whole and renamed into place, in folders created 0700 after the same ownership checks,
built under the key's lock (locks/<key>.lock: one process builds it, the others wait and read it),
read without a lock and checked whole against its key and checksum on every read. A file that
fails its checks is moved to quarantine/ and built again. The caller gets the checked bytes and
hands the compiler its own private copy of them, never this file, so nothing can swap the PCH
between the check and the compile. A PCH is only a speed-up: any failure to read, lock or write
here leaves the compile to run without one or to keep the PCH in memory."""

import os
from contextlib import suppress

from .entry import CorruptEntryError, encode_entry, read_entry_file, write_atomically
from .key import check_key
from .lock import KeyLock

PCH_DIR = "pch"
PCH_SUFFIX = ".hkpch"


def pch_relpath(key: str) -> str:
    return f"{PCH_DIR}/{key[:2]}/{key}{PCH_SUFFIX}"


class PchStore:
    """The PCH entries of one Cache (`cache.pch`)."""

    def __init__(self, cache):
        self.cache = cache

    def path(self, key: str):
        return self.cache.root / pch_relpath(check_key(key))

    def get(self, key: str) -> bytes | None:
        """The PCH stored under `key`, checked whole; None when there is none or it was bad (then
        it is set aside, with a warning, like a bad kernel entry)."""
        self.cache.check_private()
        path = self.path(key)
        try:
            entry, _ = read_entry_file(path, key, touch=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except CorruptEntryError as e:
            self.cache.set_aside(path, (e.stat.st_dev, e.stat.st_ino), f"precompiled header: {e}")
            return None
        except OSError:
            return None
        return entry.code

    def get_or_build(self, key: str, build) -> tuple[bytes, bool]:
        """(bytes, built_now): the stored PCH, else `build()` -> (bytes, metadata) run under the
        key's lock and stored. Without a usable cache folder the PCH is built and not stored."""
        data = self.get(key)
        if data is not None:
            return data, False
        lock = KeyLock(self.cache.lock_path(key))
        try:
            self.cache.mkdirs("locks")
            got = lock.acquire(self.cache.lock_timeout)
        except OSError:
            got = False
        if not got:
            return build()[0], True
        try:
            data = self.get(key)   # built by another process while we waited
            if data is not None:
                return data, False
            path = self.path(key)
            for stale in path.parent.glob(f".{key}.*.tmp") if path.parent.is_dir() else ():
                with suppress(OSError):   # a writer killed mid-write: we hold its key's lock
                    stale.unlink()
            data, meta = build()
            try:
                self.cache.mkdirs(path.parent.relative_to(self.cache.root))
                write_atomically(path, encode_entry(key, data, meta))
            except OSError:
                pass   # a full or read-only cache: the next process builds it again
            return data, True
        finally:
            lock.release()

    def discard(self, key: str) -> None:
        """The compiler would not use this PCH (hkjit/pch.py then compiled without it and said so):
        remove it, so the next compile builds a fresh one."""
        try:
            os.unlink(self.path(key))
        except OSError:
            pass
