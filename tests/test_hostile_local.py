"""Playing the other local user: what another account on the same machine can plant in a cache or a
bundle must never make hkjit run the wrong kernel, write outside its own files, or leave debris.

Forged and damaged key index records; world-writable and foreign-owned cache folders (foreign
ownership simulated by patching the uid the checks compare against); hostile bundles (traversal,
links, zip bombs, wrong toolchains); a full disk (an injected ENOSPC)."""

import errno
import hashlib
import io
import json
import os
import stat
import time
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest

import hkjit
from hkjit import jit
from hkjit.cache import BUNDLE_MANIFEST, Bundle, Cache, bundle as bundle_mod, entry as entry_mod, entry_relpath, \
    index as index_mod, perms, store as store_mod
from hkjit.deploy import BundleWriter, import_bundle
from hkjit.errors import BundleError, CacheError, CacheWarning, UnsafeCacheError

from conftest import needs_clang

ml_dtypes = pytest.importorskip("ml_dtypes")


def _gemm_spec(layout):
    return hkjit.ops.get("gemm").plan("gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                                      a_layout="row", b_layout=layout).spec


def _records(cache_dir):
    return index_mod.record_files(cache_dir)


# ---------------------------------------------------------------------------------- key index

@needs_clang
def test_forged_index_record_never_runs_the_other_layouts_kernel(cache_dir):
    """The review's case: the row-layout GEMM's index record edited (checksum recomputed, as an
    attacker who read this file would) to name the column-layout kernel's key."""
    row_key = jit.cache_key(_gemm_spec("row"))
    hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    col = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                      b_layout="col")
    assert col.key != row_key
    forged = 0
    for path in _records(cache_dir):
        record = index_mod.read_record(path)
        if record["key"] == row_key:
            path.write_bytes(index_mod.encode_record(col.key, record["fingerprint"], record["expect"]))
            forged += 1
    assert forged == 1
    hkjit.reset_state()
    assert jit.cache_key(_gemm_spec("row")) == row_key   # the forged shortcut is not taken

    rng = np.random.default_rng()
    a = rng.standard_normal((37, 29)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((29, 50)).astype(ml_dtypes.bfloat16)
    hkjit.reset_state()
    out = np.full((37, 50), np.nan, np.float32)
    hkjit.gemm(a, b, out=out, device="sim:gfx950")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


@needs_clang
def test_forged_record_and_damaged_record_are_reported_by_verify(cache_dir):
    row = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    col = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                      b_layout="col")
    paths = {index_mod.read_record(p)["key"]: p for p in _records(cache_dir)}
    row_path, col_path = paths[row.key], paths[col.key]
    record = index_mod.read_record(row_path)
    row_path.write_bytes(index_mod.encode_record(col.key, record["fingerprint"], record["expect"]))
    col_path.write_bytes(col_path.read_bytes().replace(b'"waves":4', b'"waves":8'))   # checksum now fails
    problems = dict(Cache(cache_dir, bundle_paths=[]).verify())
    assert set(problems) == {row_path, col_path}, problems
    assert "b_kmajor" in problems[row_path] or "params" in problems[row_path]
    assert "checksum" in problems[col_path]
    assert not row_path.exists() and not col_path.exists()   # bad shortcuts are dropped
    assert Cache(cache_dir, bundle_paths=[]).verify() == []


@needs_clang
def test_damaged_index_record_is_a_miss_with_one_warning(cache_dir):
    built = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    (path,) = _records(cache_dir)
    path.write_bytes(path.read_bytes()[:-7])
    hkjit.reset_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jit.cache_key(_gemm_spec("row")) == built.key
    assert sum("key index record" in str(w.message) for w in caught if w.category is CacheWarning) == 1
    assert json.loads(path.read_bytes())["key"] == built.key   # rewritten whole


@needs_clang
def test_entry_that_is_not_the_specialisation_is_set_aside_and_rebuilt(cache_dir):
    """A planted entry file under the right key (valid entry checksum) holding another kernel."""
    from hkjit.cache import encode_entry
    row = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    col = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32",
                      b_layout="col")
    cache = Cache(cache_dir, bundle_paths=[])
    cache.entry_path(row.key).write_bytes(encode_entry(row.key, col.code, col.meta))
    hkjit.reset_state()
    with pytest.warns(CacheWarning, match="not the kernel its key names"):
        again = hkjit.build("gemm", target="gfx950", m=37, n=50, k=29, dtype="bfloat16", out_dtype="float32")
    assert again.compiled and again.meta["params"] == row.meta["params"] != col.meta["params"]


