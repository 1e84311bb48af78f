"""The sm_90a attention forward kernel on a real Hopper GPU, across its own configurations (block_kv,
consumers, stages, load width) against a float32 reference: O and LSE, D64/D128, causal or not, GQA,
ragged N, N_q != N_k, unaligned (4-byte) rows, varlen lengths 1..4097, outputs poisoned first.
(tests/test_attention_gpu.py covers the op's layouts and dtypes with the default configuration.)
The variants (`overlap`, `lean`, `exp_fma`, `prologue`, `epilogue`, `producer="lsu"` / `"cpasync"` beside
the default "tma", docs/notes/attention_hopper.md) run through the same cases, plus bnhd / fp16 / GQA, new pointers on a
repeat call (the tensor maps follow) and the refusals that need real pointers (TMA on 4-byte rows,
TMA with varlen); "lsu", overlap, lean, exp_fma and prologue/epilogue also through the 4-byte rows and
the varlen lengths; exp_fma on scores spread over hundreds (arguments below -127 give 0).
Skipped where no CUDA GPU is present (CI)."""

import math

import pytest

from attention_reference import check_torch, torch_reference, varlen_inputs, varlen_sequence
from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402

TILES = [dict(), dict(block_kv=64), dict(block_kv=128, pingpong=0), dict(consumers=1), dict(consumers=1, stages=3),
         dict(block_kv=64, stages=4, pingpong=0)]
VARIANTS = [dict(producer="lsu", overlap=1), dict(producer="lsu", overlap=1, block_kv=64, stages=4),
            dict(producer="tma"), dict(producer="tma", block_kv=64, stages=4), dict(producer="tma", overlap=1),
            dict(producer="tma", overlap=1, block_kv=64, stages=4, pingpong=0), dict(producer="tma", consumers=1),
            dict(producer="lsu"), dict(producer="lsu", block_kv=64, stages=4),
            dict(producer="cpasync", overlap=1), dict(producer="cpasync", overlap=1, block_kv=64, stages=4, pingpong=0),
            dict(producer="cpasync", consumers=1),
            # lean: walked wgmma descriptors, O rescaled late and only where the max moved; 2: the softmax
            # under its own P V (alone and beside the overrides they compose with)
            dict(lean=1), dict(lean=2), dict(lean=1, block_kv=64, stages=4), dict(lean=2, producer="cpasync"),
            dict(lean=2, consumers=1), dict(lean=2, pingpong=0), dict(lean=1, overlap=1),
            dict(lean=2, block_kv=64, stages=4),
            # exp_fma: n of every 16 exponentials on the FMA pipe (a polynomial, exp2_fma.cuh)
            dict(exp_fma=2), dict(exp_fma=4, lean=2), dict(exp_fma=8, block_kv=64, stages=4),
            dict(exp_fma=3, consumers=1),
            # prologue: Q by cp.async before the barrier set-up; epilogue: O stored from two row pointers
            dict(prologue=1, epilogue=1), dict(prologue=1, epilogue=1, lean=2, exp_fma=2),
            dict(epilogue=1, consumers=1), dict(prologue=1, block_kv=64, stages=4, producer="cpasync"),
            # persistent: one block an SM walking the tiles, the ring carried from tile to tile
            dict(persistent=1), dict(persistent=1, producer="cpasync"), dict(persistent=1, consumers=1),
            dict(persistent=1, lean=2, block_kv=64, stages=4), dict(persistent=1, pingpong=0, overlap=1)]
# the tile sets that serve every input (varlen, 4-byte rows): the default producer "cpasync" and "lsu"
ANY_INPUT = [dict(), dict(producer="lsu"), dict(overlap=1, block_kv=64, stages=4), dict(lean=1), dict(lean=2),
             dict(exp_fma=2, lean=2), dict(prologue=1, epilogue=1)]
CASES = [  # (batch, heads, kv_heads, n_q, n_k, head_dim, causal)
    (1, 4, 2, 333, 1025, 64, False), (2, 4, 1, 1025, 333, 128, True), (1, 2, 2, 1, 4097, 128, True),
    (1, 3, 3, 200, 200, 64, True), (2, 2, 1, 129, 65, 128, False),
]


