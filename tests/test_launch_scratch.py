"""Workspace and scratch on the shared launch path, without a GPU: the sm_90a attention backward's
plan (a small zeroed workspace of semaphores kept per stream, the dQ accumulators as per-call
scratch), and the launcher's bookkeeping with the real op's bind, plan and fill over CPU tensors.
What stands in: the kernel handle (blocks are recorded, not launched) and the device's memory
calls (recorded; pointers are made up). Scratch from torch's caching allocator is real (CPU
tensors); the GPU half, memory held after many shapes and CUDA graphs, is in
tests/test_attention_backward_hopper_gpu.py."""

import ctypes
import itertools
import weakref

import pytest

torch = pytest.importorskip("torch")

from hkjit import interop, launch, native, ops, targets  # noqa: E402
from hkjit.errors import GraphCaptureError, InvalidArgumentError  # noqa: E402
from hkjit.ops import _hopper_attention_bwd as B  # noqa: E402
from hkjit.ops.attention_backward import ARRAYS, DKDV_OP  # noqa: E402
from hkjit.ops.rms_norm import RMS_NORM  # noqa: E402

SM90 = targets.parse("sm_90a")
MiB = 1 << 20


class Device:
    """What bind and plan read of a device, and its memory calls, recorded (pointers made up)."""
    kind, index, multiprocessors = "cuda", 0, 132

    def __init__(self):
        self.target, self.log, self.capturing = SM90, [], set()
        self._next = itertools.count(1)

    def alloc(self, nbytes):
        ptr = next(self._next) << 40
        self.log.append(("alloc", ptr, nbytes))
        return ptr

    def free(self, ptr):
        self.log.append(("free", ptr))

    def synchronize(self, stream=0):
        self.log.append(("sync", stream))

    def copy_in(self, ptr, host_ptr, nbytes):
        self.log.append(("zero", ptr, nbytes, bytes((ctypes.c_ubyte * nbytes).from_address(host_ptr)) == bytes(nbytes)))

    def is_capturing(self, stream):
        return stream in self.capturing

    def events(self, kind):
        return [e for e in self.log if e[0] == kind]


class Kernel:
    """The kernel handle: packs as the real one does, records launches instead of making them."""
    name = "hkjit_attention_bwd_dkdv"

    def __init__(self):
        self.packs, self.launches, self.during_launch = 0, [], None

    def pack(self, struct):
        self.packs += 1
        return bytes(struct)

    def launch_packed(self, grid, block, smem, packed, stream):
        self.launches.append((B.WorkspaceArgs.from_buffer_copy(packed), stream))
        if self.during_launch:
            self.during_launch()


@pytest.fixture(autouse=True)
def own_scratch(monkeypatch):
    """Shared scratch of this test only."""
    monkeypatch.setattr(launch, "_shared_scratch", {})


def _arrays(b, h, hkv, nq, nk, d):
    q, do = (torch.randn(b, h, nq, d, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, hkv, nk, d, dtype=torch.bfloat16) for _ in range(2))
    delta = torch.randn(b, h, nq)
    values = dict(q=q, k=k, v=v, grad_out=do, lse=torch.randn(b, h, nq), delta=delta,
                  dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v))
    return tuple(values.get(n) for n in ARRAYS)


def _launcher(device, shape, kernel=None):
    """The dkdv launcher the launch path makes for `shape` (real bind and plan), and its pointers."""
    values = _arrays(*shape)
    described = tuple(None if v is None else interop.describe(v) for v in values)
    binding = DKDV_OP.bind(dict(zip(ARRAYS, described)), {"causal": False, "layout": "bhnd"}, device)
    # the cp.async producer: TMA's (the default) tensor maps are encoded by the NVIDIA driver, absent here
    plan = DKDV_OP.plan(SM90, **binding.request, dkdv_producer="cpasync")
    return launch.Launcher(DKDV_OP, kernel or Kernel(), plan, binding, device), \
        tuple(0 if a is None else a.ptr for a in described), values


