"""Property-based tests over the public API and the CLI (issue 12): whatever the dtypes, shapes,
strides, keyword values and environment values, hkjit gives a correct result or an HKJitError
subclass; never another exception, never a crash, never a write outside its own folders.

Examples are bounded and derandomized (no example database), so CI runs the same cases every time
in a few seconds on 2 cores; compiles are kept few by stopping at `Op.plan` (what `hkjit.build` and
`hkjit inspect` check before compiling) or by reusing one specialisation."""

import contextlib
import math
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hkjit
from hkjit import cli, ops, spec
from hkjit.bench.cold_compile import environment
from hkjit.errors import HKJitError

from conftest import HAVE_GPU, needs_clang

SETTINGS = dict(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values a caller might pass anywhere: the awkward ones on purpose.
ANY_VALUE = st.one_of(
    st.integers(min_value=-2 ** 70, max_value=2 ** 70), st.sampled_from([0, 1, 2, 4, 8, 16, 64, 128, 256, 2 ** 31]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.booleans(), st.none(),
    st.lists(st.integers(0, 300), max_size=3), st.sampled_from(["bfloat16", "float16", "float32", "col", "row",
                                                                 "16x16x32", "gemm", "../x", "a;b"]))
TARGETS = st.one_of(st.sampled_from(["gfx942", "gfx950", "sm_90a", "gfx942:sramecc+:xnack-", "sm_90",
                                     "gfx950:xnack+:xnack-", "gfx1100", "", ":", "gfx950:"]), st.text(max_size=10))
DTYPES = [ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.int8, np.int32, np.bool_, np.complex64]


@contextlib.contextmanager
def _environment(**values):
    """The environment variables set (None: removed) and hkjit's state reset, inside the block."""
    with environment(**values):
        hkjit.reset_state()
        try:
            yield
        finally:
            hkjit.reset_state()


@settings(max_examples=150, **SETTINGS)
@given(name=st.sampled_from(ops.names()), target=TARGETS,
       keywords=st.dictionaries(st.sampled_from(["m", "n", "k", "rows", "hidden", "dtype", "out_dtype", "block_m",
                                                 "block_n", "group_m", "stages", "waves", "mfma", "vec", "threads",
                                                 "a_layout", "bias", "num_sms", "bogus", "split_k"]),
                                ANY_VALUE, max_size=5))
def test_plan_gives_a_plan_or_an_hkjit_error(name, target, keywords):
    """What `hkjit.build` / `hkjit inspect` validate before compiling: a plan whose generated unit
    renders, or an HKJitError."""
    op = ops.get(name)
    params = {**op.default_shape, **keywords}
    try:
        plan = op.plan(target, **params)
    except HKJitError:
        return
    assert plan.threads > 0 and all(g >= 1 for g in plan.grid)
    assert spec.render(plan.spec)


def _array(draw_dtype, shape, transpose, rng):
    x = rng.standard_normal(shape) if shape else np.float64(rng.standard_normal())
    arr = np.asarray(x).astype(draw_dtype)
    return arr.T if transpose and arr.ndim == 2 else arr


@pytest.mark.skipif(HAVE_GPU, reason="with a GPU, valid host arrays would run there (compiles per shape)")
@settings(max_examples=120, **SETTINGS)
@given(shapes=st.lists(st.lists(st.integers(0, 5), max_size=3), min_size=2, max_size=2),
       dtypes=st.lists(st.sampled_from(DTYPES), min_size=2, max_size=2),
       transposes=st.lists(st.booleans(), min_size=2, max_size=2),
       step=st.sampled_from([1, 2]), keywords=st.dictionaries(
           st.sampled_from(["alpha", "beta", "out_dtype", "block_m", "group_m", "num_sms", "bias", "c"]),
           ANY_VALUE, max_size=3))
def test_gemm_arrays_and_keywords_are_validated(shapes, dtypes, transposes, step, keywords):
    """Arbitrary host arrays and keywords, no device to run on: an HKJitError always (a bad input
    is reported as such, a good one as 'no GPU found'), never another exception."""
    rng = np.random.default_rng(0)
    a, b = (_array(dt, tuple(s), t, rng) for dt, s, t in zip(dtypes, shapes, transposes))
    if step == 2 and a.ndim == 2:
        a = a[::2]
    with _environment(HKJIT_DEVICE=None):
        with pytest.raises(HKJitError):
            hkjit.gemm(a, b, **keywords)


@needs_clang
@settings(max_examples=12, **SETTINGS)
@given(alpha=st.one_of(st.floats(-1e3, 1e3), st.floats(allow_nan=True, allow_infinity=True),
                       st.integers(-2 ** 70, 2 ** 70),
                       st.text(max_size=3), st.none(), st.booleans()),
       beta=st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))), with_c=st.booleans())
