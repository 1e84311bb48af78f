"""hkjit's kernel cache: keys, the entry file format, cross-process single-flight, bundles.

One subject per module: `key` (keys and where their files live), `entry` (the entry file format),
`lock` (the per-key flock), `bundle` (reading bundles), `prune` (eviction), `pch` (precompiled
headers), `store` (the Cache).
This package face re-exports what the rest of hkjit uses and owns the process-wide cache.

Disk layout under the root (created 0700: a cache others can write is a cache others can poison):

    entries/<key[:2]>/<key>.hkc           one file per compiled kernel (fan-out keeps dirs small)
    entries/<key[:2]>/.<key>.<pid>.<rand>.tmp   an entry being written; renamed into place whole
    locks/<key>.lock                      flock'd while one process compiles <key>
    locks/prune.lock                      flock'd while one process evicts entries
    quarantine/                           entries found corrupt or unloadable, kept for post-mortems
    toolchains.json                       compilers of kernels imported from bundles (see toolchains())
    pch/<key[:2]>/<key>.hkpch             precompiled headers, in the entry format (see `pch`)

The entry file format is described in `entry`, the lookup order in `Cache`.

Concurrency rules (they are what makes 16-64 processes on one cold key safe):
* Only the holder of locks/<key>.lock writes entries/<key>.hkc, always to a temp file that is
  `os.replace`d into place: a reader sees the old whole file, the new whole file, or nothing.
* Readers take no lock. A file unlinked (pruned, replaced) after a reader opened it stays readable.
* flock dies with its holder, so a compile killed by SIGKILL leaves no stuck lock (PyTorch's O_EXCL
  lock files do: pytorch#59146). Its temp file is removed by the next holder of that key's lock.
* Prune evicts an entry only while holding that entry's key lock and only if it was not used in
  the last `grace` seconds; loading an entry refreshes its mtime, which is the LRU clock.
"""

import importlib
import threading

from ..errors import CacheWarning
from .entry import (ENTRY_MAGIC, CorruptEntryError, Entry, EntryInfo, decode_entry, encode_entry,
                    hkjit_version, read_entry_file, read_entry_info, write_atomically)
from .key import CACHE_FORMAT_VERSION, ENTRY_SUFFIX, check_key, entry_relpath, lock_relpath, make_key
from .store import DEFAULT_LOCK_TIMEOUT_S, PRUNE_GRACE_S, Cache, bundle_paths_from_env, parse_size, set_offline

# Imported on first use (PEP 562): a warm start reads entries but neither bundles nor locks.
_LAZY = {"BUNDLE_FORMAT_VERSION": "bundle", "BUNDLE_MANIFEST": "bundle", "Bundle": "bundle", "KeyLock": "lock"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    return value

__all__ = ["BUNDLE_FORMAT_VERSION", "BUNDLE_MANIFEST", "CACHE_FORMAT_VERSION", "DEFAULT_LOCK_TIMEOUT_S",
           "ENTRY_MAGIC", "ENTRY_SUFFIX", "PRUNE_GRACE_S", "Bundle", "Cache", "CacheWarning",
           "CorruptEntryError", "Entry", "EntryInfo", "KeyLock", "bundle_paths_from_env", "check_key",
           "decode_entry", "default_cache", "encode_entry", "entry_relpath", "hkjit_version", "lock_relpath",
           "make_key", "parse_size", "read_entry_file", "read_entry_info", "reset_default_cache",
           "set_offline", "write_atomically"]

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
    """Forget the process-wide cache so the next default_cache() reads the environment again. The
    one way to reset it (tests, benchmarks that switch HKJIT_CACHE_DIR)."""
    global _default
    with _default_mutex:
        _default = None
