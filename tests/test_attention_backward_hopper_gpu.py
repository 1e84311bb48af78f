"""The sm_90a attention backward (hkjit.attention_backward and autograd through hkjit.attention) on a
real Hopper GPU: dQ, dK, dV against a float32 reference and torch SDPA's backward, across the
kernel's configurations (stages, load width, the prepared dq_warp variant with 1-3 load warps, the
dkdv_producer="tma" variant and its refusals, the dkdv_consumer variants: wait placement, early dV,
stmatrix dS^T, and that they give the default's bits); D64/D128, causal or not, MHA, GQA, MQA, ragged N,
N_q != N_k, fp16, bnhd strides, varlen with lengths 1..4097;
gradients poisoned (NaN) first; under torch.compile against eager;
two runs bit-identical (deterministic). Skipped where no CUDA GPU is present (CI)."""

import math

import pytest

from attention_reference import check_grads, torch_reference_backward, varlen_inputs, varlen_sequence
from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402

CASES = [  # (batch, heads, kv_heads, n_q, n_k, head_dim, causal)
    (2, 4, 4, 300, 300, 128, True), (1, 8, 2, 333, 1025, 64, False), (1, 8, 2, 1025, 333, 64, True),
    (2, 4, 1, 1025, 333, 128, False), (1, 6, 3, 200, 513, 128, True), (1, 2, 2, 1, 257, 64, True),
    (1, 4, 1, 4097, 64, 128, True),
]
# dict() takes TMA (the default where it serves); the cp.async producer's configurations are named
CP = dict(dkdv_producer="cpasync")
TILES = [dict(), dict(block_q=64, dkdv_stages=3), dict(dkdv_stages=4), CP, dict(CP, dkdv_stages=3),
         dict(CP, dq_warp=1), dict(CP, dq_warp=1, load_warps=1, dkdv_stages=3), dict(dkdv_producer="tma"),
         dict(dkdv_producer="tma", dkdv_stages=3)]
BY_MAPS = dict(dkdv_producer="tma")
# the TMA kernel's consumer variants (prepared; bits: 1 wait placement, 2 stmatrix dS^T, 4 early dV with 1)
CONSUMER = [dict(dkdv_consumer=v) for v in (0, 1, 2, 3, 5, 7)]   # 2 the TMA default at block_q 64
# bit 8 (head_dim 64 only): dQ by key halves, the two consumers' partials summed in shared memory
KEY_HALVES = [dict(block_q=64, dkdv_consumer=v) for v in (8, 9, 10, 11, 15)]
# block_q=128 (head_dim 64, with bit 8): half the dQ links, one dS^T tile; with 10 the D64 default
WIDE = [dict(block_q=128, dkdv_consumer=v) for v in (10, 11, 8)]
# what the consumer variants are compared with: the block_q 64 kernel's default (dkdv_consumer 2), the
# default at head_dim 128 and the one every variant of block_q 64 has the operation order of
NARROW = dict(block_q=64)
TILES += CONSUMER + [dict(dkdv_consumer=7, dkdv_stages=3)] + KEY_HALVES + [dict(dkdv_consumer=10, dkdv_stages=4)] + WIDE
DQ_WARP = [dict(), CP, dict(CP, dq_warp=1, load_warps=2)]


def _inputs(b, h, hkv, nq, nk, d, dtype="bfloat16"):
    import torch
    dt = getattr(torch, dtype)
    q = torch.randn(b, h, nq, d, device="cuda", dtype=dt)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=dt) for _ in range(2))
    return q, k, v, torch.randn_like(q)


def _run(q, k, v, do, causal, **tiles):
    """hkjit's gradients into NaN-filled arrays, then again into fresh ones: both returned."""
    import torch
    o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True)
    grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
    hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, dq=grads[0], dk=grads[1], dv=grads[2], **tiles)
    return grads, hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, **tiles)


# head_dim 128 fits 2 stages only (the refusal of more is tested in the static tests)
RUNNABLE = [(case, tiles) for case in CASES for tiles in TILES
            if case[5] == 64 or (tiles.get("dkdv_stages", 2) == 2 and not tiles.get("dkdv_consumer", 0) & 8)]


