"""codeobj reads an AMD code object's metadata note as LLVM's own reader does, and says clearly
when the note is not what it should be."""
import re
import shutil
import subprocess

import pytest

import hkjit
from hkjit import codeobj

from conftest import needs_clang

_SCALAR = re.compile(r"^\s*(?:- )?(\.\w+):\s+(\S+)\s*$")


def _readelf_kernel_scalars(path) -> dict:
    """The `.key: value` scalars of the one kernel that `llvm-readelf --notes` prints."""
    text = subprocess.run([shutil.which("llvm-readelf-22"), "--notes", str(path)], capture_output=True,
                          text=True, check=True).stdout
    kernel = text.split("amdhsa.kernels:")[1].split("amdhsa.target:")[0]
    out = {}
    for line in kernel.splitlines():
        m = _SCALAR.match(line)
        if m and m.group(1) not in (".offset", ".size", ".value_kind"):   # those belong to .args
            out[m.group(1)] = m.group(2)
    return out


def _as_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@needs_clang
@pytest.mark.skipif(shutil.which("llvm-readelf-22") is None, reason="llvm-readelf-22 not installed")
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_metadata_matches_llvm_readelf(target, cache_dir, tmp_path):
    built = hkjit.build("gemm", target=target, m=200, n=136, k=96, dtype="float16")
    path = tmp_path / "kernel.co"
    path.write_bytes(built.code)
    expected = _readelf_kernel_scalars(path)
    meta = codeobj.amd_metadata(built.code)
    kernel, = meta["amdhsa.kernels"]
    assert len(expected) >= 10 and meta["amdhsa.target"] == f"amdgcn-amd-amdhsa--{target}"
    assert {k: _as_text(kernel[k]) for k in expected} == expected
    info = codeobj.amd_kernel_info(built.code, "hkjit_gemm")
    assert info["vgprs"] == int(expected[".vgpr_count"]) and info["sgprs"] == int(expected[".sgpr_count"])
    assert info["lds_bytes"] == int(expected[".group_segment_fixed_size"]) and info["spills"] == 0


@needs_clang
def test_corrupt_metadata_note_is_a_code_object_error(cache_dir):
    code = bytearray(hkjit.build("gemm", target="gfx942", m=200, n=136, k=96).code)
    desc = next(d for name, t, d in codeobj.notes(bytes(code)) if name == "AMDGPU")
    at = bytes(code).index(desc)
    code[at:at + len(desc)] = b"\xc1" * len(desc)   # 0xc1: the one byte msgpack never uses
    with pytest.raises(codeobj.CodeObjectError, match="not valid msgpack"):
        codeobj.amd_metadata(bytes(code))
    with pytest.raises(hkjit.HKJitError):
        codeobj.amd_kernel_info(bytes(code), "hkjit_gemm")
