"""The on-disk cache: keys, entry format, single-flight across processes, corruption, crashes,
degraded (full, unwritable, read-only) cache directories, LRU pruning.

Build functions here are fakes that count their calls in a file, so a count survives the process
that made it; everything else (files, locks, processes, signals) is real."""

import builtins
import errno
import hashlib
import io
import multiprocessing as mp
import os
import signal
import stat
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

from hkjit import cache as cache_mod
from hkjit.cache import Cache, CacheWarning, decode_entry, encode_entry, make_key
from hkjit.cache import key as cache_key, store as cache_store
from hkjit.errors import CacheError, InvalidArgumentError, OfflineMissError

FORK = mp.get_context("fork")
PAYLOAD = b"\x7fELF" + bytes(range(256)) * 16


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch):
    for name in ("HKJIT_CACHE_DIR", "HKJIT_BUNDLE_PATH", "HKJIT_OFFLINE", "HKJIT_CACHE_MAX_SIZE",
                 "HKJIT_LOCK_TIMEOUT", "HKJIT_RECORD"):
        monkeypatch.delenv(name, raising=False)
    cache_mod.set_offline(None)
    yield
    cache_mod.set_offline(None)
    cache_mod.reset_default_cache()


def key_of(name: str) -> str:
    return make_key({"test": name})