@pytest.mark.parametrize("tiles", TILES + VARIANTS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_configs_against_float32(case, tiles):
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, nq), float("nan"), device="cuda")
    hkjit.attention(q, k, v, causal=causal, out=out, lse=lse, **tiles)
    ref_o, ref_lse = torch_reference(q, k, v, causal, 1 / math.sqrt(d))
    check_torch(out, lse, ref_o, ref_lse, f"{case} {tiles}")


@pytest.mark.parametrize("tiles", ANY_INPUT, ids=str)
@pytest.mark.parametrize("d", [64, 128])
def test_four_byte_aligned_rows(d, tiles):
    """Row strides that are 4- but not 16-byte aligned take the narrow-load specialisation."""
    import torch
    q, k, v = (torch.randn(1, 2, 300, d + 2, device="cuda", dtype=torch.float16)[..., :d] for _ in range(3))
    out = torch.full((1, 2, 300, d), float("nan"), device="cuda", dtype=torch.float16)
    lse = torch.full((1, 2, 300), float("nan"), device="cuda")
    hkjit.attention(q, k, v, causal=True, out=out, lse=lse, **tiles)
    ref_o, ref_lse = torch_reference(q, k, v, True, 1 / math.sqrt(d))
    check_torch(out, lse, ref_o, ref_lse, f"4-byte rows D{d} {tiles}")


@pytest.mark.parametrize("tiles", ANY_INPUT, ids=str)
@pytest.mark.parametrize("d,causal", [(64, False), (128, True)])
def test_varlen_lengths(d, causal, tiles):
    import torch
    lq, lk, cq, ck, q, k, v = varlen_inputs(d)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((6, sum(lq)), float("nan"), device="cuda")
    hkjit.attention(q, k, v, causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, out=out, lse=lse, **tiles)
    for i in range(len(lq)):
        sq, sk = slice(int(cq[i]), int(cq[i + 1])), slice(int(ck[i]), int(ck[i + 1]))
        seq = varlen_sequence
        ref_o, ref_lse = torch_reference(seq(q, sq), seq(k, sk), seq(v, sk), causal, 1 / math.sqrt(d))
        check_torch(seq(out, sq), lse[:, sq][None], ref_o, ref_lse, f"varlen sequence {i} {tiles}")


@pytest.mark.parametrize("tiles", [dict(), dict(producer="cpasync"), dict(lean=2), dict(consumers=1)], ids=str)
@pytest.mark.parametrize("case", [(2, 8, 2, 2048, 2048, 128, False, None), (3, 5, 5, 1000, 1500, 64, True, None),
                                  (1, 4, 1, 5000, 300, 128, True, None), (4, 16, 4, 4096, 512, 64, True, None),
                                  (2, 3, 1, 1100, 900, 128, True, None), (16, 4, 4, 64, 64, 64, False, None),
                                  # small grids (`blocks`): many tiles a block on small shapes
                                  (8, 16, 4, 1100, 1100, 64, True, None),       # odd pairs, 640 units
                                  (2, 3, 1, 1100, 900, 128, True, 3),           # the middle block, then more units
                                  (4, 16, 4, 1000, 3000, 128, False, 7),        # a partial Q tile prefetched
                                  (1, 4, 1, 5000, 300, 128, True, 2),           # runs of tiles with no KV block
                                  (1, 4, 1, 5000, 300, 128, True, 7),           # a block's first tiles without any
                                  (2, 4, 1, 1025, 333, 64, True, 1)], ids=str)  # one block walks everything
def test_persistent_gives_the_grid_s_bits(case, tiles):
    """persistent=1 runs each tile's arithmetic as the grid's block does, in the same order: O and LSE
    bit for bit (five times: the same bits each run), with more tiles than SMs (the ring's phases and the
    ping-pong barriers carried across tiles; `blocks` shrinks the grid so that small shapes give a block
    dozens of tiles) and fewer, rows that see no key (causal, N_q > N_k: tiles with no KV block between
    tiles with some, which take no ping-pong turn), causal pairs of query blocks with an odd count (the
    middle one alone, then the block's next unit), a ragged last Q tile loaded as the next tile's Q,
    poisoned outputs. A hang or a mismatch on the later tiles of a block points at the carried ring
    position or the alternating turn barriers."""
    import torch
    b, h, hkv, nq, nk, d, causal, blocks = case
    q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    want, want_lse = hkjit.attention(q, k, v, causal=causal, return_lse=True, **tiles)
    grid = dict(blocks=blocks) if blocks else {}
    for _ in range(5):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, nq), float("nan"), device="cuda")
        hkjit.attention(q, k, v, causal=causal, out=out, lse=lse, persistent=1, **grid, **tiles)
        assert torch.equal(out, want) and torch.equal(lse, want_lse), f"{case} {tiles}"