def test_gemm_on_the_simulator_is_correct_or_refused(cache_dir, alpha, beta, with_c):
    """One specialisation (alpha and beta are run-time scalars): a result within bf16 rounding of
    the float64 reference, or an HKJitError; the output is poisoned before every run."""
    rng = np.random.default_rng()
    a = rng.standard_normal((40, 24)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((24, 56)).astype(ml_dtypes.bfloat16)
    c = rng.standard_normal((40, 56)).astype(ml_dtypes.bfloat16) if with_c else None
    out = np.full((40, 56), np.nan, np.float32)
    try:
        hkjit.gemm(a, b, c=c, alpha=alpha, beta=beta if with_c else 0.0, out=out, device="sim:gfx950")
    except HKJitError:
        return
    assert isinstance(alpha, (int, float)) and math.isfinite(alpha) and abs(alpha) < 3.5e38
    alpha32 = float(np.float32(alpha))                 # the kernel's alpha is a C float
    ref = alpha32 * (a.astype(np.float64) @ b.astype(np.float64))
    if with_c:
        ref += float(np.float32(beta)) * c.astype(np.float64)
    assert np.isfinite(out).all()
    assert np.abs(out - ref).max() <= 2e-2 * np.abs(ref).max() + 1e-30


CLI_TOKENS = st.one_of(
    st.sampled_from(["inspect", "gemm", "rms_norm", "--arch", "gfx950", "sm_90a", "gfx942:sramecc+", "--shape",
                     "256,256,256", "a,b,c", "1,2", "-1,0,3", "--json", "--dtype", "float16", "block_m=128",
                     "group_m=99999999999", "=", "x=", "--bogus", "-j", "-1", "cache", "ls", "stats", "bundle",
                     "verify", "precompile", "--manifest", "nope.toml", "-o", "/proc/nope/x", "info", "--help"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8))
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
INSPECT = st.builds(
    lambda op, arch, shape, params, json_flag: ["inspect", op, "--arch", arch, *shape, *params, *json_flag],
    st.sampled_from(["gemm", "rms_norm", "softmax", "nope", ""]),
    st.one_of(st.sampled_from(["gfx950", "gfx942", "sm_90a", "gfx950,sm_90a", "gfx950:sramecc+:sramecc-"]), TEXT),
    st.one_of(st.just([]), st.sampled_from([["--shape", "256,256,256"], ["--shape", "a,b,c"], ["--shape", "1,2"],
                                            ["--shape", "-1,0,3"], ["--shape", "99999999999,1,1"]])),
    st.lists(st.one_of(st.sampled_from(["block_m=128", "group_m=99999999999", "stages=x", "=", "x=", "bogus=1",
                                        "a_layout=col", "block_m=-1"]), TEXT), max_size=2),
    st.sampled_from([[], ["--json"]]))
COMMANDS = st.one_of(INSPECT, st.lists(CLI_TOKENS, min_size=1, max_size=6),
                     st.sampled_from([["info"], ["cache", "ls"], ["cache", "stats", "--json"], ["cache", "verify"],
                                      ["precompile", "--manifest", "nope.toml", "-o", "x"],
                                      ["precompile", "--manifest", "nope.toml", "-j", "-1", "-o", "x"],
                                      ["cache", "export", "/proc/x.zip"], ["bundle", "verify", "/nonexistent"]]))


@needs_clang
@settings(max_examples=60, **SETTINGS)
@given(argv=COMMANDS)
def test_cli_exits_0_1_or_2_without_traceback(cache_dir, tmp_path, capsys, argv):
    """Any command line: exit status 0, 1 or 2, at most one line on stderr (an error), none on
    success; files appear only in the cache."""
    if "--help" in argv or "-h" in argv:
        argv = [a for a in argv if a not in ("--help", "-h")] or ["info"]
    if "bench" in argv:
        return                                     # benchmarks run for minutes by design
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    before = set(work.iterdir())
    cwd = os.getcwd()
    os.chdir(work)
    try:
        try:
            status = cli.main(argv)
        except SystemExit as e:                    # argparse: usage errors
            status = e.code
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert status in (0, 1, 2), (argv, status, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) <= 1 and all("error:" in line for line in lines), (argv, err)   # bundle verify: report on stdout
    assert status or not lines, (argv, err)
    assert set(work.iterdir()) == before, f"{argv} wrote into the working folder"


@needs_clang
@settings(max_examples=40, **SETTINGS)
@given(variable=st.sampled_from(["HKJIT_COMPILE_TIMEOUT", "HKJIT_CLANG", "HKJIT_COMPILER", "HKJIT_DEVICE",
                                 "HKJIT_BUNDLE_PATH", "HKJIT_OFFLINE"]),
       value=st.one_of(st.sampled_from(["abc", "-1", "0", "nan", "1e999", "/bin/echo", "/tmp", "nvrtc", "clang",
                                        "hipcc", "sim:gfx950", "cuda:9", "rocm:x", "/nonexistent", "1", "yes"]),
                       st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10)))
def test_environment_values_give_a_kernel_or_an_hkjit_error(cache_dir, variable, value):
    """One build of a small kernel under a hostile environment value: the kernel (the same one as
    without the value, or a recompile) or an HKJitError."""
    with _environment(**{variable: value}):
        try:
            built = hkjit.build("gemm", target="gfx950", m=64, n=64, k=64, dtype="bfloat16")
        except HKJitError:
            return
        assert built.code[:4] == b"\x7fELF"
