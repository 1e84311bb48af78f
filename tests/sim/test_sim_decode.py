"""The binary decoder agrees with llvm-objdump-22 on every instruction of the test kernels and of
the shipped GEMM (mnemonic and length), on both targets; loader basics."""

import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from hkjit.sim import SimDevice, SimError
from hkjit.sim.decode import decode
from hkjit.sim.loader import CodeObject
from simutil import ARCHS, needs_clang, build, run

pytestmark = needs_clang
OBJDUMP = shutil.which("llvm-objdump-22")


def _objdump(code, arch):
    with tempfile.NamedTemporaryFile(suffix=".hsaco") as f:
        f.write(code)
        f.flush()
        out = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", f.name], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s+(\S+).*//\s*([0-9A-F]{12}):((?: [0-9A-F]{8})+)", line)
        if m:
            rows.append((int(m.group(2), 16), m.group(1), len(m.group(3).split()) * 4))
    return rows


@pytest.mark.skipif(OBJDUMP is None, reason="llvm-objdump-22 is not installed")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", ["isa.hip", "mfma.hip", "hazards.hip"])
def test_decoder_matches_llvm_objdump(arch, source):
    code = build(source, arch)
    co = CodeObject(code)
    k = co.kernel(co.kernel_names()[0])
    rows = _objdump(code, arch)
    assert len(rows) > 50
    for addr, name, size in rows:
        inst = decode(k.code, addr - k.text_addr, arch)
        want = re.sub(r"_(e32|e64|sdwa|dpp)$", "", name)
        if want.startswith("v_mfma_scale_"):   # decoded as its two halves: ld_scale + the MFMA
            assert (inst.name, inst.size) == ("v_mfma_ld_scale_b32", 8)
            inst = decode(k.code, addr - k.text_addr + 8, arch)
            want, size = want.replace("v_mfma_scale_", "v_mfma_"), 8
        assert (inst.name, inst.size) == (want, size), f"+{addr:#x}: {inst!r} vs {name} ({size} bytes)"


@pytest.mark.parametrize("arch", ARCHS)
def test_loader_reads_descriptor_and_metadata(arch):
    co = CodeObject(build("mfma.hip", arch))
    assert "mfma_bf16_16x16x16" in co.kernel_names()
    k = co.kernel("mfma_bf16_16x16x16")
    assert k.meta[".wavefront_size"] == 64 and arch in k.target
    assert [n for n, _, _ in k.descriptor.user_sgprs()] == ["kernarg_segment_ptr"]
    assert k.descriptor.accum_offset >= 4


@pytest.mark.parametrize("arch", ARCHS)
def test_device_interface(arch):
    dev = SimDevice("sim:" + arch)
    assert dev.target.arch == arch and dev.name == f"sim:{arch}"
    buf = dev.alloc(40)
    x = np.arange(10, dtype=np.float32)
    dev.copy_in(buf, x)
    y = np.empty_like(x)
    dev.copy_out(buf, y)
    np.testing.assert_array_equal(x, y)
    with pytest.raises(SimError):
        dev.copy_in(buf, np.zeros(11, np.float32))
    with pytest.raises(SimError):
        dev.load(build("mfma.hip", "gfx942" if arch == "gfx950" else "gfx950"), "mfma_bf16_16x16x16")
    with pytest.raises(SimError):
        dev.load(build("mfma.hip", arch), "no_such_kernel")
    dev.free(buf)


@pytest.mark.parametrize("arch", ARCHS)
def test_multi_dim_grid_and_block_ids(arch):
    src = """
#include "hk/common/platform.hpp"
extern "C" __global__ void ids(int* o) {
  int bx = __builtin_amdgcn_workgroup_id_x(), by = __builtin_amdgcn_workgroup_id_y();
  int tx = __builtin_amdgcn_workitem_id_x(), ty = __builtin_amdgcn_workitem_id_y();
  int nbx = __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x();
  int w = __builtin_amdgcn_workgroup_size_x(), h = __builtin_amdgcn_workgroup_size_y();
  int i = ((by * nbx + bx) * h + ty) * w + tx;
  o[i] = bx | by << 8 | tx << 16 | ty << 24;
}
"""
    o = np.zeros(3 * 2 * 40 * 3, np.int32)
    (o,) = run(build(src, arch), "ids", arch, (3, 2, 1), (40, 3, 1), [o])
    o = o.reshape(2, 3, 3, 40)
    by, bx, ty, tx = np.meshgrid(np.arange(2), np.arange(3), np.arange(3), np.arange(40), indexing="ij")
    np.testing.assert_array_equal(o, bx | by << 8 | tx << 16 | ty << 24)