# ------------------------------------------------------------------ who may write the cache folder

def _a_cache_with_one_entry(root):
    cache = Cache(root, bundle_paths=[])
    key = "ab" * 32
    cache.put(key, b"code", {"op": "x"})
    return key


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o703])
@pytest.mark.parametrize("which", [".", "entries"])
def test_world_writable_cache_folder_is_refused_sticky_or_not(tmp_path, mode, which):
    root = tmp_path / "cache"
    key = _a_cache_with_one_entry(root)
    (root / which).chmod(mode)
    with pytest.raises(UnsafeCacheError, match=r"writable by every user.*chmod 700 .*HKJIT_CACHE_DIR") as e:
        Cache(root, bundle_paths=[]).get(key)
    assert str(root / which).rstrip("/.") in str(e.value)
    with pytest.raises(UnsafeCacheError):
        Cache(root, bundle_paths=[]).put("cd" * 32, b"code", {})
    with pytest.raises(UnsafeCacheError):
        Cache(root, bundle_paths=[]).verify()
    (root / which).chmod(0o700)
    assert Cache(root, bundle_paths=[]).get(key).code == b"code"


def test_group_writable_cache_is_allowed(tmp_path):
    root = tmp_path / "cache"
    key = _a_cache_with_one_entry(root)
    root.chmod(0o770)
    assert Cache(root, bundle_paths=[]).get(key).code == b"code"


@pytest.mark.parametrize("which", [".", "entries"])
def test_foreign_owned_cache_folder_is_refused(tmp_path, monkeypatch, which):
    """Ownership by another user, simulated: this process claims a uid that owns neither folder
    (root-owned folders are accepted, as ssh does, so when running as root pretend to be uid 4242
    and make the folder's owner look like uid 4343)."""
    root = tmp_path / "cache"
    key = _a_cache_with_one_entry(root)
    monkeypatch.setattr(perms, "_my_uid", lambda: 4242)
    real_stat, real_lstat = os.stat, os.lstat
    target = str(root / which).rstrip("/.")

    def foreign(fn):
        def stat_(path, *a, **k):
            st = fn(path, *a, **k)
            if str(path).rstrip("/.") == target:
                fields = list(st)
                fields[4] = 4343   # st_uid
                return os.stat_result(fields)
            return st
        return stat_
    monkeypatch.setattr(perms.os, "stat", foreign(real_stat))
    monkeypatch.setattr(perms.os, "lstat", foreign(real_lstat))
    with pytest.raises(UnsafeCacheError, match=r"owned by uid 4343, not by you \(uid 4242\).*chmod 700"):
        Cache(root, bundle_paths=[]).get(key)


def test_entries_folder_replaced_by_a_link_is_refused(tmp_path):
    root = tmp_path / "cache"
    key = _a_cache_with_one_entry(root)
    elsewhere = tmp_path / "attacker"
    (root / "entries").rename(elsewhere)
    (root / "entries").symlink_to(elsewhere)
    with pytest.raises(UnsafeCacheError, match="symbolic link"):
        Cache(root, bundle_paths=[]).get(key)