@pytest.mark.parametrize("case,tiles", RUNNABLE, ids=str)
def test_against_float32(case, tiles):
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q, k, v, do = _inputs(b, h, hkv, nq, nk, d)
    grads, again = _run(q, k, v, do, causal, **tiles)
    assert all(torch.equal(g, a) for g, a in zip(grads, again)), "two runs differ: not deterministic"
    check_grads(grads, torch_reference_backward(q, k, v, do, causal, 1 / math.sqrt(d)), f"{case} {tiles}")


@pytest.mark.parametrize("tiles", [dict(), dict(block_q=64), BY_MAPS, dict(dkdv_consumer=3), dict(dkdv_consumer=7)],
                         ids=str)
@pytest.mark.parametrize("d", [64, 128])
def test_fp16(d, tiles):
    import torch
    q, k, v, do = _inputs(2, 4, 2, 700, 450, d, "float16")
    grads, again = _run(q, k, v, do, False, **tiles)
    assert all(torch.equal(g, a) for g, a in zip(grads, again)), "two runs differ: not deterministic"
    check_grads(grads, torch_reference_backward(q, k, v, do, False, 1 / math.sqrt(d)), f"fp16 D{d} {tiles}")
    assert grads[0].dtype == torch.float16


@pytest.mark.parametrize("causal", [False, True])
def test_tensor_map_producer_bnhd_strides(causal):
    """dkdv_producer="tma" reads q and grad_out through tensor maps over the caller's strides: bnhd
    (row stride H D, head stride D), GQA, ragged N; the same gradients as the cp.async producer
    (both against float32)."""
    import torch
    q = torch.randn(2, 777, 8, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 600, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = hkjit.attention(q, k, v, causal=causal, layout="bnhd", return_lse=True)
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    ref = [t(g) for g in torch_reference_backward(t(q), t(k), t(v), t(do), causal, 1 / math.sqrt(128))]
    for tiles in (dict(), BY_MAPS):
        grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
        hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, layout="bnhd", dq=grads[0], dk=grads[1],
                                 dv=grads[2], **tiles)
        check_grads(grads, ref, f"bnhd causal={causal} {tiles}")


@pytest.mark.parametrize("tiles", CONSUMER, ids=str)
@pytest.mark.parametrize("case", [(2, 8, 2, 777, 1000, 128, True), (1, 4, 4, 1100, 650, 64, False),
                                  (1, 4, 1, 500, 900, 64, True)], ids=str)
def test_consumer_variants_give_the_defaults_bits(case, tiles):
    """dkdv_consumer moves waits, issue order and the dS^T store instruction, not arithmetic: each
    gradient element is the same operations on the same values as the default's, so dq, dk and dv
    must equal the default's bit for bit (and the float32 reference within tolerance). A mismatch
    means a wait too early (a race on an accumulator, a stage or dS^T) or a wrong stmatrix address;
    if it is only a last-bit difference, check the SASS for a changed FMA contraction first."""
    _against_the_default(case, dict(NARROW, **tiles), ("dq", "dk", "dv"), NARROW)


def _against_the_default(case, tiles, same, base=None):
    """The gradients of `tiles`: deterministic, within the float32 reference's tolerance, and the named
    ones bit-equal to those of `base` (default: the default configuration)."""
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q, k, v, do = _inputs(b, h, hkv, nq, nk, d)
    want, _ = _run(q, k, v, do, causal, **(base or {}))
    got, again = _run(q, k, v, do, causal, **tiles)
    assert all(torch.equal(g, a) for g, a in zip(got, again)), "two runs differ: not deterministic"
    check_grads(got, torch_reference_backward(q, k, v, do, causal, 1 / math.sqrt(d)), f"{case} {tiles}")
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        if name in same:
            assert torch.equal(g, w), f"{name} differs from the default's: max {(g.float() - w.float()).abs().max()}"


@pytest.mark.parametrize("tiles", KEY_HALVES, ids=str)
@pytest.mark.parametrize("case", [(1, 4, 4, 1100, 650, 64, False), (1, 4, 1, 500, 900, 64, True),
                                  (2, 8, 2, 333, 1025, 64, True)], ids=str)
