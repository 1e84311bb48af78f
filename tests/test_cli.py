import json
import subprocess
import sys

from conftest import needs_clang


def _hkjit(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hkjit", *args], capture_output=True, text=True, env=env)


def test_info_lists_compilers_and_cache(cache_dir):
    out = _hkjit("info")
    assert out.returncode == 0, out.stderr
    for word in ("devices:", "compilers:", "clang", "nvrtc", "cache:", str(cache_dir)):
        assert word in out.stdout


@needs_clang
def test_inspect_json_reports_static_figures(cache_dir):
    out = _hkjit("inspect", "gemm", "--arch", "gfx950", "--shape", "256,256,256", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["target"] == "gfx950" and report["spills"] == 0 and report["vgprs"] > 0


def test_errors_are_one_line_and_exit_2(cache_dir):
    out = _hkjit("inspect", "gemm", "--arch", "gfx1100")
    assert out.returncode == 2 and "unsupported target" in out.stderr and "Traceback" not in out.stderr