def test_nested_new_cache_dir_gets_0700_at_every_level_it_creates(tmp_path):
    parent = tmp_path / "existing"
    parent.mkdir(mode=0o755)
    parent.chmod(0o755)
    root = parent / "a" / "b" / "cache"
    _a_cache_with_one_entry(root)
    for folder in (parent / "a", parent / "a" / "b", root, root / "entries", root / "locks"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(parent.stat().st_mode) == 0o755   # not made by hkjit: left alone


# ------------------------------------------------------------------------------ hostile bundles

def _keys(n):
    return [f"{i:02x}" + hashlib.sha256(str(i).encode()).hexdigest()[2:] for i in range(n)]


def _bundle(tmp_path, n=3, zip_=False):
    """A real bundle (BundleWriter) of `n` small entries built with a recorded toolchain."""
    dest = tmp_path / ("b.zip" if zip_ else "b")
    writer = BundleWriter(dest)
    for i, key in enumerate(_keys(n)):
        writer.add(key, os.urandom(64 + i), {"op": "gemm", "compiler": "clang 22.0", "flags": ["-O3"]},
                   op="gemm", target="gfx950", params={"i": i})
    return writer.close()


def _edit_manifest(bundle, edit):
    path = bundle / BUNDLE_MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def _untouched(root):
    """The cache holds nothing an import wrote: no entries, no temps, no toolchains.json."""
    return not list(root.glob("entries/*/*")) and not (root / "toolchains.json").exists()


@pytest.mark.parametrize("edit", [
    lambda m: m.update(toolchains="clang"),
    lambda m: m.update(toolchains=[{"target": "gfx950", "compiler": 22, "flags": []}]),
    lambda m: m.update(toolchains=[{"target": "gfx950", "compiler": "clang", "flags": "-O3"}]),
    lambda m: m.update(toolchains=[["gfx950"]]),
    lambda m: m["entries"][2].update(path="../../../etc/passwd"),
    lambda m: m["entries"][2].update(path=m["entries"][0]["path"]),
    lambda m: m["entries"][2].update(size=-1),
    lambda m: m["entries"][2].update(sha256=None),
    lambda m: m["entries"][2].pop("key"),
    lambda m: m["entries"].append("a string record"),
    lambda m: m["entries"].append(dict(m["entries"][0])),
    lambda m: m.update(hkjit_version=["1"]),
    lambda m: m.update(created={"at": 0}),
    lambda m: m.update(cache_format="1"),
    lambda m: m["entries"][0].update(params=[1]),
], ids=["toolchains-str", "compiler-int", "flags-str", "toolchain-list", "traversal", "other-path",
        "size", "sha256", "no-key", "string-record", "duplicate", "version", "created", "cache-format",
        "params"])
def test_malformed_manifest_is_refused_before_anything_is_imported(tmp_path, edit):
    bundle = _bundle(tmp_path)
    _edit_manifest(bundle, edit)
    root = tmp_path / "cache"
    with pytest.raises(BundleError, match="malformed|not an hkjit|outside the bundle"):
        import_bundle(Cache(root, bundle_paths=[]), bundle)
    assert _untouched(root)
    with pytest.raises(BundleError):   # and it is never used for lookups either
        Cache(root, bundle_paths=[bundle]).get(_keys(3)[0])


def test_tampered_last_entry_leaves_the_cache_as_it_was(tmp_path):
    bundle = _bundle(tmp_path)
    last = bundle / entry_relpath(_keys(3)[2])
    data = last.read_bytes()
    last.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))   # always a change (a fixed byte may already be there)
    root = tmp_path / "cache"
    with pytest.raises(BundleError, match="rejected"):
        import_bundle(Cache(root, bundle_paths=[]), bundle)
    assert _untouched(root) and not list(root.rglob("*.tmp"))


def test_entry_planted_as_a_link_is_not_followed(tmp_path):
    bundle = _bundle(tmp_path)
    member = bundle / entry_relpath(_keys(3)[1])
    copy = tmp_path / "elsewhere.hkc"
    member.rename(copy)
    member.symlink_to(copy)   # the same bytes, but through a link out of the bundle
    root = tmp_path / "cache"
    with pytest.raises(BundleError, match="cannot read"):
        import_bundle(Cache(root, bundle_paths=[]), bundle)
    assert _untouched(root)


def test_full_disk_during_import_leaves_no_partial_files(tmp_path, monkeypatch):
    bundle = _bundle(tmp_path, n=4)
    root = tmp_path / "cache"
    real = entry_mod.os.fsync
    calls = []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)
    monkeypatch.setattr(entry_mod.os, "fsync", fsync)
    with pytest.raises(CacheError, match="nothing was imported"):
        import_bundle(Cache(root, bundle_paths=[]), bundle)
    monkeypatch.undo()
    assert _untouched(root) and not list(root.rglob("*.tmp"))
    assert import_bundle(Cache(root, bundle_paths=[]), bundle) == 4   # and it works once there is room
    assert len(list(root.glob("entries/*/*.hkc"))) == 4