def test_key_halves_change_only_the_order_of_dq(case, tiles):
    """dkdv_consumer bit 8 splits dQ = dS K over the keys (each consumer's 64, summed by consumer 0)
    instead of one consumer over all 128: dK and dV are the default's operations (bit for bit), dQ is
    the same sum in another order (within the float32 reference's tolerance, and the same bits every
    run). A dQ error with dK and dV right points at the partials' hand-off (a race on the buffer)."""
    _against_the_default(case, tiles, ("dk", "dv"), NARROW)


@pytest.mark.parametrize("tiles", WIDE, ids=str)
@pytest.mark.parametrize("case", [(1, 4, 4, 1100, 650, 64, False), (1, 4, 1, 500, 900, 64, True),
                                  (2, 8, 2, 333, 1025, 64, True), (1, 2, 2, 4097, 4097, 64, True),
                                  (2, 4, 4, 100, 60, 64, True)], ids=str)
def test_wide_query_blocks(case, tiles):
    """block_q=128: each step sums 128 query rows into dK and dV (another order than 64 at a time) and
    adds a 128-row dQ partial: deterministic, within the float32 reference's tolerance; ragged N, N_q > N_k
    (rows that see no key inside a visited block), GQA, long sequences (many links a query block)."""
    _against_the_default(case, tiles, (), NARROW)


def test_tensor_map_producer_refuses_what_it_cannot_serve():
    """4-byte aligned rows and varlen batches: refused before launching, naming the cp.async producer."""
    import torch
    from hkjit.errors import InvalidArgumentError
    q, k, v, do = (torch.randn(1, 4, 300, 66, device="cuda", dtype=torch.bfloat16)[..., :64] for _ in range(4))
    o, lse = hkjit.attention(q, k, v, return_lse=True)
    with pytest.raises(InvalidArgumentError, match="dkdv_producer='cpasync'"):
        hkjit.attention_backward(do, q, k, v, o, lse, **BY_MAPS)
    lq, lk, cq, ck, q, k, v = varlen_inputs(64)
    o, lse = hkjit.attention(q, k, v, return_lse=True, cu_seqlens_q=cq, cu_seqlens_k=ck)
    with pytest.raises(InvalidArgumentError, match="dkdv_producer='cpasync'"):
        hkjit.attention_backward(torch.randn_like(q), q, k, v, o, lse, cu_seqlens_q=cq, cu_seqlens_k=ck, **BY_MAPS)


@pytest.mark.parametrize("d", [64, 128])
def test_four_byte_aligned_rows(d):
    """Row strides 4- but not 16-byte aligned take the narrow-load specialisation."""
    import torch
    q, k, v, do = (torch.randn(1, 4, 300, d + 2, device="cuda", dtype=torch.bfloat16)[..., :d] for _ in range(4))
    k, v = k[:, :2], v[:, :2]
    grads, _ = _run(q, k, v, do, True)
    check_grads(grads, torch_reference_backward(q, k, v, do, True, 1 / math.sqrt(d)), f"4-byte rows D{d}")


@pytest.mark.parametrize("tiles", DQ_WARP, ids=str)
@pytest.mark.parametrize("d,causal", [(64, False), (128, True)])
def test_varlen_lengths(d, causal, tiles):
    import torch
    lq, lk, cq, ck, q, k, v = varlen_inputs(d)
    do = torch.randn_like(q)
    kw = dict(causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck)
    o, lse = hkjit.attention(q, k, v, return_lse=True, **kw)
    kw.update(tiles)
    grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
    hkjit.attention_backward(do, q, k, v, o, lse, dq=grads[0], dk=grads[1], dv=grads[2], **kw)
    again = hkjit.attention_backward(do, q, k, v, o, lse, **kw)
    assert all(torch.equal(g, a) for g, a in zip(grads, again)), "two runs differ: not deterministic"
    for i in range(len(lq)):
        sq, sk = slice(int(cq[i]), int(cq[i + 1])), slice(int(ck[i]), int(ck[i + 1]))
        seq = varlen_sequence
        refs = torch_reference_backward(seq(q, sq), seq(k, sk), seq(v, sk), seq(do, sq), causal, 1 / math.sqrt(d))
        check_grads([seq(grads[0], sq), seq(grads[1], sk), seq(grads[2], sk)], refs, f"varlen sequence {i}")


