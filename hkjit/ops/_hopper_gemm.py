"""Hopper (sm_90a) GEMM: tile defaults, override validation, the kernel argument struct.

The kernel is kernel_sources/gemm_hopper.cuh. This module is the Python half of its contract:

    cfg  = choose_config(M, N, K, a_kmajor, b_kmajor, "bfloat16", "bfloat16", num_sms, overrides,
                         has_bias=False, has_c=False, a_tma=True, b_tma=True)
    src  = f"using hkjit_kernel = gemm_hopper<{template_args(cfg)}>;"
    args = make_args(cfg, a_ptr, (M, K), a_strides, b_ptr, (K, N), b_strides, c_ptr, (ldc, 1), ...)
    launch(grid(M, N, K, cfg, num_sms), threads(cfg), dynamic_smem(cfg), args)

Operand layouts. A is logically M x K, B is K x N; strides are in elements. An operand is
"K-major" when its K stride is 1 (A row-major, or B given as an N x K row-major array, i.e. the
A @ B.T case) and "M/N-major" when its M/N stride is 1 (A.T or plain row-major B). wgmma reads
either without a copy. `operand_layout` picks the layout and says whether TMA can address the
operand (16-byte aligned base and strides); where it cannot, the kernel's producer falls back to
plain, bounds-checked loads (slow but correct: unaligned views, odd K, odd N).

Default tiles (the rule choose_config applies; every entry is overridable):

    shape class         block_m x block_n  consumers  why
    large (tiles >= SMs) 128 x 256          2          TK/CUTLASS shape: each consumer m64n256,
                                                       best smem bytes per FLOP, 4 stages fit
    medium               128 x 128 / 64     2          first candidate giving >= 0.9 num_sms tiles
    small M (M <= 64)    64 x {256..16}     1          memory bound: spread B over >= num_sms
                                                       blocks, deep ring (up to 12 stages);
                                                       K < 8192: split-K (_auto_split), e.g.
                                                       16x4096x4096 -> 64 x 64, 2 K-slices
    block_k = 64 always (one 128-byte swizzle row of bf16/fp16); stages = as many as fit in
    227 KiB (at most 4 for large tiles, 12 otherwise); group_m = 8. 16-bit outputs are staged in
    shared memory and stored by TMA (c_tma), which costs block_m x block_n x 2 bytes: 3 stages
    for 128 x 256.
"""

from __future__ import annotations

import ctypes

from ..dtypes import DTYPES, FLOAT_OUTPUTS, MMA_INPUTS
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ..targets import parse as _parse_target

# ---- hardware limits (sm_90a) ---------------------------------------------------------------------
_SM90A = _parse_target("sm_90a")
SMEM_LIMIT = _SM90A.smem_per_block     # dynamic shared memory a block may opt into
MAX_THREADS = _SM90A.max_threads
REGS_PER_SM = _SM90A.regs_per_block
IN_DTYPES = MMA_INPUTS
OUT_DTYPES = FLOAT_OUTPUTS
SOURCE = "gemm_hopper.cuh"

BLOCK_K_CHOICES = (64,)
BLOCK_N_CHOICES = (16, 32, 64, 128, 192, 256)   # wgmma N values wgmma_ops.hpp is generated for
BLOCK_M_CHOICES = (64, 128, 192, 256)
CONSUMER_CHOICES = (1, 2, 3, 4)
OVERRIDES = ("block_m", "block_n", "block_k", "consumers", "warps", "stages", "group_m", "persistent", "split_k")
SPLIT_K_MAX = 16

_LARGE = ((128, 256, 2),)
_MEDIUM = ((128, 128, 2), (128, 64, 2), (64, 64, 1), (64, 32, 1), (64, 16, 1))
_SKINNY = ((64, 256, 1), (64, 128, 1), (64, 64, 1), (64, 32, 1), (64, 16, 1))