def _zip_with_member(path, name, size):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open(name, "w", force_zip64=True) as f:
            chunk = b" " * (1 << 20)
            for _ in range(size // len(chunk) + 1):
                f.write(chunk)


def test_zip_bomb_manifest_is_refused_quickly_in_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.zip"
    _zip_with_member(bomb, BUNDLE_MANIFEST, bundle_mod.MAX_MANIFEST_BYTES + 1)
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(BundleError, match="over hkjit's cap"):
        Bundle(bomb).manifest
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 << 20 and seconds < 1.0


def test_entry_member_larger_than_its_record_is_refused_unread(tmp_path):
    good = _bundle(tmp_path, zip_=True)
    key = _keys(3)[0]
    forged = tmp_path / "forged.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(forged, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, data + b"\0" * (8 << 20) if info.filename == entry_relpath(key) else data)
    tracemalloc.start()
    with pytest.raises(BundleError, match="over hkjit's cap"):
        Bundle(forged).get(key)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 << 20


# --------------------------------------------------------------- what hkjit itself wrote there

def test_bad_toolchains_file_is_ignored_with_a_warning_and_cleared(tmp_path):
    root = tmp_path / "cache"
    cache = Cache(root, bundle_paths=[])
    cache.add_toolchains([{"target": "gfx950", "compiler": "clang 22.0", "flags": ["-O3"]}])
    assert cache.toolchains("gfx950")
    for planted in ('{"target": "gfx950"}', '[{"target": "gfx950", "compiler": null}]', "[1, 2]", "not json"):
        (root / "toolchains.json").write_text(planted)
        with pytest.warns(CacheWarning, match="not a list of toolchains"):
            assert Cache(root, bundle_paths=[]).toolchains("gfx950") == []
    Cache(root, bundle_paths=[]).clear()
    assert not (root / "toolchains.json").exists()


def test_full_disk_writing_an_index_record_leaves_no_temp(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    cache = Cache(root, bundle_paths=[])

    class FullFile(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, *a, **k):
        os.close(fd)
        return FullFile()
    monkeypatch.setattr(index_mod.os, "fdopen", fdopen)
    with pytest.raises(OSError):
        index_mod.write_record(root, "ab" * 32, "cd" * 32, [], {}, cache.mkdirs)
    monkeypatch.undo()
    assert not list(root.rglob("*.tmp")) and not list(root.rglob("ab" * 32))


def test_planted_link_at_an_index_record_is_not_followed(tmp_path):
    root = tmp_path / "cache"
    cache = Cache(root, bundle_paths=[])
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = index_mod.record_path(root, "ab" * 32)
    cache.mkdirs(path.parent.relative_to(root))
    path.symlink_to(victim)
    with pytest.raises(index_mod.CorruptRecordError):
        index_mod.read_record(path)
    index_mod.write_record(root, "ab" * 32, "cd" * 32, [], {}, cache.mkdirs)   # replaces the link
    assert victim.read_text() == "precious" and not path.is_symlink()


# ------------------------------------------------- links planted where hkjit writes in the cache

KEY = "ab" * 32


def _plant(path, victim):
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.symlink_to(victim)


@pytest.mark.parametrize("where", ["entry", "lock", "toolchains", "index"])
def test_links_planted_where_hkjit_writes_are_never_followed(tmp_path, where):
    root = tmp_path / "cache"
    cache = Cache(root, bundle_paths=[])
    cache.mkdirs("entries")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = {"entry": cache.entry_path(KEY), "lock": cache.lock_path(KEY),
               "toolchains": root / "toolchains.json", "index": index_mod.record_path(root, KEY)}[where]
    _plant(planted, victim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)   # the lock case compiles in memory, with a warning
        if where == "toolchains":
            cache.add_toolchains([{"target": "gfx950", "compiler": "clang", "flags": []}])
        elif where == "index":
            index_mod.write_record(root, KEY, "cd" * 32, [], {}, cache.mkdirs)
        else:
            entry, built = cache.get_or_build(KEY, lambda: (b"code", {"op": "x"}))
            assert built and entry.code == b"code"
    assert victim.read_text() == "precious"
    if where != "lock":
        assert not planted.is_symlink()   # the link itself was replaced by hkjit's file


def test_set_aside_never_writes_through_a_link(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    cache = Cache(root, bundle_paths=[])
    cache.put(KEY, b"code", {})
    path = cache.entry_path(KEY)
    path.write_bytes(path.read_bytes()[:-1])   # corrupt: the next get sets it aside with a .why note
    victim = tmp_path / "victim"
    victim.write_text("precious")
    monkeypatch.setattr(store_mod.time, "strftime", lambda *a: "FIXED")
    why = root / "quarantine" / f"{KEY}.FIXED.{os.getpid()}.why"
    _plant(why, victim)
    with pytest.warns(CacheWarning, match="was bad"):
        assert Cache(root, bundle_paths=[]).get(KEY) is None
    assert victim.read_text() == "precious"