@pytest.mark.parametrize("causal", [False, True])
def test_autograd_gqa_against_sdpa(causal):
    """loss.backward() through hkjit.attention (GQA, bnhd layout) against SDPA's backward (both bf16)."""
    import torch
    n_k = 384 if causal else 300          # SDPA aligns causal masks top-left: compare at N_q == N_k
    q = torch.randn(2, 384, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, n_k, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    w = torch.randn(2, 384, 8, 128, device="cuda")
    (hkjit.attention(q, k, v, causal=causal, layout="bnhd").float() * w).sum().backward()
    ours = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    out = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal, enable_gqa=True)
    (t(out).float() * w).sum().backward()
    check_grads(ours, [x.grad for x in (q, k, v)], f"autograd causal={causal}", tol=2e-2)


@pytest.mark.parametrize("case", [(1, 8, 2, 333, 1025, 64, True), (2, 4, 4, 300, 300, 128, False)], ids=str)
def test_compiled_backward_matches_eager_bit_for_bit(case):
    """hkjit.attention_backward inside torch.compile(fullgraph=True) (inductor): dq, dk, dv equal
    eager calls bit for bit, and a read of dq inside the graph sees what the dK/dV kernel wrote
    there (attention_bwd_dkdv declares dq mutated, so the read is ordered after that launch)."""
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q, k, v, do = _inputs(b, h, hkv, nq, nk, d)
    o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True)

    def step(do, q, k, v, o, lse):
        dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=causal)
        return dq, dk, dv, dq.float().sum(-1)
    torch._dynamo.reset()
    try:
        want = step(do, q, k, v, o, lse)
        got = torch.compile(step, fullgraph=True)(do, q, k, v, o, lse)
        torch.cuda.synchronize()
    finally:
        torch._dynamo.reset()
    for name, a, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.equal(a, w), f"{name} differs from eager"
    # inductor may sum in another order than eager: a row that missed the dK/dV writes is far off
    assert torch.allclose(got[3], want[3], rtol=1e-4, atol=1e-3), (got[3] - want[3]).abs().max()