def _cdiv(a, b):
    return -(-a // b)


# ---- resources of a config (mirror the constants at the top of gemm_hopper.cuh) -------------------
def threads(cfg) -> int:
    return 128 * (cfg["consumers"] + 1)


def _stage_bytes(block_m, block_n, block_k):
    return (block_m + block_n) * block_k * 2


def _c_bytes(block_m, block_n, c_tma):
    return block_m * block_n * 2 if c_tma else 0      # CONSUMERS tiles of (block_m/consumers) x block_n


def _dynamic_smem(block_m, block_n, block_k, stages, c_tma=False, split_k=1):
    return (1024 + stages * _stage_bytes(block_m, block_n, block_k) + _c_bytes(block_m, block_n, c_tma)
            + 2 * stages * 8 + (16 if split_k > 1 else 0))


def dynamic_smem(cfg) -> int:
    return _dynamic_smem(cfg["block_m"], cfg["block_n"], cfg["block_k"], cfg["stages"], cfg["c_tma"],
                         cfg.get("split_k", 1))


def workspace_bytes(M, N, cfg) -> int:
    """Device memory a split-K config needs (0 without split-K), as one buffer: the counters
    (`workspace_counter_bytes`), then the partials (`partials_bytes`). hkjit.gemm keeps the
    counters per stream (the plan's workspace: zero before the first launch, every launch leaves
    them zero) and gives each call its partials (the plan's scratch: written before they are read)."""
    if cfg.get("split_k", 1) <= 1:
        return 0
    return workspace_counter_bytes(M, N, cfg) + partials_bytes(M, N, cfg)


def workspace_counter_bytes(M, N, cfg) -> int:
    """One u32 counter per (tile, consumer), padded to 256 bytes."""
    tiles = _cdiv(M, cfg["block_m"]) * _cdiv(N, cfg["block_n"])
    return _cdiv(tiles * cfg["consumers"] * 4, 256) * 256


def partials_bytes(M, N, cfg) -> int:
    """One fp32 block_m x block_n partial per (tile, K-slice) (0 without split-K)."""
    split = cfg.get("split_k", 1)
    if split <= 1:
        return 0
    return _cdiv(M, cfg["block_m"]) * _cdiv(N, cfg["block_n"]) * split * cfg["block_m"] * cfg["block_n"] * 4


def consumer_regs(consumers: int, all_tma: bool = True) -> int:
    """Registers per consumer thread after setmaxnreg (the kernel's CONSUMER_REGS)."""
    if consumers == 1:
        return 255                        # 256 threads: no reallocation, the cap is the ISA's
    producer = 56 if not all_tma else 40 if consumers <= 2 else 24
    entry = REGS_PER_SM // (128 * (consumers + 1)) // 8 * 8     # registers per thread at launch
    # setmaxnreg.inc can only take what the producer gave back out of the launch allocation
    return min(240, (entry * (consumers + 1) - producer) // consumers // 8 * 8)


def _acc_regs(block_m, block_n, consumers):
    return (block_m // consumers // 64) * (block_n // 2)


# Registers a consumer needs besides its accumulators (descriptors, addresses, epilogue).
_REG_OVERHEAD = 72


def grid(M, N, K, cfg, num_sms):
    """Persistent: at most one block per SM, each walking tiles; otherwise one block per tile (the
    kernel's tile loop then runs once), which lets small blocks share an SM."""
    units = _cdiv(M, cfg["block_m"]) * _cdiv(N, cfg["block_n"]) * cfg.get("split_k", 1)
    return (max(1, min(units, num_sms) if cfg.get("persistent", True) else units), 1, 1)


# ---- operand layouts ------------------------------------------------------------------------------
def operand_layout(ptr: int, rows: int, k: int, stride_rows: int, stride_k: int, itemsize: int = 2,
                   *, k_axis_first: bool = False):
    """(kmajor, tma_ok) for an operand that is logically rows x K (A: M x K; B: N x K, i.e. B^T).

    Prefers a layout TMA can address; otherwise K-major with plain loads."""
    def tma_ok(contig_stride, contig_extent, other_stride, other_extent):
        return ((contig_stride == 1 or contig_extent == 1)
                and (other_extent == 1 or (other_stride * itemsize) % 16 == 0)
                and ptr % 16 == 0 and 0 <= other_stride * itemsize < (1 << 40))
    k_ok = stride_k == 1 or k == 1
    mn_ok = stride_rows == 1 or rows == 1
    if k_ok and tma_ok(stride_k, k, stride_rows, rows):
        return True, True
    if mn_ok and tma_ok(stride_rows, rows, stride_k, k):
        return False, True
    if k_ok or not mn_ok:
        return True, False
    return False, False


# ---- config ---------------------------------------------------------------------------------------
def _fail(what, valid):
    raise InvalidArgumentError(f"hkjit.gemm (sm_90a): {what}; valid: {valid}")


def _max_stages(block_m, block_n, block_k, c_tma=False, split_k=1):
    return ((SMEM_LIMIT - 1024 - _c_bytes(block_m, block_n, c_tma) - (16 if split_k > 1 else 0))
            // (_stage_bytes(block_m, block_n, block_k) + 16))


# Split-K for small M (the memory-bound GEMV-like class): B is streamed once, so what matters is
# how many SMs stream it, how wide each one's stages are, and how long each stream runs (every
# unit pays the latency of its first loads). Rule: among block_n in _SPLIT_BN and power-of-two
# split counts s, keep those with tiles_n * s <= num_sms (one wave, no second round) and at least
# _SPLIT_MIN_KTILES k-tiles per slice; take the one with the most units (ties: the wider tile); use
# it unless the unsplit rule has more units (equal: the split, wider tile wins). Measured on
# 16x4096x4096 (H200, 2026-11-22, do_bench medians against cuBLAS in the same process): 64x64 s=2
# 0.93x cuBLAS, 64x128 s=2 0.90-0.94, 64x128 s=4 (16 k-tiles) 0.87-0.91, 64x32 unsplit 0.80-0.82,
# 8 k-tiles per slice 0.64-0.74.
#
# Only for K < _SPLIT_MAX_K: with a long K the unsplit stream amortises its fill and drain and the
# partial round trip costs more than it saves (64x4096x14336: unsplit 64x32 0.98x, split 64x128
# s=4 0.955x; 16x8192x8192: split 0.91x, unsplit 64x64 0.89x, within noise; H200, 2026-11-22).
_SPLIT_BN = (64, 128)
_SPLIT_MIN_KTILES = 32
_SPLIT_MAX_K = 8192


def _auto_split(M, N, K, num_sms):
    """(block_n, split_k) for small M, or None to keep the plain skinny rule."""
    if M > 64 or K >= _SPLIT_MAX_K:
        return None
    k_tiles = _cdiv(K, 64)
    best = None
    for bn in _SPLIT_BN:
        tiles = _cdiv(N, bn)
        s = 2
        while s <= SPLIT_K_MAX and tiles * s <= num_sms and k_tiles // s >= _SPLIT_MIN_KTILES:
            if best is None or tiles * s >= best[0]:
                best = (tiles * s, bn, s)
            s *= 2
    if best is None:
        return None
    bm, bn0, _ = _default_tiles(M, N, num_sms)
    if best[0] < _cdiv(M, bm) * _cdiv(N, bn0):
        return None
    return best[1], best[2]


def _default_tiles(M, N, num_sms):
    table = _SKINNY if M <= 64 else _LARGE + _MEDIUM
    best = None
    for bm, bn, c in table:
        tiles = _cdiv(M, bm) * _cdiv(N, bn)
        if tiles >= 0.9 * num_sms:      # one nearly full wave is enough; smaller tiles cost reuse
            return bm, bn, c
        if best is None or tiles > best[0]:
            best = (tiles, (bm, bn, c))
    return best[1]


def choose_config(M: int, N: int, K: int, a_kmajor: bool, b_kmajor: bool, in_dtype: str,
                  out_dtype: str, num_sms: int, overrides: dict | None = None, *,
                  has_bias: bool = False, has_c: bool = False, a_tma: bool = True,
                  b_tma: bool = True, c_tma: bool | None = None) -> dict:
    """Tile configuration for one GEMM: defaults from the table above, then validated overrides.

    a_tma / b_tma: from operand_layout. c_tma: store C through shared memory and TMA (16-bit
    outputs only; needs output_tma_ok(...)); None = on for 16-bit outputs.
    Raises InvalidArgumentError naming the limit that was hit and the valid choices."""
    overrides = dict(overrides or {})
    for name in overrides:
        if name not in OVERRIDES:
            _fail(f"unknown tile override {name!r}", ", ".join(OVERRIDES))
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, int) or v < 1 or v >= 2 ** 31:
            _fail(f"{name}={v!r} out of range", "integers 1 .. 2**31-1")
    if in_dtype not in IN_DTYPES:
        _fail(f"input dtype {in_dtype!r} is not supported", ", ".join(IN_DTYPES))
    if out_dtype not in OUT_DTYPES:
        _fail(f"output dtype {out_dtype!r} is not supported", ", ".join(OUT_DTYPES))
    if not isinstance(num_sms, int) or num_sms < 1:
        _fail(f"num_sms={num_sms!r}", "a positive integer")
    for name, v in overrides.items():
        if not isinstance(v, int) or isinstance(v, bool):
            _fail(f"{name}={v!r} is not an integer", "integers")

    bm, bn, consumers = _default_tiles(M, N, num_sms)
    split_k = 1
    user_tiles = "block_m" in overrides or "block_n" in overrides
    auto = _auto_split(M, N, K, num_sms) if not user_tiles and "split_k" not in overrides else None
    if auto:
        bn, split_k = auto
    bm = overrides.get("block_m", bm)
    bn = overrides.get("block_n", bn)
    bk = overrides.get("block_k", 64)
    if "warps" in overrides:
        w = overrides["warps"]
        if w % 4 or w // 4 - 1 not in CONSUMER_CHOICES:
            _fail(f"warps={w} (one producer warpgroup + 1..4 consumer warpgroups of 4 warps)", "8, 12, 16, 20")
        if "consumers" in overrides and overrides["consumers"] != w // 4 - 1:
            _fail(f"warps={w} and consumers={overrides['consumers']} disagree", f"consumers={w // 4 - 1}")
        consumers = w // 4 - 1
    elif "consumers" in overrides:
        consumers = overrides["consumers"]
    elif user_tiles:
        consumers = 2 if bm % 128 == 0 and bm >= 128 else 1

    if bk not in BLOCK_K_CHOICES:
        _fail(f"block_k={bk}: one 128-byte swizzle row of 16-bit elements", BLOCK_K_CHOICES)
    if bn not in BLOCK_N_CHOICES:
        _fail(f"block_n={bn} is not a wgmma N this build supports", BLOCK_N_CHOICES)
    if bm not in BLOCK_M_CHOICES:
        _fail(f"block_m={bm}: wgmma M is 64, at most 256 rows (TMA box limit)", BLOCK_M_CHOICES)
    if consumers not in CONSUMER_CHOICES:
        _fail(f"consumers={consumers}", CONSUMER_CHOICES)
    if bm % (64 * consumers):
        valid = [c for c in CONSUMER_CHOICES if bm % (64 * c) == 0]
        _fail(f"block_m={bm} does not split into {consumers} consumer(s) of whole 64-row wgmma blocks",
              f"consumers in {valid} for block_m={bm}")
    nthreads = 128 * (consumers + 1)
    if nthreads > MAX_THREADS:
        _fail(f"{nthreads} threads per block exceed {MAX_THREADS}", "consumers <= 7")
    acc = _acc_regs(bm, bn, consumers)
    regs = consumer_regs(consumers, a_tma and b_tma)
    budget = regs - _REG_OVERHEAD
    if acc > budget:
        _fail(f"register budget: {acc} fp32 accumulators per consumer thread for {bm}x{bn} over "
              f"{consumers} consumer(s), at most {budget} ({regs} registers after "
              f"setmaxnreg minus {_REG_OVERHEAD} for addressing)",
              "a smaller block_n, a smaller block_m, or more consumers")

    if c_tma is None:
        c_tma = DTYPES[out_dtype].itemsize == 2
    if c_tma and DTYPES[out_dtype].itemsize != 2:
        _fail(f"c_tma with a {out_dtype} output", "c_tma only for bfloat16/float16 outputs")
    max_st = _max_stages(bm, bn, bk, c_tma, 2)     # (16 bytes of split-K flags: same stage count)
    default_stages = min(max_st, 4 if bm * bn >= 128 * 256 else 12)
    stages = overrides.get("stages", default_stages)
    if stages < 2:
        _fail(f"stages={stages}: the consumers hold two stages at once", f"2 .. {max_st}")
    smem = _dynamic_smem(bm, bn, bk, stages, c_tma, 2)
    if smem > SMEM_LIMIT:
        _fail(f"shared memory {smem} bytes for {stages} stages of {bm}x{bk} + {bn}x{bk}"
              f"{' + a ' + str(bm) + 'x' + str(bn) + ' C tile' if c_tma else ''} exceeds "
              f"{SMEM_LIMIT} (227 KiB)", f"stages 2 .. {max_st} for this block shape")
    group_m = overrides.get("group_m", 8)
    if not 1 <= group_m <= 256:
        _fail(f"group_m={group_m}", "1 .. 256")
    persistent = overrides.get("persistent", 1)
    if persistent not in (0, 1):
        _fail(f"persistent={persistent}", "0 or 1")
    split_k = overrides.get("split_k", split_k)
    if not 1 <= split_k <= SPLIT_K_MAX:
        _fail(f"split_k={split_k}", f"1 .. {SPLIT_K_MAX}")
    split_k = max(1, min(split_k, _cdiv(K, bk)))     # no more K-slices than k-tiles

    return Config(in_dtype=in_dtype, out_dtype=out_dtype, a_kmajor=bool(a_kmajor), b_kmajor=bool(b_kmajor),
                  block_m=bm, block_n=bn, block_k=bk, consumers=consumers, stages=stages, group_m=group_m,
                  has_bias=bool(has_bias), has_c=bool(has_c), a_tma=bool(a_tma), b_tma=bool(b_tma),
                  c_tma=bool(c_tma), persistent=bool(persistent), split_k=int(split_k))


def template_args(cfg) -> str:
    """C++ template arguments of gemm_hopper<...>: validated ints, bools and dtype names only."""
    def b(x):
        return "true" if x else "false"
    ints = [int(cfg[k]) for k in ("block_m", "block_n", "block_k", "consumers", "stages", "group_m")]
    return ", ".join([DTYPES[cfg["in_dtype"]].cpp, DTYPES[cfg["out_dtype"]].cpp, b(cfg["a_kmajor"]),
                      b(cfg["b_kmajor"])] + [str(i) for i in ints]
                     + [b(cfg["has_bias"]), b(cfg["has_c"]), b(cfg["a_tma"]), b(cfg["b_tma"]),
                        b(cfg["c_tma"]), str(int(cfg.get("split_k", 1)))])


# ---- kernel arguments -----------------------------------------------------------------------------
class _TensorMap(ctypes.Structure):
    _fields_ = [("v", ctypes.c_ulonglong * 16)]


class Args(ctypes.Structure):
    """Byte-for-byte gemm_hopper<...>::args (the C++ static_asserts the same offsets)."""
    _fields_ = [
        ("a_map", _TensorMap),            # 0
        ("b_map", _TensorMap),            # 128
        ("c_map", _TensorMap),            # 256
        ("a", ctypes.c_void_p),           # 384
        ("b", ctypes.c_void_p),           # 392
        ("c", ctypes.c_void_p),           # 400
        ("c_in", ctypes.c_void_p),        # 408
        ("bias", ctypes.c_void_p),        # 416
        ("a_stride_m", ctypes.c_longlong),  # 424
        ("a_stride_k", ctypes.c_longlong),
        ("b_stride_k", ctypes.c_longlong),
        ("b_stride_n", ctypes.c_longlong),
        ("ldc", ctypes.c_longlong),
        ("ldc_in", ctypes.c_longlong),
        ("M", ctypes.c_int),              # 472
        ("N", ctypes.c_int),
        ("K", ctypes.c_int),
        ("alpha", ctypes.c_float),        # 484
        ("beta", ctypes.c_float),
        ("workspace", ctypes.c_void_p),   # 496 (split-K only: the counters)
        ("partials", ctypes.c_void_p),    # 504 (split-K only: the scratch); struct is alignas(64): 512
    ]


ARGS_SIZE = 512


def output_tma_ok(ptr: int, M: int, N: int, ldc: int, itemsize: int = 2) -> bool:
    """Can TMA store C (16-byte aligned base and row stride, contiguous columns)?"""
    # Conservative: rows whose byte length is not a multiple of 16 (N = 1 was seen to write
    # outside C, H200 2026-11-22) take the direct-store epilogue.
    return (itemsize == 2 and ptr % 16 == 0 and (N * itemsize) % 16 == 0
            and (M == 1 or (ldc * itemsize) % 16 == 0))

_TMAP_CACHE: dict = {}
_TMAP_CACHE_MAX = 256
_SWIZZLE = {128: 3, 64: 2, 32: 1}   # CUtensorMapSwizzle: 1 = 32B, 2 = 64B, 3 = 128B


def encode_tensor_map(ptr: int, in_dtype: str, dims: tuple, stride_bytes: int, box: tuple,
                      swizzle_bytes: int) -> bytes:
    """128-byte CUtensorMap for a 2D tile view (dims/box innermost first), cached by its inputs."""
    key = (ptr, in_dtype, dims, stride_bytes, box, swizzle_bytes)
    hit = _TMAP_CACHE.get(key)
    if hit is not None:
        return hit
    from ..runtime import cuda
    data_type = cuda.TMAP_BFLOAT16 if in_dtype == "bfloat16" else cuda.TMAP_FLOAT16
    raw = cuda.encode_tensor_map(data_type, ptr, dims, (stride_bytes,), box, _SWIZZLE[swizzle_bytes])
    if len(_TMAP_CACHE) >= _TMAP_CACHE_MAX:
        _TMAP_CACHE.clear()
    _TMAP_CACHE[key] = raw
    return raw


def _operand_map(encode, cfg, ptr, rows, k, s_rows, s_k, tile_rows, kmajor):
    """Tensor map of an operand that is logically rows x K; box = what one TMA call fills."""
    if kmajor:   # tile st<rows, 64>: box {64 K, tile_rows}
        dims, stride = (k, rows), s_rows
        box, sw = (cfg["block_k"], tile_rows), 128
        if rows == 1:
            stride = -(-k * 2 // 16) * 8
    else:        # tile st<64 K, rows>: one box per chunk of min(64, tile_rows) columns
        w = min(64, tile_rows)
        dims, stride = (rows, k), s_k
        box, sw = (w, cfg["block_k"]), 2 * w
        if k == 1:
            stride = -(-rows * 2 // 16) * 8
    return encode(ptr, cfg["in_dtype"], dims, stride * 2, box, sw)


_ARGS_CACHE: dict = {}


def make_args(cfg, a_ptr, a_shape, a_strides, b_ptr, b_shape, b_strides, c_ptr, c_strides,
              bias_ptr=None, c_in_ptr=None, c_in_strides=None, alpha=1.0, beta=0.0,
              encode_tensor_map=encode_tensor_map, workspace_ptr=0, partials_ptr=0) -> Args:
    """Fill Args. a_shape = (M, K), b_shape = (K, N); strides in elements, in the same axis order;
    c_strides = (ldc, 1) (the output's columns must be contiguous).

    Repeated calls with the same arguments return the same (cached) Args object: treat it as
    read-only."""
    key = (tuple(cfg.items()), a_ptr, tuple(a_shape), tuple(a_strides), b_ptr, tuple(b_shape), tuple(b_strides),
           c_ptr, tuple(c_strides), bias_ptr, c_in_ptr, tuple(c_in_strides) if c_in_strides else None,
           float(alpha), float(beta), encode_tensor_map, workspace_ptr, partials_ptr)
    hit = _ARGS_CACHE.get(key)
    if hit is not None:
        return hit
    g = _make_args(cfg, a_ptr, a_shape, a_strides, b_ptr, b_shape, b_strides, c_ptr, c_strides,
                   bias_ptr, c_in_ptr, c_in_strides, alpha, beta, encode_tensor_map)
    if cfg.get("split_k", 1) > 1:
        if not workspace_ptr or not partials_ptr:
            raise InvalidArgumentError(f"split_k={cfg['split_k']} needs zeroed counters (workspace_counter_bytes) "
                                       "and room for the partials (partials_bytes)")
        g.workspace, g.partials = workspace_ptr, partials_ptr
    if len(_ARGS_CACHE) >= _TMAP_CACHE_MAX:
        _ARGS_CACHE.clear()
    _ARGS_CACHE[key] = g
    return g


def _make_args(cfg, a_ptr, a_shape, a_strides, b_ptr, b_shape, b_strides, c_ptr, c_strides,
               bias_ptr, c_in_ptr, c_in_strides, alpha, beta, encode_tensor_map) -> Args:
    M, K = a_shape
    K2, N = b_shape
    if K2 != K:
        raise InvalidArgumentError(f"inner dimensions differ: A is {M}x{K}, B is {K2}x{N}")
    if c_strides[1] != 1 and N > 1:
        raise InvalidArgumentError("the output's column stride must be 1 (swap and transpose A and B "
                                   "to write a column-major C)")
    g = Args()
    if cfg["a_tma"]:
        ctypes.memmove(ctypes.addressof(g.a_map), _operand_map(
            encode_tensor_map, cfg, a_ptr, M, K, a_strides[0], a_strides[1], cfg["block_m"], cfg["a_kmajor"]), 128)
    if cfg["b_tma"]:
        ctypes.memmove(ctypes.addressof(g.b_map), _operand_map(
            encode_tensor_map, cfg, b_ptr, N, K, b_strides[1], b_strides[0], cfg["block_n"], cfg["b_kmajor"]), 128)
    if cfg.get("c_tma"):
        if not output_tma_ok(c_ptr, M, N, c_strides[0]):
            raise InvalidArgumentError("this config stores C with TMA, which needs a 16-byte aligned output "
                                       "and row stride; choose_config(..., c_tma=False) for this output")
        w = min(64, cfg["block_n"])
        ldc = c_strides[0] if M > 1 else -(-N * 2 // 16) * 8
        ctypes.memmove(ctypes.addressof(g.c_map), encode_tensor_map(
            c_ptr, cfg["out_dtype"], (N, M), ldc * 2, (w, cfg["block_m"] // cfg["consumers"]), 2 * w), 128)
    g.a, g.b, g.c = a_ptr, b_ptr, c_ptr
    g.c_in = c_in_ptr or 0
    g.bias = bias_ptr or 0
    g.a_stride_m, g.a_stride_k = a_strides
    g.b_stride_k, g.b_stride_n = b_strides
    g.ldc = c_strides[0]
    g.ldc_in = c_in_strides[0] if c_in_strides else 0
    g.M, g.N, g.K = M, N, K
    g.alpha, g.beta = alpha, beta
    return g


# ---- the interface every arch module of gemm implements (see hkjit/ops/gemm.py) --------------------
TILES = OVERRIDES


def configure(target, p: dict, tiles: dict) -> Config:
    """Config for validated gemm params `p` (hkjit.ops.gemm.GEMM.params) and tile overrides."""
    check_tiles("gemm (sm_90a)", tiles, TILES)
    # TMA addresses an operand when its base and row stride are 16-byte aligned; the output is
    # TMA-stored when it is 16-bit, aligned likewise, and its rows are whole 16-byte units.
    c_tma = DTYPES[p["out_dtype"]].itemsize == 2 and p["c_align"] == 16 and (p["n"] * 2) % 16 == 0
    return choose_config(p["m"], p["n"], p["k"], p["a_layout"] == "row", p["b_layout"] == "col", p["dtype"],
                         p["out_dtype"], p["num_sms"], tiles, has_bias=p["bias"], has_c=p["c"],
                         a_tma=p["a_align"] % 16 == 0, b_tma=p["b_align"] % 16 == 0, c_tma=c_tma)


def template_params(cfg) -> dict:
    return dict(cfg)


def kernel_type(cfg) -> str:
    return f"gemm_hopper<{template_args(cfg)}>"


def checks(cfg) -> tuple:
    """Formulas kept on both sides: the C++ type static_asserts these equal Python's."""
    if cfg["consumers"] < 2:
        return ()
    return (("CONSUMER_REGS", consumer_regs(cfg["consumers"], cfg["a_tma"] and cfg["b_tma"])),)


def launch_grid(cfg, p) -> tuple:
    return grid(p["m"], p["n"], p["k"], cfg, p["num_sms"])


def workspace(cfg, p) -> tuple:
    """(workspace bytes, of them zeroed, scratch bytes) of a launch (split-K only): the counters,
    kept and zeroed, and the partials, per call."""
    if cfg["split_k"] <= 1:
        return 0, 0, 0
    counters = workspace_counter_bytes(p["m"], p["n"], cfg)
    return counters, counters, partials_bytes(p["m"], p["n"], cfg)


def fill(cfg, *, a, b, out, bias, c, a_strides, b_strides, ldc, ldc_in, m, n, k, alpha, beta, workspace,
         scratch=0) -> Args:
    return make_args(cfg, a, (m, k), a_strides, b, (k, n), b_strides, out, (ldc, 1), bias, c, (ldc_in, 1),
                     alpha, beta, workspace_ptr=workspace, partials_ptr=scratch)
