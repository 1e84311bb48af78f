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


@pytest.mark.parametrize("arch", ARCHS)
def test_all_hazards_of_a_launch_are_reported(arch):
    x = np.arange(128, dtype=np.int32)
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch), "three_hazards", arch, (1, 1, 1), (128, 1, 1),
            [x, np.zeros(128, np.int32), 100])
    rules = sorted(h.rule for h in e.value.hazards)
    assert rules == ["lds-race", "missing-waitcnt", "out-of-bounds"], rules
    msg = str(e.value)
    for h in e.value.hazards:
        assert h.inst and h.wave and h.pc >= 0 and f"[{h.rule}]" in msg
    race = next(h for h in e.value.hazards if h.rule == "lds-race")
    assert "ds_read" in race.inst and "no s_barrier" in race.message
    oob = next(h for h in e.value.hazards if h.rule == "out-of-bounds")
    assert "global_store_dword" in oob.inst and "out-of-bounds global store" in oob.message


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_races_are_tracked_by_byte(arch):
    x = np.random.default_rng(3).integers(0, 65535, 128).astype(np.uint16)
    _, o = run(build("hazards.hip", arch, ("RACE=0",)), "halves", arch, (1, 1, 1), (128, 1, 1),
               [x, np.zeros(64, np.uint32)])
    np.testing.assert_array_equal(o, x[:64].astype(np.uint32) | x[64:].astype(np.uint32) << 16)
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch, ("RACE=1",)), "halves", arch, (1, 1, 1), (128, 1, 1),
            [x, np.zeros(64, np.uint32)])
    assert [h.rule for h in e.value.hazards] == ["lds-race"]
    assert "LDS byte 20 written by wave 0" in e.value.hazards[0].message


@pytest.mark.parametrize("arch", ARCHS)
def test_hazard_collection_is_bounded(arch):
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch), "oob_loop", arch, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.int32), 64, 10**6])
    assert "the launch was stopped after" in str(e.value)
    assert e.value.hazards[0].rule == "out-of-bounds" and e.value.hazards[0].count >= 1000


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_read_before_the_direct_to_lds_load_completes(arch):
    x = np.random.default_rng(4).integers(1, 1000, 64).astype(np.int32)
    with pytest.raises(SimHazardError) as e:
        run(build("hazards.hip", arch, ("WAIT=0",)), "dma_read_early", arch, (1, 1, 1), (64, 1, 1),
            [x, np.zeros(64, np.int32), 256])
    assert [h.rule for h in e.value.hazards] == ["lds-dma-wait"] and "ds_read_b32" in e.value.hazards[0].inst
    _, o = run(build("hazards.hip", arch, ("WAIT=1",)), "dma_read_early", arch, (1, 1, 1), (64, 1, 1),
               [x, np.zeros(64, np.int32), 256])
    np.testing.assert_array_equal(o, x)
