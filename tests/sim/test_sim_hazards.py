"""Planted bugs are caught: a missing s_waitcnt, a missing s_barrier, an out-of-bounds store;
each reported with the kernel, the instruction address and the wave. Their correct twins pass."""

import numpy as np
import pytest

from hkjit.sim import SimHazardError
from simutil import ARCHS, needs_clang, build, run

pytestmark = needs_clang


@pytest.mark.parametrize("arch", ARCHS)
def test_missing_waitcnt_is_caught(arch):
    x = np.arange(64, dtype=np.int32)
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch, ("WAIT=0",)), "missing_waitcnt", arch, (1, 1, 1), (64, 1, 1),
            [x, np.zeros(64, np.int32)])
    msg = str(e.value)
    assert "missing_waitcnt" in msg and "s_waitcnt vmcnt" in msg and "v_add_u32" in msg and "wave 0" in msg
    assert e.value.pc is not None and e.value.pc > 0
    _, o = run(build("hazards.hip", arch, ("WAIT=1",)), "missing_waitcnt", arch, (1, 1, 1), (64, 1, 1),
               [x, np.zeros(64, np.int32)])
    np.testing.assert_array_equal(o, x + 1)


@pytest.mark.parametrize("arch", ARCHS)
def test_missing_barrier_is_caught(arch):
    x = np.arange(128, dtype=np.int32)
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch, ("BARRIER=0",)), "missing_barrier", arch, (1, 1, 1), (128, 1, 1),
            [x, np.zeros(128, np.int32)])
    msg = str(e.value)
    assert "LDS race" in msg and "no s_barrier" in msg and "missing_barrier" in msg and "ds_read" in msg
    _, o = run(build("hazards.hip", arch, ("BARRIER=1",)), "missing_barrier", arch, (1, 1, 1), (128, 1, 1),
               [x, np.zeros(128, np.int32)])
    np.testing.assert_array_equal(o, 2 * x[::-1])


@pytest.mark.parametrize("arch", ARCHS)
def test_out_of_bounds_store_is_caught(arch):
    n = 100
    x = np.ones(n, np.float32)
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch), "oob_store", arch, (2, 1, 1), (64, 1, 1), [x, np.zeros(n, np.float32), n])
    msg = str(e.value)
    assert "out-of-bounds global store" in msg and "400 bytes from the start of a 400-byte allocation" in msg
    assert "oob_store" in msg and "global_store_dword" in msg


@pytest.mark.parametrize("arch", ARCHS)
def test_checks_off_runs_the_racy_kernel(arch):
    x = np.arange(128, dtype=np.int32)
    run(build("hazards.hip", arch, ("BARRIER=0",)), "missing_barrier", arch, (1, 1, 1), (128, 1, 1),
        [x, np.zeros(128, np.int32)], checks=False)
