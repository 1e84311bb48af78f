"""Deployment: manifests, recording, precompile, bundles, offline mode, cache maintenance.

Most tests build through `fake_build`, which does what `hkjit.build` does (key from the compiler's
identity, `Cache.get_or_build`, and the bundles' toolchains when no compiler is installed) but
compiles with `hkjit-fakecc`, a shell script that logs every call. A process whose PATH lacks it
cannot compile at all. The last tests repeat the deployment with the real `hkjit.build` and
compilers where this machine has them."""

import functools
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

import hkjit
from hkjit import cache as cache_mod
from hkjit import deploy, ops
from hkjit.cache import Bundle, Cache, CacheWarning, make_key
from hkjit.errors import BundleError, CompileError, CompilerNotFoundError, InvalidArgumentError

from test_cache import read_only

FORK = mp.get_context("fork")
TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FAKE_CC = "hkjit-fakecc"
FLEET = ("gfx942", "gfx950", "sm_90a")
FLEET_MANIFEST = """\
version = 1
[defaults]
dtype = "bfloat16"

[[kernel]]
op = "gemm"
shapes = ["8192x8192x8192", [4096, 4096, 1024]]
"""


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    for name in ("HKJIT_CACHE_DIR", "HKJIT_BUNDLE_PATH", "HKJIT_OFFLINE", "HKJIT_CACHE_MAX_SIZE",
                 "HKJIT_LOCK_TIMEOUT", "HKJIT_RECORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HKJIT_CACHE_DIR", str(tmp_path / "user-cache"))
    cache_mod.set_offline(None)
    cache_mod.reset_default_cache()
    yield
    cache_mod.set_offline(None)
    cache_mod.reset_default_cache()


# ------------------------------------------------------------------------- the fake compiler/build

@pytest.fixture
def fakecc(tmp_path, monkeypatch):
    """Put hkjit-fakecc on PATH; returns the file it logs one line per compile to."""
    bindir, log = tmp_path / "bin", tmp_path / "fakecc.log"
    bindir.mkdir()
    script = bindir / FAKE_CC
    script.write_text(textwrap.dedent("""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "fakecc 1.0"; exit 0; fi
        echo "$1 $2" >> "$FAKECC_LOG"
        printf 'ELF-for-%s-%s' "$1" "$2"
        """))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKECC_LOG", str(log))
    return log