def test_plan_keeps_semaphores_and_gives_the_accumulators_as_scratch():
    """The issue's row (GQA B16 H64/8 N16384 D128): 8 GiB of dQ accumulators per call, 1 MiB kept."""
    plan = DKDV_OP.plan(SM90, batch=16, heads=64, kv_heads=8, n_q=16384, n_k=16384, head_dim=128, dtype="bfloat16")
    assert plan.scratch_bytes == 16 * 64 * 256 * 64 * 128 * 4 == 8 << 30
    assert plan.workspace_bytes == plan.workspace_zeroed == 16 * 64 * 256 * 4 == MiB
    for n, d in ((1, 64), (63, 64), (65, 128), (1000, 128), (4097, 64), (129, 64)):
        p = DKDV_OP.plan(SM90, batch=3, heads=4, kv_heads=2, n_q=n, n_k=300, head_dim=d, dtype="bfloat16")
        block_q = 128 if d == 64 else 64          # the defaults: 128 query rows a step at head_dim 64
        blocks = 3 * 4 * -(-n // block_q)
        assert p.scratch_bytes == blocks * block_q * d * 4
        assert p.workspace_bytes == p.workspace_zeroed == -(-blocks * 4 // 256) * 256
    dq = ops.get("attention_bwd_dq").plan(SM90, batch=2, heads=4, kv_heads=4, n_q=100, n_k=100, head_dim=64,
                                               dtype="bfloat16")
    assert (dq.workspace_bytes, dq.workspace_zeroed, dq.scratch_bytes) == (0, 0, 0)
    rms = RMS_NORM.plan(SM90, rows=8, hidden=256, dtype="bfloat16")
    assert (rms.workspace_bytes, rms.scratch_bytes) == (0, 0)


def test_other_ops_keep_counters_and_take_their_partials_as_scratch():
    """Split-K gemm: a counter per (tile, consumer) kept, fp32 partials per call; split topk rows: a
    counter per row kept, each part's survivors per call."""
    gemm = ops.get("gemm").plan(SM90, m=16, n=4096, k=4096, dtype="bfloat16", num_sms=132)
    assert (gemm.config["split_k"], gemm.config["block_m"], gemm.config["block_n"]) == (2, 64, 64)
    assert (gemm.workspace_bytes, gemm.workspace_zeroed, gemm.scratch_bytes) == (256, 256, 64 * 2 * 64 * 64 * 4)
    plain = ops.get("gemm").plan(SM90, m=4096, n=4096, k=4096, dtype="bfloat16", num_sms=132)
    assert (plain.workspace_bytes, plain.scratch_bytes) == (0, 0)
    topk = ops.get("topk").plan(SM90, rows=16, n=128256, dtype="bfloat16")
    assert topk.config["split"] == 16
    assert (topk.workspace_bytes, topk.workspace_zeroed, topk.scratch_bytes) == (64, 64, 16 * 16 * 2 * 128 * 4)


def test_shared_scratch_grows_to_the_largest_call_and_is_shared():
    """Non-torch callers: one buffer per (device, stream), grown (after the stream's queued work)
    to the largest call, reused by every launcher on that stream; workspaces stay per launcher."""
    dev = Device()
    small, ps, _ = _launcher(dev, (1, 2, 2, 200, 130, 64))
    big, pb, _ = _launcher(dev, (2, 4, 2, 700, 130, 128))
    assert small.plan.scratch_bytes < 2 * MiB < big.plan.scratch_bytes
    small.run(ps, (0.125,), 7)
    (alloc_ws, ws_small, n_ws), (alloc_s, s1, n1) = dev.events("alloc")
    assert n_ws == small.plan.workspace_bytes and n1 == 2 * MiB           # rounded up to 2 MiB
    assert dev.events("zero") == [("zero", ws_small, small.plan.workspace_zeroed, True)]
    args, stream = small.kernel.launches[-1]
    assert (args.semaphores, args.dq_accum, stream) == (ws_small, s1, 7) and args.q_blocks == 4
    big.run(pb, (0.125,), 7)
    s2 = big.kernel.launches[-1][0].dq_accum
    ws_big = big.kernel.launches[-1][0].semaphores
    assert dev.log[-5:] == [("alloc", ws_big, big.plan.workspace_bytes),
                            ("zero", ws_big, big.plan.workspace_zeroed, True),
                            ("sync", 7), ("free", s1),            # the old scratch, after the stream's queued work
                            ("alloc", s2, -(-big.plan.scratch_bytes // (2 * MiB)) * 2 * MiB)]
    before = len(dev.log)
    small.run(ps, (0.125,), 7)
    assert len(dev.log) == before and small.kernel.launches[-1][0].dq_accum == s2   # fits: shared, no call
    small.run(ps, (0.125,), 9)                                                       # another stream: its own
    assert dev.events("alloc")[-1][2] == 2 * MiB and len(dev.events("alloc")) == 6   # (and its own semaphores)
    held = launch.shared_scratch()
    assert held == {("cuda", 0, 7): (dev.events("alloc")[3][2], 0), ("cuda", 0, 9): (2 * MiB, 0)}


def test_scratch_a_capture_used_is_kept_and_growth_during_capture_is_refused():
    dev = Device()
    small, ps, _ = _launcher(dev, (1, 2, 2, 200, 130, 64))
    big, pb, _ = _launcher(dev, (2, 4, 2, 700, 130, 128))
    small.run(ps, (0.125,), 7)
    big._workspace(7)                   # its semaphores made outside the capture (the warm-up's part)
    first = small.kernel.launches[-1][0].dq_accum
    dev.capturing.add(7)
    small.run(ps, (0.125,), 7)          # fits: recorded into the graph with this buffer
    n = len(dev.log)
    with pytest.raises(GraphCaptureError, match="more than the 2097152 bytes .* capturing .* warm-up"):
        big.run(pb, (0.125,), 7)
    assert len(dev.log) == n and not big.kernel.launches
    dev.capturing.clear()
    big.run(pb, (0.125,), 7)            # grows: the captured buffer is kept, not freed
    assert not dev.events("free") and not dev.events("sync")
    assert launch.shared_scratch()[("cuda", 0, 7)][1] == 2 * MiB
    assert big.kernel.launches[-1][0].dq_accum != first
    launch.reset()                      # gives back what no graph uses
    assert dev.events("sync") == [("sync", 7)] and dev.events("free") == [("free", big.kernel.launches[-1][0].dq_accum)]
    assert launch.shared_scratch()[("cuda", 0, 7)] == (0, 2 * MiB)


def test_torch_scratch_is_allocated_per_call_and_released_after_the_launch(monkeypatch):
    """Torch callers: a tensor of torch's allocator (on the launch stream), alive during the launch,
    released on return; nothing shared, nothing held."""
    dev = Device()
    launcher, ptrs, _ = _launcher(dev, (1, 2, 2, 200, 130, 64))
    launcher.torch_device = torch.device("cpu")      # where a GPU caller's is cuda:N
    made, real_empty = [], torch.empty

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        made.append((weakref.ref(t), t.data_ptr(), t.numel(), t.dtype))
        return t
    monkeypatch.setattr(torch, "empty", empty)
    alive = []
    launcher.kernel.during_launch = lambda: alive.append(made[-1][0]() is not None)
    launcher.run(ptrs, (0.125,), 7, launch.TORCH)
    ref, ptr, numel, dtype = made[-1]
    assert (numel, dtype) == (launcher.plan.scratch_bytes, torch.uint8)
    assert launcher.kernel.launches[-1][0].dq_accum == ptr and alive == [True] and ref() is None
    assert launch.shared_scratch() == {} and len(dev.events("alloc")) == 1          # the semaphores only
    packs = launcher.kernel.packs
    launcher.run(ptrs, (0.125,), 7, launch.TORCH)
    same = made[-1][1] == ptr                        # the allocator usually hands the same block back
    assert launcher.kernel.packs == packs + (0 if same else 1)


def test_a_callers_scratch_and_the_packed_block_memo():
    """Staged calls give their own scratch pointer; the block memo keys on it."""
    dev = Device()
    launcher, ptrs, _ = _launcher(dev, (1, 2, 2, 200, 130, 64))
    launcher.run(ptrs, (0.125,), 0, 0xABC000)
    launcher.run(ptrs, (0.125,), 0, 0xABC000)
    assert launcher.kernel.packs == 1 and launcher.kernel.launches[-1][0].dq_accum == 0xABC000
    launcher.run(ptrs, (0.125,), 0, 0xDEF000)
    assert launcher.kernel.packs == 2 and launcher.kernel.launches[-1][0].dq_accum == 0xDEF000
    assert launch.shared_scratch() == {}
    with pytest.raises(InvalidArgumentError, match="needs its dQ accumulators"):
        launcher.run(ptrs, (0.5,), 0, 0)


def test_held_memory_does_not_grow_with_shapes():
    """Many shapes through one stream: kept = the semaphores of each launcher (small) plus one
    shared buffer of the largest call; before, each launcher kept its own scratch too."""
    dev = Device()
    shapes = [(2, 4, 2, n, 300, d) for n in (100, 250, 700, 1000, 333) for d in (64, 128)]
    scratch, kept = [], 0
    for shape in shapes:
        launcher, ptrs, _ = _launcher(dev, shape)
        launcher.run(ptrs, (0.1,), 5)
        scratch.append(launcher.plan.scratch_bytes)
        kept += launcher.plan.workspace_bytes
    live = {}
    for e in dev.log:
        if e[0] == "alloc":
            live[e[1]] = e[2]
        elif e[0] == "free":
            del live[e[1]]
    assert sum(live.values()) == kept + -(-max(scratch) // (2 * MiB)) * 2 * MiB
    assert kept < sum(scratch) / 100


def test_ops_with_scratch_stay_off_the_native_path():
    dev = Device()
    launcher, ptrs, values = _launcher(dev, (1, 2, 2, 200, 130, 64))
    assert native.remember(None, DKDV_OP, values, (), (0.1,), ptrs, launcher, "", None, {}) is False
