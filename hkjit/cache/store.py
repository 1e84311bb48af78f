"""The Cache: the memory table in front of bundles and the disk cache, single-flight builds, and
the maintenance calls (`hkjit cache ...`). See the package docstring for the disk layout and the
concurrency rules this class keeps."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
import time
import warnings
from contextlib import suppress
from pathlib import Path
from typing import Callable

from ..errors import CacheError, CacheWarning, InvalidArgumentError, OfflineMissError
from . import index as index_mod
from .entry import CorruptEntryError, Entry, EntryInfo, encode_entry, read_entry_file, read_entry_info, \
    place_all, write_atomically
from .key import ENTRY_SUFFIX, check_key, entry_relpath, lock_relpath
from .perms import check_private, make_private_dirs

DEFAULT_LOCK_TIMEOUT_S = 600.0
PRUNE_GRACE_S = 60.0        # an entry used this recently is "in use": prune never evicts it
_TOOLCHAINS_FILE = "toolchains.json"   # toolchains of kernels imported from bundles
_MAX_TOOLCHAINS_FILE = 1 << 20          # a few toolchains are a few KB; read no more than this
_TRUE = ("1", "true", "yes", "on")


def bundle_paths_from_env() -> list[str]:
    """The bundles HKJIT_BUNDLE_PATH lists (os.pathsep-separated)."""
    return [p for p in os.environ.get("HKJIT_BUNDLE_PATH", "").split(os.pathsep) if p]


def _bundles(paths) -> list:
    """Bundle objects for `paths` (given as paths or Bundles); bundle.py is imported only here, so a
    process that uses no bundle never loads it."""
    if not paths:
        return []
    from .bundle import Bundle
    return [p if isinstance(p, Bundle) else Bundle(p) for p in paths]


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
    """Compiled kernels by key. Lookup order: the in-memory table, then read-only bundles
    (HKJIT_BUNDLE_PATH), then the writable disk cache (HKJIT_CACHE_DIR, else
    `platformdirs.user_cache_dir("hkjit")`), then a build under the key's lock."""

    def __init__(self, root: str | os.PathLike | None = None, *, bundle_paths=None, offline=None,
                 max_size=None, lock_timeout: float | None = None):
        if root is None:
            root = os.environ.get("HKJIT_CACHE_DIR") or _default_root()
        self.root = Path(root).expanduser()
        self.bundles = _bundles(bundle_paths_from_env() if bundle_paths is None else bundle_paths)
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

    @property
    def pch(self):
        """The precompiled headers kept beside the kernels (a cache.pch.PchStore)."""
        from .pch import PchStore   # here: only a compile reads or writes them
        return PchStore(self)

    def entry_path(self, key: str) -> Path:
        return self.root / entry_relpath(key)

    def lock_path(self, key: str) -> Path:
        return self.root / lock_relpath(key)

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
        """toolchains.json's toolchains; a file that is not a list of them is ignored with a warning
        (it must never break lookups on a host with no compiler)."""
        from .bundle import MAX_TOOLCHAINS, toolchain_problem
        path = self.root / _TOOLCHAINS_FILE
        try:
            with open(path, "rb") as f:
                found = json.loads(f.read(_MAX_TOOLCHAINS_FILE + 1))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            found = e
        if isinstance(found, list) and len(found) <= MAX_TOOLCHAINS \
                and not any(toolchain_problem(t) for t in found):
            return found
        self._warn_once(("toolchains", path), f"hkjit: {path} is not a list of toolchains hkjit wrote; "
                                              "ignoring it (`hkjit cache clear` removes it, a cache import "
                                              "writes it again)")
        return []

    def put_all(self, items) -> int:
        """Store every (key, code, meta) of `items` or none of them (a bundle import; see
        entry.place_all). Entries already on disk are kept (same key, same meaning). Returns how
        many were added."""
        def staged():
            seen = set()
            for key, code, meta in items:
                path = self.entry_path(check_key(key))
                if path.exists() or path in seen:
                    continue
                seen.add(path)
                self._mkdirs(path.parent.relative_to(self.root))
                yield path, encode_entry(key, code, meta)
        return place_all(staged())

    # ---- maintenance

    def entries(self) -> list[EntryInfo]:
        from .prune import entry_files
        infos = []
        for path in entry_files(self.root):
            with suppress(FileNotFoundError):   # pruned while we listed
                infos.append(read_entry_info(path))
        return infos

    def stats(self) -> dict:
        from .prune import quarantine_files
        infos = self.entries()
        quarantined = [p for p in quarantine_files(self.root) if p.suffix == ENTRY_SUFFIX]
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
        from .prune import entry_files
        self.check_private()
        problems = []
        for path in entry_files(self.root):
            key = path.stem
            try:
                read_entry_file(path, key, touch=False)
            except FileNotFoundError:
                continue
            except CorruptEntryError as e:
                problems.append((path, str(e)))
                self._set_aside(path, (e.stat.st_dev, e.stat.st_ino), str(e))
            except OSError as e:
                problems.append((path, f"unreadable: {e}"))
        return problems + self._verify_index()

    def _verify_index(self) -> list[tuple[Path, str]]:
        return index_mod.verify_records(self.root, lambda key: read_entry_file(
            self.entry_path(check_key(key)), key, touch=False)[0])

    def prune(self, max_size, *, grace: float | None = None, wait: bool = True) -> dict:
        """Evict least recently used entries until the cache holds at most `max_size` bytes.

        Never evicts an entry used in the last `grace` seconds or one whose key lock is held (being
        built); readers that already opened an evicted file keep reading it. Quarantined files go
        first, then stale temp files. One pruner at a time (locks/prune.lock); with wait=False a
        prune already running elsewhere makes this call return at once."""
        from .lock import KeyLock
        from .prune import evict, remove_stale_temps
        max_size = parse_size(max_size)
        grace = PRUNE_GRACE_S if grace is None else grace
        report = dict(removed=0, freed=0, kept=0, bytes=0, skipped_in_use=0, ran=False)
        lock = KeyLock(self.root / "locks" / "prune.lock")
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
            remove_stale_temps(self.root)
            evict(self.root, max_size, grace, report)
        finally:
            lock.release()
        return report

    def clear(self) -> dict:
        """Remove every entry not in use right now (see prune), the quarantine and the memory table."""
        from .pch import PCH_DIR
        from .prune import quarantine_files
        report = self.prune(0, grace=0)
        for path in quarantine_files(self.root):
            with suppress(OSError):
                path.unlink()
        # Everything else hkjit writes here: the key index (spec -> key shortcuts), generated sources,
        # precompiled headers and the imported toolchains. Harmless when stale, but `clear` means clear.
        for folder in ("index", "sources", PCH_DIR):
            shutil.rmtree(self.root / folder, ignore_errors=True)
        with suppress(OSError):
            (self.root / _TOOLCHAINS_FILE).unlink()
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
        self.check_private()
        path = self.entry_path(key)
        try:
            entry, st = read_entry_file(path, key)
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
                from .prune import remove_stale_temps
                remove_stale_temps(self.root, key)
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

    def _lock(self, key: str) -> KeyLock | None:
        """This key's compile lock, or None when the cache dir is unusable (we then build in memory)."""
        from .lock import KeyLock   # here: a process that only reads the cache never locks
        lock = KeyLock(self.lock_path(key))
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

    def mkdirs(self, relative) -> Path:
        """root/relative, created (each level 0700) where missing; OSError when it cannot be."""
        return self._mkdirs(relative)

    def _mkdirs(self, relative) -> Path:
        """Create root/relative and every missing folder on the way, each 0700, after checking that
        no other user can write the root or entries/ (UnsafeCacheError)."""
        self.check_private()
        make_private_dirs(self.root)
        current = self.root
        for part in Path(relative).parts:
            current = current / part
            current.mkdir(mode=0o700, exist_ok=True)
        return current

    def check_private(self) -> None:
        """UnsafeCacheError when another user could write the cache root or its entries/ (see perms)."""
        check_private(self.root, follow=True)
        check_private(self.root / "entries", follow=False)

    def _warn_once(self, tag, message: str):
        if tag not in self._warned:
            self._warned.add(tag)
            warnings.warn(message, CacheWarning, stacklevel=4)

    def set_aside(self, path: Path, seen: tuple | None, reason: str):
        """Move a bad file of this cache to quarantine/ (see _set_aside)."""
        self._set_aside(path, seen, reason)

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
            with suppress(OSError):   # a fresh file, never through a planted link
                fd = os.open(target.with_suffix(".why"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(reason + "\n")
        except FileNotFoundError:
            return   # already set aside (or pruned) by another process
        except OSError as e:
            self._warn_once(("quarantine", path), f"hkjit: cache entry {path} is bad ({reason}) but could "
                                                  f"not be moved aside: {e}; compiling it in memory instead")
            return
        warnings.warn(f"hkjit: cache entry {path} was bad ({reason}); moved to {target} and compiling it "
                      "again", CacheWarning, stacklevel=4)


def _default_root() -> str:
    import platformdirs
    return platformdirs.user_cache_dir("hkjit")


def _lock_timeout() -> float:
    value = os.environ.get("HKJIT_LOCK_TIMEOUT", "")
    try:
        return float(value) if value else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise InvalidArgumentError(f"HKJIT_LOCK_TIMEOUT={value!r} is not a number of seconds") from None