@pytest.mark.parametrize("tiles", VARIANTS, ids=str)
@pytest.mark.parametrize("d,causal", [(64, True), (128, False), (128, True)])
def test_variants_bnhd_fp16(tiles, d, causal):
    """(batch, seq, heads, D) views (row stride heads x D, head stride D: the TMA maps' other stride
    order), fp16, GQA 6/2, ragged N_q != N_k."""
    import torch
    b, h, hkv, nq, nk = 2, 6, 2, 333, 517
    q = torch.randn(b, nq, h, d, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(b, nk, hkv, d, device="cuda", dtype=torch.float16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, nq), float("nan"), device="cuda")
    hkjit.attention(q, k, v, causal=causal, layout="bnhd", out=out, lse=lse, **tiles)
    ref_o, ref_lse = torch_reference(*(x.transpose(1, 2) for x in (q, k, v)), causal, 1 / math.sqrt(d))
    check_torch(out.transpose(1, 2), lse, ref_o, ref_lse, f"bnhd fp16 D{d} causal={causal} {tiles}")


@pytest.mark.parametrize("tiles", [dict(exp_fma=8), dict(exp_fma=2, lean=2)], ids=str)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_exp_fma_wide_scores(tiles, dtype):
    """Scores spread over hundreds (log2 units): many exponentials' arguments fall below -127, where
    the polynomial must give 0 as MUFU.EX2 does; rows that see no key (causal, N_q > N_k) stay O = 0,
    LSE = -inf. Against float32, and beside exp_fma=0 on the same inputs."""
    import torch
    dt = getattr(torch, dtype)
    q = torch.randn(2, 4, 700, 64, device="cuda", dtype=dt) * 6
    k, v = (torch.randn(2, 2, 517, 64, device="cuda", dtype=dt) * s for s in (6, 1))
    ref_o, ref_lse = torch_reference(q, k, v, True, 1 / math.sqrt(64))
    for t in (tiles, dict(exp_fma=0)):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((2, 4, 700), float("nan"), device="cuda")
        hkjit.attention(q, k, v, causal=True, out=out, lse=lse, **t)
        check_torch(out, lse, ref_o, ref_lse, f"wide scores {dtype} {t}")


@pytest.mark.parametrize("tiles", [dict(producer="tma"), dict(producer="tma", overlap=1, block_kv=64)], ids=str)
def test_tma_new_pointers(tiles):
    """A second call with other tensors of the same shapes: the tensor maps point at the new K and V."""
    import torch
    for _ in range(2):
        q = torch.randn(1, 4, 700, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, 2, 900, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.full_like(q, float("nan"))
        lse = torch.full((1, 4, 700), float("nan"), device="cuda")
        hkjit.attention(q, k, v, causal=True, out=out, lse=lse, **tiles)
        ref_o, ref_lse = torch_reference(q, k, v, True, 1 / math.sqrt(128))
        check_torch(out, lse, ref_o, ref_lse, f"repeat call {tiles}")


def test_tma_refusals():
    import torch
    from hkjit.errors import InvalidArgumentError
    q, k, v = (torch.randn(1, 2, 300, 66, device="cuda", dtype=torch.float16)[..., :64] for _ in range(3))
    with pytest.raises(InvalidArgumentError, match="16 bytes"):          # 132-byte rows
        hkjit.attention(q, k, v, producer="tma")
    cu = torch.tensor([0, 5, 12], dtype=torch.int32, device="cuda")
    qp, kp, vp = (torch.randn(12, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with pytest.raises(InvalidArgumentError, match="varlen"):
        hkjit.attention(qp, kp, vp, cu_seqlens_q=cu, cu_seqlens_k=cu, producer="tma")
    with pytest.raises(InvalidArgumentError, match="stages >= 3"):
        hkjit.attention(qp[None], kp[None], vp[None], overlap=1, stages=2)
