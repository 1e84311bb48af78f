"""hkjit.attention_backward on host (NumPy) arrays for an sm_90a device, without a GPU: the call is
staged (inputs uploaded, two launches, results downloaded), and the sm_90a dK/dV kernel writes dq
although dq is an input of its op (outputs dk, dv): the binding names it as updated, so the staged
call brings it back. (It returned the prep launch's dq before: the rows that see no key, the rest
never written; an H100 run caught it by comparing with the same call on torch tensors.)
What stands in: the two kernels (they write marks through their argument blocks' pointers) and the
device, whose memory is host memory poisoned like fresh device memory."""

import ctypes

import numpy as np
import pytest

from hkjit import launch, targets
from hkjit.ops._attention_args import BackwardArgs
from hkjit.ops.attention_backward import DKDV_OP


class HostMemoryDevice:
    """What bind, plan and a staged call use of a CUDA device; its memory is host memory filled
    with 0xFF (NaN in fp16 and fp32) when allocated, so uploads and downloads really copy."""
    kind, index, multiprocessors = "cuda", 0, 132

    def __init__(self):
        self.target, self.blocks = targets.parse("sm_90a"), {}

    def alloc(self, nbytes):
        buf = ctypes.create_string_buffer(b"\xff" * nbytes, max(nbytes, 1))
        self.blocks[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def free(self, ptr):
        del self.blocks[ptr]

    def copy_in(self, ptr, host_ptr, nbytes):
        ctypes.memmove(ptr, host_ptr, nbytes)

    def copy_out(self, host_ptr, ptr, nbytes):
        ctypes.memmove(host_ptr, ptr, nbytes)

    def synchronize(self, stream=0):
        pass

    def is_capturing(self, stream):
        return False


def _view(ptr, shape, strides, dtype):
    """NumPy view of (host-backed) device memory at `ptr`; strides in elements."""
    item = np.dtype(dtype).itemsize
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    flat = np.frombuffer((ctypes.c_char * (span * item)).from_address(ptr), dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, shape, [s * item for s in strides])


B, H, HKV, NQ, NK, D = 2, 8, 2, 700, 450, 128      # the H100 comparison's shape


def _stand_ins(monkeypatch) -> list:
    """Install the device and the two kernels (names of the launches appended to the list returned).
    The prep launch writes Delta and the dQ rows that see no key (rows 0..249, causal bottom-right);
    the dK/dV launch reads Delta and writes the other dQ rows, dK and dV."""
    b, h, hkv, nq, nk, d = B, H, HKV, NQ, NK, D
    dev = HostMemoryDevice()
    launched = []

    def prep(a):
        _view(a.dq, (b, h, nq, d), (a.dq_sb, a.dq_sh, a.dq_sr, 1), np.float16)[:, :, :nq - nk] = -1.0
        _view(a.delta, (b, h, nq), (a.delta_sb, a.delta_sh, a.delta_sr), np.float32)[...] = 3.0

    def dkdv(w):
        a = w.a
        assert (_view(a.delta, (b, h, nq), (a.delta_sb, a.delta_sh, a.delta_sr), np.float32) == 3.0).all()
        _view(a.dq, (b, h, nq, d), (a.dq_sb, a.dq_sh, a.dq_sr, 1), np.float16)[:, :, nq - nk:] = 2.0
        _view(a.dk, (b, hkv, nk, d), (a.dk_sb, a.dk_sh, a.dk_sr, 1), np.float16)[...] = 4.0
        _view(a.dv, (b, hkv, nk, d), (a.dv_sb, a.dv_sh, a.dv_sr, 1), np.float16)[...] = 5.0

    class StandIn:
        def __init__(self, plan):
            self.args_type, self.name = plan.args_type, plan.spec.entry

        def pack(self, struct):
            return bytes(struct)

        def launch_packed(self, grid, block, smem, packed, stream):
            launched.append(self.name)
            args = self.args_type.from_buffer_copy(packed)
            (prep if self.args_type is BackwardArgs else dkdv)(args)

    plans = {}
    real_plan = type(DKDV_OP).plan

    def plan(op, target, **params):
        p = real_plan(op, target, **params)
        plans[p.spec.entry] = p
        return p
    monkeypatch.setattr(type(DKDV_OP), "plan", plan)
    monkeypatch.setattr(launch, "_launchers", {})
    monkeypatch.setattr(launch, "device_for", lambda name, arrays, device: dev)
    monkeypatch.setattr(launch.jit, "load_spec", lambda spec, *a, **k: StandIn(plans[spec.entry]))
    return launched


# the cp.async producer: the TMA producer's (the default's) tensor maps are encoded by the NVIDIA driver,
# absent here; what these tests check (staging, dq's write-back) is the same for both
CPASYNC = dict(dkdv_producer="cpasync")


def _host_inputs():
    rng = np.random.default_rng(7)
    q, do, o = (rng.standard_normal((B, H, NQ, D)).astype(np.float16) for _ in range(3))
    k, v = (rng.standard_normal((B, HKV, NK, D)).astype(np.float16) for _ in range(2))
    return do, q, k, v, o, rng.standard_normal((B, H, NQ)).astype(np.float32)


def test_a_staged_backward_brings_back_the_dq_the_dkdv_launch_writes(monkeypatch):
    """B2 H8/KV2, N_q 700, N_k 450, D128, fp16, causal, on NumPy arrays: dq from both launches."""
    import hkjit
    launched = _stand_ins(monkeypatch)
    do, q, k, v, o, lse = _host_inputs()
    given = np.full_like(q, np.nan)
    for out in (None, given):
        dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=True, device="cuda:0", dq=out, **CPASYNC)
        assert launched[-2:] == ["hkjit_attention_bwd_dq", "hkjit_attention_bwd_dkdv"]
        assert all(isinstance(x, np.ndarray) for x in (dq, dk, dv)) and (out is None or dq is out)
        assert (dq[:, :, :NQ - NK] == -1).all(), "the prep launch's dq rows"
        assert (dq[:, :, NQ - NK:] == 2).all(), "the dK/dV launch's dq rows"
        assert (dk == 4).all() and (dv == 5).all()


def test_a_compiled_backward_gets_the_dq_the_dkdv_launch_writes(monkeypatch):
    """The same call on CPU torch tensors inside torch.compile (aot_eager: functionalized, so the
    dK/dV op runs on a copy of dq, the op's declared mutation, and the graph's dq is that copy):
    dq holds both launches' rows, and a read of dq in the graph sees the dK/dV launch's."""
    import hkjit
    torch = pytest.importorskip("torch")
    launched = _stand_ins(monkeypatch)
    do, q, k, v, o, lse = (torch.from_numpy(x) for x in _host_inputs())

    def step(do, q, k, v, o, lse):
        dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=True, device="cuda:0", **CPASYNC)
        return dq, dq.float().sum(dim=(0, 1, 3)), dk, dv
    torch._dynamo.reset()
    try:
        dq, row_sums, dk, dv = torch.compile(step, fullgraph=True, backend="aot_eager")(do, q, k, v, o, lse)
    finally:
        torch._dynamo.reset()
    assert launched == ["hkjit_attention_bwd_dq", "hkjit_attention_bwd_dkdv"]
    assert (dq[:, :, :NQ - NK] == -1).all() and (dq[:, :, NQ - NK:] == 2).all()
    assert (row_sums[:NQ - NK] == -B * H * D).all() and (row_sums[NQ - NK:] == 2 * B * H * D).all()
    assert (dk == 4).all() and (dv == 5).all()
