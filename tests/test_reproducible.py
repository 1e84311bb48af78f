"""One cache key, one code object: the same specialisation built in two processes with two fresh
cache dirs (at different depths, so every path a compiler could hash differs) gives the same key
and byte-identical code on every target."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hkjit
from hkjit import codeobj

from conftest import HAVE_CLANG, HAVE_NVRTC, needs_clang, needs_nvrtc

SPEC = dict(m=256, n=256, k=256)
TARGETS = [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang),
           pytest.param("sm_90a", marks=needs_nvrtc)]

_CHILD = """
import json, sys
from pathlib import Path
import hkjit
out = Path(sys.argv[1])
keys = {}
for target in sys.argv[2:]:
    built = hkjit.build("gemm", target=target, **json.loads(%r))
    (out / (target + ".bin")).write_bytes(built.code)
    keys[target] = [built.key, built.compiled]
(out / "keys.json").write_text(json.dumps(keys))
""" % json.dumps(SPEC)


def _build_in_fresh_process(cache_dir: Path, out: Path, targets) -> dict:
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HKJIT_COMPILER", "HKJIT_DEVICE", "HKJIT_OFFLINE", "HKJIT_BUNDLE_PATH", "HKJIT_RECORD")}
    env["HKJIT_CACHE_DIR"] = str(cache_dir)
    root = str(Path(hkjit.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out), *targets], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    keys = json.loads((out / "keys.json").read_text())
    return {t: (keys[t][0], keys[t][1], (out / f"{t}.bin").read_bytes()) for t in targets}


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    targets = [t for t, ok in (("gfx942", HAVE_CLANG), ("gfx950", HAVE_CLANG), ("sm_90a", HAVE_NVRTC)) if ok]
    base = tmp_path_factory.mktemp("repro")
    dirs = (base / "cache-first", base / "elsewhere" / "deeper" / "cache-second")
    runs = [_build_in_fresh_process(d, base / f"out{i}", targets) for i, d in enumerate(dirs)]
    return dirs, runs


@pytest.mark.parametrize("target", TARGETS)
def test_same_key_gives_identical_code_in_any_process_and_cache_dir(target, two_builds):
    dirs, (first, second) = two_builds
    key1, compiled1, code1 = first[target]
    key2, compiled2, code2 = second[target]
    assert compiled1 and compiled2, "both processes must have run the compiler (fresh caches)"
    assert key1 == key2
    assert code1[:4] == b"\x7fELF" and len(code1) > 1000
    assert code1 == code2
    for d in dirs:   # nothing of where the source was written ends up in the object
        assert str(d).encode() not in code1 and d.name.encode() not in code1
    if target.startswith("gfx"):   # clang still names the unit; only the id is pinned
        cuids = [s for s in codeobj.symbols(code1) if s.startswith("__hip_cuid_")]
        assert len(cuids) == 1 and cuids == [s for s in codeobj.symbols(code2) if s.startswith("__hip_cuid_")]