def fake_compiles(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def fake_build(op, *, target, **params):
    """hkjit.build's contract, compiled by hkjit-fakecc. block_m=999 is a compile error."""
    from hkjit import targets
    target = targets.parse(target).id
    if op != "gemm":
        raise InvalidArgumentError(f"unknown op {op!r}")
    cache = cache_mod.default_cache()
    cc = shutil.which(FAKE_CC)
    if cc:
        identity = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout.strip()
        flags = ["-O3", f"--offload-arch={target}"]
    else:   # no compiler here: find precompiled kernels by the toolchain the bundles were built with
        toolchains = cache.toolchains(target)
        if not toolchains:
            raise CompilerNotFoundError(f"no {FAKE_CC} on PATH and no bundle for {target}")
        identity, flags = toolchains[0]["compiler"], toolchains[0]["flags"]
    key = make_key({"op": op, "target": target, "params": sorted(params.items()), "compiler": identity,
                    "flags": flags, "hkjit": hkjit.__version__})

    def compile_():
        if params.get("block_m") == 999:
            raise CompileError("fakecc: error: block_m=999 does not fit in LDS")
        if not cc:
            raise CompilerNotFoundError(f"{FAKE_CC} is not on PATH")
        out = subprocess.run([cc, target, json.dumps(params, sort_keys=True)], capture_output=True, check=True)
        return out.stdout, {"op": op, "target": target, "params": params, "compiler": identity, "flags": flags}

    describe = lambda: f"{op} on {target} with {params}\n  {deploy.manifest_line(op, target, params)}"
    entry, built = cache.get_or_build(key, compile_, describe=describe)
    return SimpleNamespace(op=op, target=target, key=key, code=entry.code, meta=entry.meta, params=params,
                           compiled=built)


def precompile(jobs, dest, **kwargs):
    return deploy.precompile(jobs, dest, build=fake_build, **kwargs)


def fleet_jobs(tmp_path, archs=FLEET) -> list:
    manifest = tmp_path / "fleet.toml"
    manifest.write_text(FLEET_MANIFEST)
    return deploy.load_manifest(manifest, archs=archs, shape_params=ops.shape_params)


def run_fresh_process(code: str, env: dict, **names) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter that can import hkjit and this file's fake_build; `names`
    become its global variables."""
    prelude = f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(TESTS)!r}]\n"
    prelude += "".join(f"{name} = {value!r}\n" for name, value in names.items())
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def offline_env(tmp_path, bundle, **extra) -> dict:
    """A deployment process: offline, an empty cache, the bundle, and no compiler on PATH."""
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HKJIT_")}
    env.update(PATH=str(empty_bin), HKJIT_OFFLINE="1", HKJIT_CACHE_DIR=str(tmp_path / "deploy-cache"),
               HKJIT_BUNDLE_PATH=str(bundle), **extra)
    return env


RESOLVE_ALL = """
    import json, shutil
    from hkjit import deploy, ops
    from test_deploy import fake_build, FAKE_CC
    assert shutil.which(FAKE_CC) is None, "a compiler is on PATH"
    results = []
    for job in deploy.load_manifest(MANIFEST, archs=ARCHS, shape_params=ops.shape_params):
        b = fake_build(job.op, target=job.target, **job.param_dict)
        results.append([job.op, job.target, b.key, b.compiled, b.code.decode()])
    print(json.dumps(results))
"""


# ---------------------------------------------------------------------------------------- manifests

def test_manifest_expands_shapes_dtypes_sweeps_and_targets(tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(textwrap.dedent("""\
        version = 1
        kernels = [
          { op = "gemm", target = "gfx950", m = 64, n = 64, k = 64 },
          { op = "gemm", target = "gfx950", m = 64, n = 64, k = 64 },   # a duplicate: built once
        ]
        [defaults]
        a_layout = "row"

        [[kernel]]
        op = "gemm"
        targets = ["gfx942", "sm_90a"]
        shapes = [[128, 256, 512], "1x2x3", { m = 7, n = 8, k = 9 }]
        dtypes = ["bfloat16", "float16"]
        sweep = { block_m = [128, 256] }
        """))
    jobs = deploy.load_manifest(manifest, shape_params=ops.shape_params)
    assert len(jobs) == 1 + 2 * 3 * 2 * 2
    assert jobs[0] == deploy.Job("gemm", "gfx950", (("a_layout", "row"), ("k", 64), ("m", 64), ("n", 64)))
    sm90 = [j for j in jobs if j.target == "sm_90a"]
    assert {(j.param_dict["m"], j.param_dict["n"], j.param_dict["k"]) for j in sm90} == {(128, 256, 512), (1, 2, 3), (7, 8, 9)}
    assert {j.param_dict["dtype"] for j in sm90} == {"bfloat16", "float16"}
    assert {j.param_dict["block_m"] for j in sm90} == {128, 256}
    assert all(j.param_dict["a_layout"] == "row" for j in jobs)

    retargeted = deploy.load_manifest(manifest, archs=["gfx950"], shape_params=ops.shape_params)   # --arch replaces every entry's targets
    assert {j.target for j in retargeted} == {"gfx950"} and len(retargeted) == 1 + 3 * 2 * 2
    assert deploy.load_manifest(manifest, ops={"softmax"}, shape_params=ops.shape_params) == []


@pytest.mark.parametrize("text, message", [
    ('[[kernel]]\ntarget = "gfx950"\n', "missing `op`"),
    ('[[kernel]]\nop = "gemm"\nm = 1\n', "no target"),
    ('[[kernel]]\nop = "gemm"\ntarget = "gfx950"\nshapes = [[1, 2]]\n', r"write \[m, n, k\]"),
    ('[[kernel]]\nop = "gemm"\ntarget = "gfx950"\nshapes = ["8192by8192"]\n', "8192x8192x8192"),
    ('[[kernel]]\nop = "gemm"\ntarget = "gfx950"\ndtypes = "bf16"\n', "non-empty list"),
    ('[[kernel]]\nop = "gemm"\ntarget = "gfx950"\ntargets = ["gfx942"]\n', "not both"),
    ('[[kernal]]\nop = "gemm"\n', "unknown top-level"),
    ('version = 7\n', "version 7"),
    ('[[kernel]]\nop = "gemm"\ntarget = "gfx950"\nkernels = []\n', "before any"),
    ('[[kernel]\nop = "gemm"', "not valid TOML"),
])
def test_manifest_errors_say_where_and_how_to_fix(tmp_path, text, message):
    manifest = tmp_path / "bad.toml"
    manifest.write_text(text)
    with pytest.raises(InvalidArgumentError, match=message) as err:
        deploy.load_manifest(manifest, shape_params=ops.shape_params)
    assert str(manifest) in str(err.value)


def test_manifest_line_pastes_into_a_manifest():
    line = deploy.manifest_line("gemm", "gfx942:sramecc+:xnack-", {"m": 8192, "dtype": "bfloat16",
                                                                    "bias": True, "num_sms": None})
    assert "\n" not in line
    jobs = deploy.jobs_from_manifest(tomllib.loads(f"kernels = [\n  {line}\n]\n"))
    assert jobs == [deploy.Job("gemm", "gfx942:sramecc+:xnack-", (("bias", True), ("dtype", "bfloat16"), ("m", 8192)))]


# ------------------------------------------------------------------------------------------ record

def test_record_is_inert_and_cheap_without_hkjit_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    for _ in range(100_000):
        deploy.record("gemm", "gfx950", {"m": 1})
    assert time.perf_counter() - t0 < 1.0   # ~1 µs a call at most; typically 0.1 µs
    assert list(tmp_path.iterdir()) == []


def test_record_then_replay(tmp_path, monkeypatch):
    path = tmp_path / "recorded.toml"
    monkeypatch.setenv("HKJIT_RECORD", str(path))
    calls = [("gemm", "gfx950", {"m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16", "out_dtype": None}),
             ("gemm", "sm_90a", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "bias": True}),
             ("gemm", "gfx950", {"m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16", "out_dtype": None})]
    for call in calls:
        deploy.record(*call)
    deploy._recorders.clear()           # a later run of the program, recording into the same file
    deploy.record(*calls[0])
    jobs = deploy.load_manifest(path)
    assert [(j.op, j.target, j.param_dict) for j in jobs] == [
        ("gemm", "gfx950", {"m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16"}),
        ("gemm", "sm_90a", {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "bias": True})]
    assert path.read_text().count("[[kernel]]") == 2


def _record_worker(path, n):
    os.environ["HKJIT_RECORD"] = str(path)
    for i in range(n):
        deploy.record("gemm", "gfx950", {"m": 64 * (i % 10 + 1), "n": 64, "k": 64})


def test_processes_recording_into_one_file_keep_it_valid(tmp_path):
    path = tmp_path / "ranks.toml"
    procs = [FORK.Process(target=_record_worker, args=(path, 40)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    jobs = deploy.load_manifest(path)   # valid TOML, whatever the interleaving
    assert sorted(j.param_dict["m"] for j in jobs) == [64 * i for i in range(1, 11)]


def test_record_problems_warn_and_never_raise(tmp_path, monkeypatch):
    monkeypatch.setenv("HKJIT_RECORD", str(tmp_path / "no-such-dir" / "r.toml"))
    with pytest.warns(CacheWarning, match="could not record"):
        deploy.record("gemm", "gfx950", {"m": 1})


# -------------------------------------------------------------------------------------- precompile

def test_precompile_for_three_targets_without_a_gpu(tmp_path, fakecc):
    jobs = fleet_jobs(tmp_path)
    assert len(jobs) == 6
    report = precompile(jobs, tmp_path / "bundle", parallel=3)
    assert (report.count("compiled"), report.count("reused"), report.count("failed")) == (6, 0, 0)
    assert fake_compiles(fakecc) == 6 and report.entries == 6
    assert deploy.verify_bundle(tmp_path / "bundle") == []
    manifest = json.loads((tmp_path / "bundle" / cache_mod.BUNDLE_MANIFEST).read_text())
    assert {r["target"] for r in manifest["entries"]} == set(FLEET)
    assert {t["target"] for t in manifest["toolchains"]} == set(FLEET)
    for r in manifest["entries"]:
        blob = (tmp_path / "bundle" / r["path"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == r["sha256"] and len(blob) == r["size"]

    again = precompile(jobs, tmp_path / "bundle", parallel=3)   # rebuilt in place from the cache
    assert again.count("reused") == 6 and fake_compiles(fakecc) == 6
    assert deploy.verify_bundle(tmp_path / "bundle") == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle")]   # no staging left


def test_precompile_cli_reports_failures_and_exits_nonzero(tmp_path, fakecc, monkeypatch, capsys):
    from hkjit import cli
    monkeypatch.setattr(hkjit.api, "build", fake_build)
    manifest = tmp_path / "m.toml"
    manifest.write_text('kernels = [\n  { op = "gemm", m = 64, n = 64, k = 64 },\n'
                        '  { op = "gemm", m = 64, n = 64, k = 64, block_m = 999 },\n'
                        '  { op = "softmax", n = 64 },\n]\n')
    status = cli.main(["precompile", "--arch", "gfx942,gfx950", "--shapes", str(manifest),
                       "-o", str(tmp_path / "b.zip"), "-j", "2"])
    out, err = capsys.readouterr()
    assert status == 1
    assert "6 specialisations: 2 compiled, 0 reused, 4 failed" in out
    assert "block_m=999 does not fit in LDS" in out and "unknown op 'softmax'" in out
    assert "[6/6]" in err   # progress, one line per result when stderr is not a terminal
    assert deploy.verify_bundle(tmp_path / "b.zip") == [] and len(deploy.describe_bundle(tmp_path / "b.zip")) == 2

    status = cli.main(["precompile", "--arch", "sm_90a", "--ops", "gemm", "--shapes", str(manifest),
                       "-o", str(tmp_path / "ok"), "--json", "--no-progress"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 1 and summary["compiled"] == 1 and summary["failed"] == 1


def test_precompile_refuses_to_overwrite_a_non_bundle(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me")
    with pytest.raises(InvalidArgumentError, match="not an hkjit bundle"):
        precompile([], tmp_path / "precious")
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me"
    import zipfile
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as z:
        z.writestr("cat.jpg", b"meow")
    with pytest.raises(InvalidArgumentError, match="not a bundle archive"):
        precompile([], tmp_path / "photos.zip")
    assert zipfile.ZipFile(tmp_path / "photos.zip").namelist() == ["cat.jpg"]


def test_precompile_replaces_only_what_it_can_prove_it_wrote(tmp_path):
    """A folder holding a file named like a bundle manifest ({} or a foreign one), or a real bundle
    with a user's file added, is refused and left whole; hkjit's own bundle is replaced."""
    for manifest in ("{}", '{"format": "photo-album", "entries": []}'):
        d = tmp_path / f"user{len(manifest)}"
        d.mkdir()
        (d / "hkjit-bundle.json").write_text(manifest)
        (d / "thesis.tex").write_text("keep me")
        with pytest.raises(InvalidArgumentError, match="not an hkjit bundle"):
            precompile([], d)
        assert (d / "thesis.tex").read_text() == "keep me"
    bundle = tmp_path / "bundle"
    precompile([], bundle)
    precompile([], bundle)                                # its own bundle: replaced
    (bundle / "notes.txt").write_text("mine")
    with pytest.raises(InvalidArgumentError, match="not an hkjit bundle"):
        precompile([], bundle)
    assert (bundle / "notes.txt").read_text() == "mine"


def test_record_refuses_a_file_that_is_not_a_manifest(tmp_path, monkeypatch):
    """HKJIT_RECORD never appends to another file (it warns and records nothing), nor through a link."""
    victim = tmp_path / "hosts"
    victim.write_text("127.0.0.1 localhost\n")
    link = tmp_path / "link.toml"
    link.symlink_to(tmp_path / "new-target.toml")
    for path in (victim, link):
        deploy._recorders.clear()
        monkeypatch.setenv("HKJIT_RECORD", str(path))
        with pytest.warns(CacheWarning, match="could not record"):
            deploy.record("gemm", "gfx950", {"m": 1})
    assert victim.read_text() == "127.0.0.1 localhost\n"
    assert not (tmp_path / "new-target.toml").exists()
    deploy._recorders.clear()


# ----------------------------------------------------------------------------- deployment, offline

@pytest.mark.parametrize("form", ["directory", "zip"])
def test_bundle_serves_every_specialisation_offline_in_a_fresh_process(tmp_path, fakecc, form):
    jobs = fleet_jobs(tmp_path)
    bundle = tmp_path / ("bundle.zip" if form == "zip" else "bundle")
    precompile(jobs, bundle, parallel=2)
    compiled_before = fake_compiles(fakecc)

    env = offline_env(tmp_path, bundle)
    proc = run_fresh_process(RESOLVE_ALL, env, MANIFEST=str(tmp_path / "fleet.toml"), ARCHS=list(FLEET))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == 6 and not any(compiled for _, _, _, compiled, _ in results)
    assert {target for _, target, *_ in results} == set(FLEET)
    assert all(code.startswith(f"ELF-for-{target}") for _, target, _, _, code in results)
    assert fake_compiles(fakecc) == compiled_before
    assert not list((tmp_path / "deploy-cache").rglob("*.hkc"))   # served from the bundle, not copied


def test_offline_miss_names_op_shapes_target_key_and_manifest_line(tmp_path, fakecc):
    precompile(fleet_jobs(tmp_path), tmp_path / "bundle")
    env = offline_env(tmp_path, tmp_path / "bundle")
    proc = run_fresh_process("""
        from test_deploy import fake_build
        fake_build("gemm", target="gfx950", m=333, n=444, k=555, dtype="float16")
        """, env)
    assert proc.returncode != 0
    err = proc.stderr
    assert "OfflineMissError" in err and "gfx950" in err and "333" in err and "float16" in err
    assert '{ op = "gemm", target = "gfx950", dtype = "float16", k = 555, m = 333, n = 444 },' in err
    assert "key: " in err and "hkjit precompile" in err


def test_tampered_bundle_entry_is_rejected_with_a_clear_error(tmp_path, fakecc, capsys):
    from hkjit import cli
    jobs = fleet_jobs(tmp_path)
    precompile(jobs, tmp_path / "bundle")
    record = next(r for r in deploy.describe_bundle(tmp_path / "bundle") if r["target"] == "gfx950")
    entry_file = tmp_path / "bundle" / record["path"]
    data = bytearray(entry_file.read_bytes())
    data[-3] ^= 0x01
    entry_file.write_bytes(bytes(data))

    assert cli.main(["bundle", "verify", str(tmp_path / "bundle")]) == 1
    out = capsys.readouterr().out
    assert record["path"] in out and "sha256" in out

    cache = Cache(tmp_path / "c", bundle_paths=[tmp_path / "bundle"], offline=True)
    with pytest.raises(BundleError, match="tampered") as err:
        cache.get(record["key"])
    assert record["path"] in str(err.value) and "hkjit bundle verify" in str(err.value)

    # Tampering the manifest to match does not help: the entry's own checksum still fails.
    manifest_path = tmp_path / "bundle" / cache_mod.BUNDLE_MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for r in manifest["entries"]:
        if r["key"] == record["key"]:
            r["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="not a valid entry"):
        Cache(tmp_path / "c", bundle_paths=[tmp_path / "bundle"]).get(record["key"])


def test_missing_bundle_entry_file_is_reported(tmp_path, fakecc):
    precompile(fleet_jobs(tmp_path), tmp_path / "bundle")
    record = deploy.describe_bundle(tmp_path / "bundle")[0]
    (tmp_path / "bundle" / record["path"]).unlink()
    assert any("cannot read" in p for p in deploy.verify_bundle(tmp_path / "bundle"))
    with pytest.raises(BundleError, match="incomplete"):
        Cache(tmp_path / "c", bundle_paths=[tmp_path / "bundle"]).get(record["key"])


def test_unlisted_files_and_bad_manifests_are_found(tmp_path, fakecc):
    precompile(fleet_jobs(tmp_path), tmp_path / "bundle")
    stray = tmp_path / "bundle" / cache_mod.entry_relpath("ab" * 32)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"x")
    assert any("not listed" in p for p in deploy.verify_bundle(tmp_path / "bundle"))
    (tmp_path / "bundle" / cache_mod.BUNDLE_MANIFEST).write_text("{ nope")
    assert any("not JSON" in p for p in deploy.verify_bundle(tmp_path / "bundle"))
    (tmp_path / "junk.zip").write_text("not a zip")
    with pytest.raises(BundleError, match="not a zip"):
        Bundle(tmp_path / "junk.zip").get("ab" * 32)


def test_bundle_manifest_cannot_point_outside_the_bundle(tmp_path, fakecc):
    precompile(fleet_jobs(tmp_path), tmp_path / "bundle")
    path = tmp_path / "bundle" / cache_mod.BUNDLE_MANIFEST
    manifest = json.loads(path.read_text())
    manifest["entries"][0]["path"] = "../../../etc/passwd"
    path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"malformed: entry 0: path '\.\./\.\./\.\./etc/passwd' is not where"):
        Bundle(tmp_path / "bundle").get(manifest["entries"][0]["key"])


def test_bundles_searched_in_order_before_the_cache_and_rebuilt_in_place(tmp_path, fakecc):
    jobs = fleet_jobs(tmp_path, archs=["gfx950"])
    precompile(jobs[:1], tmp_path / "first")
    precompile(jobs, tmp_path / "second")
    cache = Cache(tmp_path / "c", bundle_paths=[tmp_path / "missing", tmp_path / "first", tmp_path / "second"])
    keys = [r["key"] for r in deploy.describe_bundle(tmp_path / "second")]
    with pytest.warns(CacheWarning, match="does not exist"):
        sources = {cache.get(k).source for k in keys}
    assert sources == {f"bundle:{tmp_path / 'first'}", f"bundle:{tmp_path / 'second'}"}

    # Rebuild 'second' in place while a process holds its old manifest: it reads the new one.
    held = Bundle(tmp_path / "second")
    assert held.get(keys[1]) is not None
    cache_mod.reset_default_cache()
    Cache(os.environ["HKJIT_CACHE_DIR"]).clear()
    precompile(jobs, tmp_path / "second")
    assert held.get(keys[1]).code == Bundle(tmp_path / "second").get(keys[1]).code


def test_read_only_bundle_and_cache_dirs_work(tmp_path, fakecc):
    precompile(fleet_jobs(tmp_path), tmp_path / "bundle")
    keys = [r["key"] for r in deploy.describe_bundle(tmp_path / "bundle")]
    snapshot = lambda: {p: p.read_bytes() for p in (tmp_path / "bundle").rglob("*") if p.is_file()}
    before = snapshot()
    with read_only(tmp_path / "bundle"):
        cache = Cache(tmp_path / "c", bundle_paths=[tmp_path / "bundle"], offline=True)
        assert all(cache.get(k).source.startswith("bundle:") for k in keys)
        assert deploy.verify_bundle(tmp_path / "bundle") == []
    assert snapshot() == before


# ---------------------------------------------------------------- cache export / import / CLI

def test_export_then_import_moves_kernels_between_machines(tmp_path, fakecc, capsys):
    from hkjit import cli
    jobs = fleet_jobs(tmp_path)
    for job in jobs:
        fake_build(job.op, target=job.target, **job.param_dict)
    assert cli.main(["cache", "export", str(tmp_path / "exported.zip"), "--arch", "gfx942,sm_90a"]) == 0
    assert deploy.verify_bundle(tmp_path / "exported.zip") == []
    assert {r["target"] for r in deploy.describe_bundle(tmp_path / "exported.zip")} == {"gfx942", "sm_90a"}

    other = tmp_path / "other-machine"
    os.environ["HKJIT_CACHE_DIR"] = str(other)
    cache_mod.reset_default_cache()
    assert cli.main(["cache", "import", str(tmp_path / "exported.zip")]) == 0
    imported = Cache(other)
    assert len(imported.entries()) == 4 and imported.verify() == []
    assert [t["compiler"] for t in imported.toolchains("sm_90a")] == ["fakecc 1.0"]
    assert imported.toolchains("gfx950") == []   # not exported
    capsys.readouterr()
    assert cli.main(["cache", "ls"]) == 0 and capsys.readouterr().out.count("gemm") == 4
    assert cli.main(["cache", "stats", "--json"]) == 0 and json.loads(capsys.readouterr().out)["entries"] == 4
    assert cli.main(["cache", "verify"]) == 0
    assert cli.main(["cache", "prune", "--max-size", "0", "--grace", "0"]) == 0
    assert "removed 4 entries" in capsys.readouterr().out and Cache(other).entries() == []


def test_imported_kernels_serve_a_host_without_compiler_or_bundle(tmp_path, fakecc):
    precompile(fleet_jobs(tmp_path), tmp_path / "bundle.zip")
    deploy.import_bundle(Cache(tmp_path / "deploy-cache"), tmp_path / "bundle.zip")
    (tmp_path / "bundle.zip").unlink()   # only the cache is left on this host
    env = offline_env(tmp_path, "")
    proc = run_fresh_process(RESOLVE_ALL, env, MANIFEST=str(tmp_path / "fleet.toml"), ARCHS=list(FLEET))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == 6 and not any(compiled for _, _, _, compiled, _ in results)


def test_cache_clear_and_corrupt_verify_via_cli(tmp_path, fakecc, capsys):
    from hkjit import cli
    b = fake_build("gemm", target="gfx950", m=1, n=2, k=3)
    path = Cache(os.environ["HKJIT_CACHE_DIR"]).entry_path(b.key)
    path.write_bytes(path.read_bytes()[:-5])
    cache_mod.reset_default_cache()
    with pytest.warns(CacheWarning):
        assert cli.main(["cache", "verify"]) == 1
    assert "truncated" in capsys.readouterr().out
    fake_build("gemm", target="gfx950", m=1, n=2, k=3)
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out


# -------------------------------------------------------------- prune against concurrent users

def _reader(root, hot_keys, ready, stop, errors):
    try:
        for key in hot_keys:             # first use: from now on these entries are in use
            assert Cache(root).get(key) is not None
        ready.wait()
        while not stop.is_set():
            for key in hot_keys:
                entry = Cache(root).get(key)   # a fresh Cache: read from disk every time
                if entry is None or entry.code != key.encode() * 100:
                    errors.put(f"hot entry {key[:12]} lost or wrong")
    except BaseException as e:
        errors.put(repr(e))


def _writer(root, n, prefix, ready, errors):
    try:
        ready.wait()
        os.environ["HKJIT_CACHE_MAX_SIZE"] = "60K"   # writers enforce the cap themselves, concurrently
        cache = Cache(root)
        for i in range(n):
            key = make_key({"writer": prefix, "i": i})
            cache.get_or_build(key, lambda: (key.encode() * 100, {}))
    except BaseException as e:
        errors.put(repr(e))


def _pruner(root, ready, stop, errors):
    try:
        ready.wait()
        while not stop.is_set():
            Cache(root).prune("60K")
    except BaseException as e:
        errors.put(repr(e))


def test_prune_under_concurrent_readers_and_writers(tmp_path):
    root = tmp_path / "shared-cache"
    cache = Cache(root)
    cold = [make_key({"cold": i}) for i in range(30)]
    hot = [make_key({"hot": i}) for i in range(5)]
    for key in cold + hot:
        cache.get_or_build(key, lambda key=key: (key.encode() * 100, {}))
        old = time.time() - 3600
        os.utime(cache.entry_path(key), (old, old))   # everything starts an hour unused

    n_readers, n_writers = 3, 2
    ready, stop, errors = FORK.Barrier(n_readers + n_writers + 2), FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=_reader, args=(root, hot, ready, stop, errors)) for _ in range(n_readers)]
    writers = [FORK.Process(target=_writer, args=(root, 15, w, ready, errors)) for w in range(n_writers)]
    procs += writers + [FORK.Process(target=_pruner, args=(root, ready, stop, errors))]
    for p in procs:
        p.start()
    ready.wait(timeout=60)
    for w in writers:
        w.join(timeout=60)
    time.sleep(0.3)
    stop.set()
    for p in procs:
        p.join(timeout=60)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == [] and all(p.exitcode == 0 for p in procs)

    assert all(cache.entry_path(k).exists() for k in hot)          # in use: never evicted
    assert not any(cache.entry_path(k).exists() for k in cold)     # unused: evicted to meet the cap
    written = [make_key({"writer": w, "i": i}) for w in range(n_writers) for i in range(15)]
    assert all(cache.entry_path(k).exists() for k in written)      # fresh: within the grace period
    assert list(root.glob("entries/*/.*.tmp")) == []               # no partial file
    assert Cache(root).verify() == []                               # every file whole


# ------------------------------------------------------------------ degraded user cache, end to end

def test_unwritable_cache_dir_degrades_to_memory_for_builds(tmp_path, fakecc, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("HKJIT_CACHE_DIR", str(tmp_path / "file" / "cache"))
    cache_mod.reset_default_cache()
    with pytest.warns(CacheWarning, match="in memory only"):
        report = precompile(fleet_jobs(tmp_path, archs=["gfx950"]), tmp_path / "bundle")
    assert report.count("compiled") == 2 and deploy.verify_bundle(tmp_path / "bundle") == []


# ------------------------------------------------------------------- the real hkjit.build

@functools.cache
def _real_build_fails() -> str | None:
    """Why the real compilers cannot build for every fleet target here, or None when they can."""
    import tempfile
    with tempfile.TemporaryDirectory() as probe_cache:
        saved = os.environ.get("HKJIT_CACHE_DIR")
        os.environ["HKJIT_CACHE_DIR"] = probe_cache
        cache_mod.reset_default_cache()
        try:
            for target in FLEET:
                hkjit.build("gemm", target=target, m=256, n=256, k=256, dtype="bfloat16")
        except Exception as e:  # noqa: BLE001
            return f"hkjit.build for {target} fails here: {type(e).__name__}: {str(e)[:200]}"
        finally:
            if saved is None:
                os.environ.pop("HKJIT_CACHE_DIR", None)
            else:
                os.environ["HKJIT_CACHE_DIR"] = saved
            cache_mod.reset_default_cache()
    return None


@pytest.fixture
def real_compilers():
    reason = _real_build_fails()
    if reason:
        pytest.skip(reason)


NO_COMPILER_PRELUDE = """
    import json, hkjit
    from hkjit import compiler, deploy
    # No compiler in this process: none on PATH, no NVRTC/hiprtc module, and any driver that
    # still ran would fail the test.
    for name in ("cuda", "cuda.bindings", "nvidia", "hip", "hiprtc"):
        sys.modules[name] = None
    assert all(ident == "not found" for _, ident in compiler.available()), compiler.available()
    compiler.Compiler.compile = lambda *a, **k: (_ for _ in ()).throw(AssertionError("compiled"))
"""


def test_real_precompile_then_offline_without_compilers(tmp_path, real_compilers):
    manifest = tmp_path / "fleet.toml"
    manifest.write_text(FLEET_MANIFEST)
    jobs = deploy.load_manifest(manifest, archs=FLEET, shape_params=ops.shape_params)
    report = deploy.precompile(jobs, tmp_path / "bundle", build=hkjit.build)
    assert report.failed == [], report.summary()
    assert deploy.verify_bundle(tmp_path / "bundle") == []

    env = offline_env(tmp_path, tmp_path / "bundle")
    proc = run_fresh_process(NO_COMPILER_PRELUDE + """
    out = []
    for job in deploy.load_manifest(MANIFEST, archs=ARCHS, shape_params=hkjit.ops.shape_params):
        b = hkjit.build(job.op, target=job.target, **job.param_dict)
        out.append([job.target, b.key, b.compiled])
    print(json.dumps(out))
    """, env, MANIFEST=str(manifest), ARCHS=list(FLEET))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(jobs) and not any(compiled for *_, compiled in results)
    assert {k for _, k, _ in results} == {o.key for o in report.outcomes}


def test_real_offline_miss_without_compilers_is_an_offline_error(tmp_path, real_compilers):
    jobs = [deploy.Job("gemm", "gfx950", (("dtype", "bfloat16"), ("k", 512), ("m", 512), ("n", 512)))]
    assert deploy.precompile(jobs, tmp_path / "bundle", build=hkjit.build).failed == []
    proc = run_fresh_process(NO_COMPILER_PRELUDE + """
    try:
        hkjit.build("gemm", target="gfx950", m=1000, n=1000, k=1000, dtype="float16")
    except hkjit.OfflineMissError as e:
        print(e)
    """, offline_env(tmp_path, tmp_path / "bundle"))
    assert proc.returncode == 0, proc.stderr
    assert "gfx950" in proc.stdout and "float16" in proc.stdout and "key" in proc.stdout
    # The message carries the manifest line that would add the kernel, with build()'s own arguments.
    line = next(l.strip() for l in proc.stdout.splitlines() if l.strip().startswith("{"))
    import tomllib
    entry = tomllib.loads("kernels = [" + line.rstrip(",") + "]")["kernels"][0]
    assert entry["op"] == "gemm" and entry["target"] == "gfx950" and (entry["m"], entry["n"], entry["k"]) == (1000,) * 3
