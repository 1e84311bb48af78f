"""The op layer: the registry, the protocol every op implements, the shared launch path's checks,
and the C++/Python agreement that every generated unit asserts."""
import numpy as np
import pytest

import hkjit
from hkjit import cli, jit, launch, ops, spec as spec_mod, targets
from hkjit.errors import CompileError, DTypeError, InvalidArgumentError, TargetError
from hkjit.op import Op, Plan

from conftest import needs_clang, needs_nvrtc

rng = np.random.default_rng()


def test_registry_discovers_ops_and_names_them():
    assert "gemm" in ops.names()
    gemm = ops.get("gemm")
    assert isinstance(gemm, Op) and gemm.shape_params == ("m", "n", "k")
    with pytest.raises(InvalidArgumentError, match="unknown op 'conv9d'; hkjit has .*gemm"):
        ops.get("conv9d")
    with pytest.raises(InvalidArgumentError, match="op must be a name"):
        ops.get(["gemm"])


# Ops whose kernel for a target is not written yet (their plan raises TargetError "... not built yet").
NOT_BUILT = {}   # every op is built for every target


@pytest.mark.parametrize("target", [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang),
                                    pytest.param("sm_90a", marks=needs_nvrtc)])
def test_every_op_plans_for_every_target_and_the_kernel_agrees(cache_dir, target):
    """Each registered op plans at its default shape; the generated unit static_asserts the plan's
    threads and dynamic shared memory (and per-arch formulas) against the C++ type, so a compile
    is the proof that both sides agree."""
    for name in ops.names():
        op = ops.get(name)
        try:
            plan = op.plan(target, **op.default_shape)
        except TargetError as e:   # a per-arch half not written yet says so (never a stand-in kernel)
            assert name in NOT_BUILT.get(target, ()) and "not built yet" in str(e), (name, str(e))
            continue
        assert isinstance(plan, Plan) and plan.threads > 0 and len(plan.grid) == 3
        checks = dict(plan.spec.checks)
        assert checks["threads"] == plan.threads and checks["dynamic_smem"] == plan.dynamic_smem
        assert "static_assert(hkjit_kernel::threads ==" in spec_mod.render(plan.spec)
        built = jit.build_spec(plan.spec)
        assert built.meta["spills"] == 0


@pytest.mark.parametrize("target", [pytest.param("gfx950", marks=needs_clang), pytest.param("sm_90a", marks=needs_nvrtc)])
def test_a_plan_the_kernel_disagrees_with_does_not_compile(cache_dir, target):
    plan = ops.get("gemm").plan(target, m=256, n=256, k=256)
    wrong = spec_mod.Specialization(plan.spec.op, plan.spec.target, plan.spec.source, plan.spec.kernel_type,
                                    plan.spec.entry, plan.spec.params, (("threads", plan.threads + 64),))
    with pytest.raises(CompileError, match="disagree on threads"):
        jit.build_spec(wrong)


def test_checks_are_ints_on_member_names():
    t = targets.parse("gfx950")
    for bad in ((("threads", True),), (("threads;", 1),), (("x", "1"),)):
        with pytest.raises(InvalidArgumentError):
            spec_mod.Specialization("gemm", t, "gemm_cdna.hip", "gemm_cdna<1>", "hkjit_gemm", (), bad)


def test_unknown_keywords_are_rejected_by_the_op_and_by_each_arch():
    gemm = ops.get("gemm")
    with pytest.raises(InvalidArgumentError, match="unknown keyword.*blockm"):
        gemm.plan("gfx950", m=64, n=64, k=64, blockm=128)
    with pytest.raises(InvalidArgumentError, match=r"sm_90a.*unknown tile override.*mfma"):
        gemm.plan("sm_90a", m=64, n=64, k=64, mfma="16x16x32")
    with pytest.raises(InvalidArgumentError, match=r"gfx950.*unknown tile override.*consumers"):
        gemm.plan("gfx950", m=64, n=64, k=64, consumers=2)
    with pytest.raises(InvalidArgumentError, match="missing m="):
        gemm.plan("gfx950", n=64, k=64)
    with pytest.raises(DTypeError, match="dtype=float32"):
        gemm.plan("gfx950", m=64, n=64, k=64, dtype="float32")


def _h(*shape, dtype=np.float16):
    return rng.standard_normal(shape).astype(dtype)


def test_launch_path_rejects_bad_scalars_tiles_and_read_only_outputs(cache_dir, monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("a bad call reached the compile stage")
    monkeypatch.setattr(jit, "load_spec", forbidden)
    a, b = _h(8, 8), _h(8, 8)
    with pytest.raises(InvalidArgumentError, match="tile override block_m=\\[128\\]"):
        hkjit.gemm(a, b, device="sim:gfx950", block_m=[128])
    out = np.empty((8, 8), np.float16)
    out.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="out is read-only"):
        hkjit.gemm(a, b, out=out, device="sim:gfx950")