# --- workspace and scratch: what a process holds between calls ------------------------------------
def _sems(b, h, nq, block_q):
    """The dkdv kernel's kept workspace: an int semaphore per query block, padded to 256 B."""
    return -(-b * h * -(-nq // block_q) * 4 // 256) * 256


def _requested():
    """Bytes torch's caching allocator was asked for and holds: the sizes callers requested.
    torch.cuda.memory_allocated counts whole blocks instead, and a block cut from a cached segment
    keeps the rest when that rest is at most 1 MiB (a 10,240,000-byte dK from a fresh 20 MiB
    segment, then dV from its 10,731,520-byte rest: 491,520 bytes more than asked), so it depends on
    what earlier tests in the process left cached; the requested bytes do not."""
    import torch
    return torch.cuda.memory_stats()["requested_bytes.all.current"]


def _workspaces():
    """Bytes of the torch workspaces every launcher of this process keeps (one per stream)."""
    from hkjit import launch
    return sum(buf.numel() for _, launcher in launch.launchers() for buf in launcher.buffers.values())


def test_memory_held_between_calls_stays_bounded():
    """Backward calls of many shapes in one process: after each, torch holds beyond the caller's
    tensors exactly the workspaces hkjit's launchers kept, and those are at most that signature's
    semaphores (kept per stream); the fp32 dQ accumulators (scratch, B*H*ceil(N/block_q)*block_q*D*4 bytes)
    are allocated during the call and given back after it. Counted in requested bytes (`_requested`),
    so what earlier tests left in torch's cache cannot move the figures."""
    import torch
    shapes = [(2, 16, 4, n, n, d) for n in (700, 2048, 4097, 8192) for d in (64, 128)] + [(1, 8, 8, 300, 5000, 128)]
    kept = 0
    torch.cuda.synchronize()
    base, base_ws = _requested(), _workspaces()
    for b, h, hkv, nq, nk, d in shapes:
        q, k, v, do = _inputs(b, h, hkv, nq, nk, d)
        o, lse = hkjit.attention(q, k, v, return_lse=True)
        torch.cuda.synchronize()
        before, before_alloc, before_ws = _requested(), torch.cuda.memory_allocated(), _workspaces()
        torch.cuda.reset_peak_memory_stats()
        grads = hkjit.attention_backward(do, q, k, v, o, lse)
        torch.cuda.synchronize()
        block_q = 128 if d == 64 else 64              # the defaults (dense, 16-byte aligned: the TMA producer)
        scratch = b * h * -(-nq // block_q) * block_q * d * 4
        outputs = sum(g.numel() * g.element_size() for g in grads)
        assert torch.cuda.max_memory_allocated() - before_alloc >= scratch + outputs   # it was there during the call
        extra, new_ws = _requested() - before - outputs, _workspaces() - before_ws
        assert extra == new_ws, (b, h, nq, d, extra, new_ws)                   # nothing but workspaces held
        assert new_ws in (0, _sems(b, h, nq, block_q)), (b, h, nq, d, new_ws)           # a new signature's semaphores
        kept += extra
        del q, k, v, do, o, lse, grads
    torch.cuda.synchronize()
    assert _requested() - base == kept == _workspaces() - base_ws <= 128 * 1024


def test_scratch_sources_give_the_same_bits():
    """The dQ accumulators from torch's allocator (torch tensors), a staging buffer (host arrays)
    and the scratch shared per stream (a DLPack array of no known framework): the same bits."""
    import numpy as np
    import torch
    from hkjit import launch

    class Foreign:
        """A CUDA array hkjit knows only through DLPack."""
        def __init__(self, t):
            self.t, self.shape = t, tuple(t.shape)

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    q, k, v, do = _inputs(2, 8, 2, 700, 450, 128, "float16")
    o, lse = hkjit.attention(q, k, v, return_lse=True, causal=True)
    want = hkjit.attention_backward(do, q, k, v, o, lse, causal=True)
    torch.cuda.synchronize()
    host = [x.cpu().numpy() for x in (do, q, k, v, o, lse)]
    staged = hkjit.attention_backward(*host, causal=True, device="cuda:0")
    assert all(isinstance(g, np.ndarray) for g in staged)
    assert all(np.array_equal(g, w.cpu().numpy()) for g, w in zip(staged, want)), "staged scratch differs"
    shared = hkjit.attention_backward(*(Foreign(x) for x in (do, q, k, v, o, lse)), causal=True)
    torch.cuda.synchronize()
    assert all(torch.equal(g, w) for g, w in zip(shared, want)), "shared scratch differs"
    held, _ = launch.shared_scratch()[("cuda", 0, 0)]
    assert held >= 2 * 8 * 11 * 64 * 128 * 4


def test_cuda_graph_capture_and_replay_of_the_backward():
    """attention_backward captured in a CUDA graph (warm-up on the capture stream first, as
    torch.cuda.graphs documents; its scratch then comes from the graph's pool), replayed with new
    inputs: the same bits as eager calls; a second graph captured without a warm-up on its stream
    (semaphores made, and zeroed, inside the capture) replays as well."""
    import torch
    q, k, v, do = _inputs(1, 8, 2, 1000, 777, 128)
    o, lse = hkjit.attention(q, k, v, return_lse=True, causal=True)

    def step():
        return hkjit.attention_backward(do, q, k, v, o, lse, causal=True)
    step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph, fresh = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        outs = step()
    with torch.cuda.graph(fresh, stream=torch.cuda.Stream()):
        outs_fresh = step()
    for _ in range(2):
        for t in (q, k, v, do):
            t.copy_(torch.randn_like(t))
        o2, lse2 = hkjit.attention(q, k, v, return_lse=True, causal=True)
        o.copy_(o2)
        lse.copy_(lse2)
        for x in outs + outs_fresh:
            x.fill_(float("nan"))
        graph.replay()
        fresh.replay()
        torch.cuda.synchronize()
        want = step()
        assert all(torch.equal(a, b) for a, b in zip(outs, want)), "replay differs from eager"
        assert all(torch.equal(a, b) for a, b in zip(outs_fresh, want)), "second graph's replay differs"