def compiles(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def counting_build(counter: Path, payload: bytes = PAYLOAD, delay: float = 0.0):
    """A build function that records each call (one line per compile) in `counter`."""
    def build():
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        if delay:
            time.sleep(delay)
        return payload, {"op": "test", "regs": 42}
    return build


def leftovers(root: Path) -> list[Path]:
    """Temp files and lock files a clean run must not leave behind."""
    return sorted(root.glob("entries/*/.*.tmp")) + sorted(root.glob("locks/*.lock"))


# ------------------------------------------------------------------------------------------ keys

BASE_PARTS = {
    "op": "gemm",
    "source": hashlib.sha256(b"template <int BM> struct gemm {};").hexdigest(),
    "files": {"include/hk/hk.hpp": "a" * 64, "include/hk/cdna/mfma.hpp": "b" * 64},
    "params": [["block_m", 256], ["block_n", 256], ["dtype", "bfloat16"]],
    "compiler": "clang 22.1.0",
    "flags": ["-O3", "-std=c++20", "--offload-arch=gfx950"],
    "target": "gfx950",
    "hkjit": "0.1.0",
}


def test_key_is_canonical_sha256_hex():
    reordered = dict(reversed(list(BASE_PARTS.items())))
    key = make_key(BASE_PARTS)
    assert key == make_key(reordered)
    assert len(key) == 64 and int(key, 16) >= 0


@pytest.mark.parametrize("part, value", [
    ("files", {"include/hk/hk.hpp": "a" * 64, "include/hk/cdna/mfma.hpp": "c" * 64}),  # a header changed
    ("flags", ["-O3", "-std=c++20", "--offload-arch=gfx950", "-ffast-math"]),        # a flag added
    ("params", [["block_m", 128], ["block_n", 256], ["dtype", "bfloat16"]]),          # a tile size
    ("target", "gfx942"),                                                              # another chip
    ("target", "gfx950:sramecc+"),                                                     # target features
    ("compiler", "clang 22.1.1"),
    ("hkjit", "0.1.1"),
    ("source", hashlib.sha256(b"template <int BM> struct gemm { };").hexdigest()),
])
def test_key_changes_with_every_part(part, value):
    assert make_key({**BASE_PARTS, part: value}) != make_key(BASE_PARTS)


def test_key_changes_with_cache_format_version(monkeypatch):
    before = make_key(BASE_PARTS)
    monkeypatch.setattr(cache_key, "CACHE_FORMAT_VERSION", cache_key.CACHE_FORMAT_VERSION + 1)
    assert make_key(BASE_PARTS) != before


def test_key_rejects_non_json_and_reserved_parts():
    with pytest.raises(InvalidArgumentError, match="JSON"):
        make_key({"flags": {"-O3"}})
    with pytest.raises(InvalidArgumentError, match="reserved"):
        make_key({"hkjit_cache_format": 1})
    with pytest.raises(InvalidArgumentError, match="not a cache key"):
        Cache("/nonexistent").get("../../etc/passwd")


# ------------------------------------------------------------------------------- entry format

def test_entry_round_trip_and_every_mismatch_is_corrupt():
    key = key_of("fmt")
    blob = encode_entry(key, PAYLOAD, {"vgprs": 128})
    entry, info = decode_entry(blob, key)
    assert (entry.key, entry.code, entry.meta) == (key, PAYLOAD, {"vgprs": 128})
    assert info["code_size"] == len(PAYLOAD) and info["format"] == cache_mod.CACHE_FORMAT_VERSION
    assert blob.startswith(cache_mod.ENTRY_MAGIC)
    bad = {
        "magic": b"XXXXXXXX" + blob[8:],
        "key": blob,   # decoded under another key below
        "truncated": blob[:-1],
        "trailing": blob + b"\0",
        "checksum": blob[:-1] + bytes([blob[-1] ^ 1]),
    }
    for what, data in bad.items():
        with pytest.raises(cache_mod.CorruptEntryError):
            decode_entry(data, key_of("other") if what == "key" else key)


# ----------------------------------------------------------------------------- miss, then hits

def test_miss_then_hit_memory_then_disk(tmp_path):
    root, counter = tmp_path / "cache", tmp_path / "compiles"
    key = key_of("miss-hit")
    cache = Cache(root)
    assert cache.get(key) is None
    entry, built = cache.get_or_build(key, counting_build(counter))
    assert built and entry.code == PAYLOAD and compiles(counter) == 1
    assert cache.entry_path(key).is_file()

    # The memory table answers repeat calls without touching the disk: remove the disk copy first.
    os.rename(cache.entry_path(key), tmp_path / "moved")
    entry2, built2 = cache.get_or_build(key, counting_build(counter))
    assert not built2 and entry2.code == PAYLOAD and compiles(counter) == 1
    os.rename(tmp_path / "moved", cache.entry_path(key))

    # A new process (a fresh Cache) finds it on disk: no compile.
    entry3, built3 = Cache(root).get_or_build(key, counting_build(counter))
    assert not built3 and entry3.code == PAYLOAD and entry3.meta == {"op": "test", "regs": 42}
    assert entry3.source.startswith("disk:") and compiles(counter) == 1
    assert leftovers(root) == []


def test_cache_dirs_are_private(tmp_path):
    root = tmp_path / "a" / "cache"
    Cache(root).get_or_build(key_of("perm"), lambda: (b"x", {}))
    for folder in (root, root / "entries", root / "locks", Cache(root).entry_path(key_of("perm")).parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_root_from_environment_and_platformdirs(tmp_path, monkeypatch):
    import platformdirs
    assert Cache().root == Path(platformdirs.user_cache_dir("hkjit"))
    monkeypatch.setenv("HKJIT_CACHE_DIR", str(tmp_path / "env"))
    assert Cache().root == tmp_path / "env"
    assert cache_mod.default_cache() is cache_mod.default_cache()


def test_threads_of_one_process_compile_once(tmp_path):
    import threading
    counter, key, cache = tmp_path / "compiles", key_of("threads"), Cache(tmp_path / "cache")
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        cache.get_or_build(key, counting_build(counter, delay=0.1)))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert compiles(counter) == 1
    assert sorted(built for _, built in results) == [False] * 7 + [True]


# ----------------------------------------------------------------------- many processes, one key

def _cold_start_worker(root, counter, key, barrier, results):
    try:
        barrier.wait()
        entry, built = Cache(root).get_or_build(key, counting_build(Path(counter), delay=0.3))
        results.put(("ok", built, hashlib.sha256(entry.code).hexdigest()))
    except BaseException as e:  # reported to the test, which fails on it
        results.put(("error", repr(e), ""))


def test_16_processes_one_cold_key_compile_once(tmp_path):
    root, counter, key = tmp_path / "cache", tmp_path / "compiles", key_of("cold")
    n = 16
    barrier, results = FORK.Barrier(n), FORK.Queue()
    procs = [FORK.Process(target=_cold_start_worker, args=(root, counter, key, barrier, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=30)
    assert [o for o in outcomes if o[0] != "ok"] == []
    assert compiles(counter) == 1
    assert sum(built for _, built, _ in outcomes) == 1
    assert {digest for _, _, digest in outcomes} == {hashlib.sha256(PAYLOAD).hexdigest()}
    entry, _ = decode_entry(Cache(root).entry_path(key).read_bytes(), key)
    assert entry.code == PAYLOAD
    assert list(root.glob("entries/*/*")) == [Cache(root).entry_path(key)]
    assert leftovers(root) == [] and not (root / "quarantine").exists()


# ------------------------------------------------------------------------------------ corruption

def _truncate_to(n):
    return lambda blob: blob[:n]


def _flip_bit_at(offset):
    def flip(blob):
        i = offset % len(blob)
        return blob[:i] + bytes([blob[i] ^ 0x10]) + blob[i + 1:]
    return flip


@pytest.mark.parametrize("damage", [
    _truncate_to(0), _truncate_to(10), _truncate_to(60), _truncate_to(-1),
    _flip_bit_at(0), _flip_bit_at(12), _flip_bit_at(40), _flip_bit_at(-1), _flip_bit_at(-2000),
], ids=["trunc-empty", "trunc-header", "trunc-meta", "trunc-last-byte",
        "flip-magic", "flip-version", "flip-metadata", "flip-last-byte", "flip-payload"])
def test_damaged_entry_is_set_aside_and_rebuilt(tmp_path, damage):
    root, counter, key = tmp_path / "cache", tmp_path / "compiles", key_of("damage")
    Cache(root).get_or_build(key, counting_build(counter))
    path = Cache(root).entry_path(key)
    path.write_bytes(damage(path.read_bytes()))

    cache = Cache(root)
    with pytest.warns(CacheWarning, match="was bad"):
        assert cache.get(key) is None
    assert not path.exists()
    assert len(list((root / "quarantine").glob("*.hkc"))) == 1

    entry, built = cache.get_or_build(key, counting_build(counter))
    assert built and entry.code == PAYLOAD and compiles(counter) == 2
    assert decode_entry(path.read_bytes(), key)[0].code == PAYLOAD


def test_damaged_entry_found_by_get_or_build_is_rebuilt(tmp_path):
    root, counter, key = tmp_path / "cache", tmp_path / "compiles", key_of("damage2")
    Cache(root).get_or_build(key, counting_build(counter))
    path = Cache(root).entry_path(key)
    path.write_bytes(_flip_bit_at(-100)(path.read_bytes()))
    with pytest.warns(CacheWarning):
        entry, built = Cache(root).get_or_build(key, counting_build(counter))
    assert built and entry.code == PAYLOAD and compiles(counter) == 2


def test_unloadable_image_is_invalidated_and_rebuilt(tmp_path):
    root, counter, key = tmp_path / "cache", tmp_path / "compiles", key_of("invalid-image")
    Cache(root).get_or_build(key, counting_build(counter))
    cache = Cache(root)
    _, built = cache.get_or_build(key, counting_build(counter))
    assert not built
    with pytest.warns(CacheWarning, match="hipErrorInvalidImage"):
        cache.invalidate(key, "hipModuleLoadData: hipErrorInvalidImage")
    why = list((root / "quarantine").glob("*.why"))
    assert len(why) == 1 and "hipErrorInvalidImage" in why[0].read_text()
    _, built = cache.get_or_build(key, counting_build(counter))
    assert built and compiles(counter) == 2 and cache.entry_path(key).is_file()


# ------------------------------------------------------------------------- crashes and lock waits

def _hold_lock_while_compiling(root, started, key):
    def slow_build():
        Path(started).write_text(str(os.getpid()))
        time.sleep(120)
        return b"never", {}
    Cache(root).get_or_build(key, slow_build)


def _lock_is_held(path: Path) -> bool:
    import fcntl
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _wait_for(path: Path, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_sigkill_during_compile_leaves_no_entry_and_no_stuck_lock(tmp_path):
    root, started, counter, key = tmp_path / "cache", tmp_path / "started", tmp_path / "compiles", key_of("kill")
    child = FORK.Process(target=_hold_lock_while_compiling, args=(root, started, key))
    child.start()
    _wait_for(started)
    cache = Cache(root, lock_timeout=10)
    assert _lock_is_held(cache.lock_path(key))
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=10)
    assert child.exitcode == -signal.SIGKILL
    assert not cache.entry_path(key).exists()

    t0 = time.monotonic()
    entry, built = cache.get_or_build(key, counting_build(counter))
    assert built and entry.code == PAYLOAD and compiles(counter) == 1
    assert time.monotonic() - t0 < 5, "the dead holder's lock should be free at once"
    assert leftovers(root) == []


def _die_between_write_and_rename(root, key):
    # The entry is fully written to its temp file; the process dies before os.replace.
    os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    Cache(root).get_or_build(key, lambda: (PAYLOAD, {}))


def test_sigkill_during_write_leaves_no_entry_and_its_temp_is_cleaned(tmp_path):
    root, counter, key = tmp_path / "cache", tmp_path / "compiles", key_of("kill-write")
    child = FORK.Process(target=_die_between_write_and_rename, args=(root, key))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL
    cache = Cache(root, lock_timeout=10)
    assert not cache.entry_path(key).exists()
    assert len(list(root.glob("entries/*/.*.tmp"))) == 1   # the dead writer's partial file

    entry, built = cache.get_or_build(key, counting_build(counter))
    assert built and compiles(counter) == 1 and cache.entry_path(key).is_file()
    assert leftovers(root) == []


def test_lock_wait_is_bounded_and_says_what_to_do(tmp_path):
    import fcntl
    root, counter, key = tmp_path / "cache", tmp_path / "compiles", key_of("timeout")
    cache = Cache(root, lock_timeout=0.3)
    cache.lock_path(key).parent.mkdir(parents=True)
    fd = os.open(cache.lock_path(key), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)   # another holder (a separate open file: flock conflicts)
    try:
        t0 = time.monotonic()
        with pytest.raises(CacheError) as err:
            cache.get_or_build(key, counting_build(counter))
        assert 0.3 <= time.monotonic() - t0 < 5
    finally:
        os.close(fd)
    assert str(cache.lock_path(key)) in str(err.value) and "HKJIT_LOCK_TIMEOUT" in str(err.value)
    assert compiles(counter) == 0


def test_lock_timeout_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HKJIT_LOCK_TIMEOUT", "2.5")
    assert Cache(tmp_path).lock_timeout == 2.5
    monkeypatch.setenv("HKJIT_LOCK_TIMEOUT", "soon")
    with pytest.raises(InvalidArgumentError, match="HKJIT_LOCK_TIMEOUT"):
        Cache(tmp_path)


# ---------------------------------------------------------------------------------------- offline

def test_offline_miss_names_the_kernel_and_never_builds(tmp_path, monkeypatch):
    counter, key = tmp_path / "compiles", key_of("offline")
    describe = lambda: "gemm on gfx950 with m=8192 n=8192 k=8192 dtype=bfloat16\n  gemm target=gfx950 m=8192"
    with pytest.raises(OfflineMissError) as err:
        Cache(tmp_path / "c", offline=True).get_or_build(key, counting_build(counter), describe=describe)
    text = str(err.value)
    assert key in text and "gemm target=gfx950 m=8192" in text and "hkjit precompile" in text
    assert compiles(counter) == 0

    cache_mod.set_offline(True)
    with pytest.raises(OfflineMissError):
        Cache(tmp_path / "c").get_or_build(key, counting_build(counter))
    cache_mod.set_offline(None)
    monkeypatch.setenv("HKJIT_OFFLINE", "1")
    with pytest.raises(OfflineMissError):
        Cache(tmp_path / "c").get_or_build(key, counting_build(counter))
    assert compiles(counter) == 0


def test_offline_hits_still_served(tmp_path):
    root, counter, key = tmp_path / "c", tmp_path / "compiles", key_of("offline-hit")
    Cache(root).get_or_build(key, counting_build(counter))
    entry, built = Cache(root, offline=True).get_or_build(key, counting_build(counter))
    assert not built and entry.code == PAYLOAD and compiles(counter) == 1


# ------------------------------------------------------------------- degraded cache directories

def test_unwritable_cache_dir_compiles_in_memory_with_a_warning(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    counter, key = tmp_path / "compiles", key_of("unwritable")
    cache = Cache(blocker / "cache")
    with pytest.warns(CacheWarning, match="HKJIT_CACHE_DIR"):
        entry, built = cache.get_or_build(key, counting_build(counter))
    assert built and entry.code == PAYLOAD
    entry, built = cache.get_or_build(key, counting_build(counter))   # memory table still works
    assert not built and compiles(counter) == 1


def _build_with_tiny_file_size_limit(root, key, results):
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit then fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entry, built = Cache(root).get_or_build(key, lambda: (PAYLOAD * 8, {}))
    results.put((built, len(entry.code), [str(w.message) for w in caught if w.category is CacheWarning]))


def test_full_disk_compiles_in_memory_with_a_warning(tmp_path):
    root, key = tmp_path / "cache", key_of("full")
    results = FORK.Queue()
    child = FORK.Process(target=_build_with_tiny_file_size_limit, args=(root, key, results))
    child.start()
    built, size, messages = results.get(timeout=30)
    child.join(timeout=10)
    assert built and size == len(PAYLOAD) * 8
    assert len(messages) == 1 and "in memory only" in messages[0]
    assert not Cache(root).entry_path(key).exists() and leftovers(root) == []


@contextmanager
def read_only(root: Path):
    """Make `root` read-only for this process. Unprivileged: chmod. As root (who ignores modes), the
    file system calls that write under `root` fail with EROFS, as on a read-only mount."""
    root = Path(root).resolve()
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [root, *root.rglob("*")]}
        for p in sorted(modes, reverse=True):
            p.chmod(modes[p] & ~0o222)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    under = lambda p: isinstance(p, (str, bytes, os.PathLike)) and Path(os.fsdecode(p)).resolve().is_relative_to(root)
    fd_under = lambda fd: isinstance(fd, int) and under(os.readlink(f"/proc/self/fd/{fd}"))
    erofs = lambda p: OSError(errno.EROFS, os.strerror(errno.EROFS), str(p))
    real = {name: getattr(os, name) for name in ("open", "mkdir", "replace", "rename", "unlink", "utime")}
    real_open = builtins.open

    def guarded_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and under(path):
            raise erofs(path)
        return real["open"](path, flags, *a, **k)

    def guarded_mkdir(path, *a, **k):
        if under(path):
            raise FileExistsError(errno.EEXIST, "exists", str(path)) if os.path.exists(path) else erofs(path)
        return real["mkdir"](path, *a, **k)

    def guard(name):
        def call(path, *a, **k):
            if under(path) or fd_under(path) or (a and under(a[0])):
                raise erofs(path)
            return real[name](path, *a, **k)
        return call

    def guarded_builtin_open(file, mode="r", *a, **k):
        if any(c in mode for c in "wax+") and under(file):
            raise erofs(file)
        return real_open(file, mode, *a, **k)

    patches = {"open": guarded_open, "mkdir": guarded_mkdir, **{n: guard(n) for n in ("replace", "rename", "unlink", "utime")}}
    for name, fn in patches.items():
        setattr(os, name, fn)
    builtins.open = io.open = guarded_builtin_open
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)
        builtins.open = io.open = real_open


def test_read_only_cache_serves_hits_and_compiles_misses_in_memory(tmp_path):
    root, counter = tmp_path / "cache", tmp_path / "compiles"
    hit, corrupt, miss = key_of("ro-hit"), key_of("ro-corrupt"), key_of("ro-miss")
    for key in (hit, corrupt):
        Cache(root).get_or_build(key, counting_build(counter))
    path = Cache(root).entry_path(corrupt)
    path.write_bytes(_flip_bit_at(-1)(path.read_bytes()))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}

    with read_only(root), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = Cache(root)
        entry, built = cache.get_or_build(hit, counting_build(counter))
        assert not built and entry.code == PAYLOAD
        for key in (corrupt, miss):
            entry, built = cache.get_or_build(key, counting_build(counter))
            assert built and entry.code == PAYLOAD
        assert cache.prune(0)["removed"] == 0
    assert compiles(counter) == 4
    assert any(w.category is CacheWarning and "in memory only" in str(w.message) for w in caught)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


# ------------------------------------------------------------------------------------------ prune

def _fill(root: Path, names, size=10_000):
    cache = Cache(root)
    keys = [key_of(n) for n in names]
    for i, key in enumerate(keys):
        cache.get_or_build(key, lambda i=i: (bytes([i]) * size, {}))
        t = time.time() - 1000 + i   # oldest first
        os.utime(cache.entry_path(key), (t, t))
    return cache, keys


def test_prune_evicts_least_recently_used_first(tmp_path):
    cache, keys = _fill(tmp_path / "c", "abcde")
    cap = sum(cache.entry_path(k).stat().st_size for k in (keys[0], keys[4]))
    Cache(tmp_path / "c").get(keys[0])   # a load refreshes the LRU clock: now the newest
    report = cache.prune(cap, grace=0)
    left = {k for k in keys if cache.entry_path(k).exists()}
    assert left == {keys[0], keys[4]}
    assert report["removed"] == 3
    assert report["bytes"] == cap


def test_prune_spares_recent_and_locked_entries(tmp_path):
    cache, keys = _fill(tmp_path / "c", "abc")
    locked = cache_mod.KeyLock(cache.lock_path(keys[0]))
    assert locked.try_acquire()
    try:
        report = cache.prune(0, grace=0)
    finally:
        locked.release()
    assert cache.entry_path(keys[0]).exists() and report["skipped_in_use"] == 1
    fresh = Cache(tmp_path / "d")
    old, new = key_of("old"), key_of("new")
    for key in (old, new):
        fresh.get_or_build(key, lambda: (b"x" * 1000, {}))
    assert fresh.prune(0)["removed"] == 0    # default grace: both were used within the last minute
    t = time.time() - 100
    os.utime(fresh.entry_path(old), (t, t))
    assert fresh.prune(0, grace=30)["removed"] == 1
    assert not fresh.entry_path(old).exists() and fresh.entry_path(new).exists()


def test_size_cap_from_environment_is_enforced_after_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("HKJIT_CACHE_MAX_SIZE", "25K")
    monkeypatch.setattr(cache_store, "PRUNE_GRACE_S", 0.0)   # else every fresh entry counts as in use
    cache = Cache(tmp_path / "c")
    assert cache.max_size == 25 * 1024
    keys = [key_of(f"cap{i}") for i in range(6)]
    for i, key in enumerate(keys):
        cache.get_or_build(key, lambda i=i: (bytes([i]) * 10_000, {}))
        assert cache.stats()["bytes"] <= 25 * 1024
    assert cache.entry_path(keys[-1]).exists() and not cache.entry_path(keys[0]).exists()


@pytest.mark.parametrize("text, expected", [("123", 123), ("500M", 500 << 20), ("10G", 10 << 30),
                                             ("1.5GiB", int(1.5 * (1 << 30))), ("2k", 2048)])
def test_parse_size(text, expected):
    assert cache_mod.parse_size(text) == expected


def test_parse_size_rejects_nonsense():
    with pytest.raises(InvalidArgumentError, match="500M"):
        cache_mod.parse_size("lots")


def test_stats_entries_verify_and_clear(tmp_path):
    cache, keys = _fill(tmp_path / "c", "abc")
    path = cache.entry_path(keys[1])
    path.write_bytes(_flip_bit_at(-1)(path.read_bytes()))
    infos = {i.key: i for i in cache.entries()}
    assert set(infos) == set(keys) and infos[keys[0]].code_size == 10_000
    with pytest.warns(CacheWarning):
        problems = cache.verify()
    assert [p for p, _ in problems] == [path] and "checksum" in problems[0][1]
    stats = cache.stats()
    assert stats["entries"] == 2 and stats["quarantined"] == 1 and stats["corrupt"] == 1
    cache.clear()
    assert cache.entries() == [] and cache.stats()["quarantined"] == 0