@needs_clang
def test_bad_scalars_are_hkjit_errors(cache_dir):
    a, b = _h(8, 8), _h(8, 8)
    for bad in ("x", 1j, float("nan"), True):
        with pytest.raises(InvalidArgumentError, match="alpha="):
            hkjit.gemm(a, b, alpha=bad, device="sim:gfx950")


@needs_clang
def test_staged_outputs_come_back_into_strided_host_views(cache_dir):
    """A host `out` that is a strided view is written through the staging path, elements outside
    the view untouched."""
    a, b = _h(33, 20), _h(20, 17)
    big = np.full((33, 40), np.nan, np.float32)
    view = big[:, 5:22]
    got = hkjit.gemm(a, b, out=view, device="sim:gfx942")
    assert got is view
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(view - ref) / np.linalg.norm(ref) < 1e-3
    assert np.isnan(big[:, :5]).all() and np.isnan(big[:, 22:]).all()


@needs_clang
def test_reset_state_forgets_launchers_and_keys(cache_dir):
    hkjit.gemm(_h(16, 16), _h(16, 16), device="sim:gfx950")
    assert launch.launchers()
    hkjit.reset_state()
    assert launch.launchers() == []


@needs_clang
def test_inspect_through_the_registry(cache_dir, capsys):
    report = hkjit.inspect("gemm", "gfx950", m=512, n=512, k=512)
    assert report["spills"] == 0 and report["params"]["block_m"] >= 64
    assert cli.main(["inspect", "gemm", "--arch", "gfx942", "--shape", "256,256,256"]) == 0
    assert "gemm on gfx942" in capsys.readouterr().out
    assert cli.main(["inspect", "gemm", "--arch", "gfx942", "--shape", "a,b,c"]) == 2
    assert "give M,N,K" in capsys.readouterr().err


@needs_clang
@needs_nvrtc
def test_precompile_manifest_with_every_op_serves_them_offline(tmp_path, cache_dir):
    """One manifest naming gemm and rms_norm (shapes written positionally: the registry names the
    shape parameters), precompiled for all three targets by the CLI, then resolved in a fresh
    process in offline mode from the bundle alone."""
    import json
    import os
    import subprocess
    import sys
    manifest = tmp_path / "fleet.toml"
    manifest.write_text('version = 1\n'
                        'kernels = [\n'
                        '  { op = "gemm", shapes = [[256, 256, 256]], dtype = "bfloat16" },\n'
                        '  { op = "rms_norm", shapes = [[4096, 4096], [64, 128]], dtype = "float16" },\n'
                        ']\n')
    bundle = tmp_path / "bundle"
    assert cli.main(["precompile", "--shapes", str(manifest), "--arch", "gfx942,gfx950,sm_90a", "-o", str(bundle),
                     "-j", "2", "--no-progress"]) == 0
    env = dict(os.environ, HKJIT_OFFLINE="1", HKJIT_BUNDLE_PATH=str(bundle), HKJIT_CACHE_DIR=str(tmp_path / "fresh"))
    env.pop("HKJIT_RECORD", None)
    child = ("import json, hkjit\n"
             "out = []\n"
             "for t in ('gfx942', 'gfx950', 'sm_90a'):\n"
             "    out.append(hkjit.build('gemm', target=t, m=256, n=256, k=256).compiled)\n"
             "    for rows, hidden in ((4096, 4096), (64, 128)):\n"
             "        out.append(hkjit.build('rms_norm', target=t, rows=rows, hidden=hidden, dtype='float16').compiled)\n"
             "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [False] * 9


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_lds_size_is_one_fact(tmp_path, arch):
    """targets.py's LDS size and the tile library's hk::arch::lds_bytes are the same number: the
    compiler checks it (and refuses a wrong one)."""
    from hkjit import codeobj, compiler
    target = targets.parse(arch)
    comp = compiler.find_compiler(target, "clang")

    def probe(lds):
        unit = ('#include "hk/hk.hpp"\n'
                f'static_assert(hk::arch::lds_bytes == {lds}, "LDS size differs");\n'
                'extern "C" __global__ void hkjit_probe(int* p) { p[0] = 1; }\n')
        path = tmp_path / f"probe{lds}.hip"
        path.write_text(unit)
        return comp.compile(unit, path, target, [spec_mod.include_dir()], "hkjit_probe")
    assert "hkjit_probe" in codeobj.symbols(probe(target.smem_per_block).code)
    with pytest.raises(CompileError, match="LDS size differs"):
        probe(target.smem_per_block + 1024)
