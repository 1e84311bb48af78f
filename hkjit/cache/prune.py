"""Keeping a cache directory in bounds: LRU eviction under key locks, removal of temp files left
by killed writers, and the listings of entry and quarantined files that maintenance walks.

Eviction takes an entry's key lock and removes it only if it was not used since the scan (a load
refreshes an entry's mtime, the LRU clock): an entry being built or just used stays."""

import time
from contextlib import suppress
from pathlib import Path

from .key import ENTRY_SUFFIX, lock_relpath
from .lock import HAVE_FLOCK, KeyLock

_STALE_TEMP_S = 3600.0      # temp files this old are removed even without their key lock (Windows)


def entry_files(root: Path):
    entries = root / "entries"
    if entries.is_dir():
        yield from sorted(p for p in entries.glob(f"*/*{ENTRY_SUFFIX}") if p.is_file())   # not a planted folder


def quarantine_files(root: Path):
    qdir = root / "quarantine"
    if qdir.is_dir():
        yield from (p for p in qdir.iterdir() if p.is_file())


def remove_stale_temps(root: Path, key: str | None = None):
    """Temp files left by killed writers. A temp file whose key lock we can take has no writer:
    the caller holds that lock already when `key` is given."""
    folder = root / "entries" / key[:2] if key else root / "entries"
    pattern = f".{key}.*.tmp" if key else "*/.*.tmp"
    for tmp in list(folder.glob(pattern)) if folder.is_dir() else ():
        if key is None and not _writer_gone(root, tmp):
            continue
        with suppress(OSError):
            tmp.unlink()


def evict(root: Path, max_size: int, grace: float, report: dict):
    """Remove quarantined files, then least recently used entries not used in the last `grace`
    seconds, until the entries hold at most `max_size` bytes. Counts go into `report`."""
    for path in list(quarantine_files(root)):
        with suppress(OSError):
            path.unlink()
    files = []
    for path in entry_files(root):
        with suppress(FileNotFoundError):
            st = path.stat()
            files.append((st.st_mtime_ns, st.st_size, path))
    total = sum(size for _, size, _ in files)
    recent = time.time_ns() - int(grace * 1e9)
    for mtime_ns, size, path in sorted(files):
        if total <= max_size:
            break
        if mtime_ns > recent or not _evict_one(root, path, mtime_ns):
            report["skipped_in_use"] += 1
            continue
        total -= size
        report["removed"] += 1
        report["freed"] += size
    report["kept"] = len(files) - report["removed"]
    report["bytes"] = total


def _writer_gone(root: Path, tmp: Path) -> bool:
    if not HAVE_FLOCK:
        with suppress(OSError):
            return time.time() - tmp.stat().st_mtime > _STALE_TEMP_S
        return False
    key = tmp.name[1:].split(".", 1)[0]
    lock = KeyLock(root / lock_relpath(key))
    with suppress(OSError):
        if lock.try_acquire():
            lock.release()
            return tmp.exists()
    return False


def _evict_one(root: Path, path: Path, scanned_mtime_ns: int) -> bool:
    lock = KeyLock(root / lock_relpath(path.stem))
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
