"""The Hopper (sm_90a) half of the attention forward: kernel_sources/attention_fwd_hopper.cuh.

Configuration: one producer warpgroup streams K/V blocks into a ring of shared stages; each
consumer warpgroup owns 64 query rows and runs S = Q Kᵀ (both operands in shared memory) and
O += P V (P from registers) on wgmma, one block deep: block j's softmax runs while P_(j-1) V_(j-1)
is on the tensor cores; with `pingpong` the two consumers also take turns issuing their products.

| head_dim | consumers | query rows / block | block_kv | stages | pingpong | producer | shared memory |
|----------|-----------|--------------------|----------|--------|----------|----------|---------------|
| 64       | 2         | 128                | 128      | 3      | 1        | tma      | 113 KiB       |
| 128      | 2         | 128                | 128      | 3      | 1        | tma      | 225 KiB       |

The producer is "cpasync" instead wherever "tma" cannot serve the call (varlen batches; q, k, v
pointers or strides not 16-byte aligned), unless `producer` is passed.

(Measured on H100, docs/notes/attention_hopper.md: the cp.async producer 1.8x the plain-load one
at D128 and 1.09x at D64; with it D64 at block_kv 128 runs 9-14% faster than at 64 (with the
plain loads it had been 10-19% slower); D128 at block_kv 128 2-4% faster than at 64; ping-pong
up to 6% (one D64 causal row 2% faster without it); a fourth stage nothing; overlap=1 4-7%
slower. TMA against cp.async (40 / 232 registers), 13 shapes: TMA up to 9% faster (N >= 4096 at
D128, D64), equal at N2048 and MHA N4096; one earlier GQA N2048 D128 run 6% slower, D64 GQA 2%.)

Overrides: `block_kv` (64 or 128), `consumers` (1 or 2; three would leave 152 registers a
consumer thread, and S + O alone take 128), `stages` (2 to 4: the pipeline holds stage j - 1 while
it waits for stage j), `pingpong` (0 or 1; 1 needs consumers=2), `overlap` (0 or 1: the wait
retiring O += P V at the top of the next iteration, where ptxas keeps the softmax under the
product; it holds two stages while it waits for a third, so it needs stages >= 3), `producer`
("cpasync", "tma" or "lsu"): how K and V reach the shared stages. "cpasync": 128 threads issue
every 16-, 8- or 4-byte piece of a stage at once straight into shared memory (rows past n_k
zero-filled, completion by one cp.async.mbarrier.arrive.noinc a thread); it serves every input
(varlen, 4-byte rows, any strides). "tma": one thread, tensor maps over (D, n_k, kv_heads, batch)
with the caller's strides; needs 16-byte aligned q, k, v base pointers and strides and dense (not
varlen) batches, refused otherwise (the default falls back to "cpasync" there). "lsu": plain
vector loads of 128 threads through registers (4 loads in flight a thread): the earlier default,
kept for comparison. Registers, producer / consumers: "tma" 24 / 240, "cpasync" 40 / 232 with 16-byte rows
and 72 / 216 with narrower ones, "lsu" 72 / 216 (producer_regs). `lean` (0, 1 or 2;
docs/notes/attention_hopper_fwd_sass.md): the consumer loop with fewer instructions, same results: wgmma
descriptors walked by constant adds, the causal mask one compare a score, the row max in four chains, O
rescaled after the P V wait (outside the ping-pong turn) and only where a row's max moved (a warp vote;
skipping a multiplication by exactly 1); 2 also runs the softmax under the warpgroup's own P V. Per KV block
at D128 551 -> 426 SASS instructions (+64 FMUL where the max moved), the ping-pong turn 207 -> 81; measured
on H100 slower than the default in 4 of 5 rows (up to 13%; docs/notes/attention_hopper.md), not a default.
`exp_fma` (0, 1, 2, 3, 4, 6 or 8; docs/notes/attention_hopper_fwd_exp.md): that many of every 16 of a
thread's scores take their exponential on the FMA pipe (range reduction and a polynomial of relative error
1.0e-4 for bf16, 2.9e-6 for fp16: kernel_sources/exp2_fma.cuh) instead of MUFU.EX2, which bounds a KV block
at D64. `prologue` (0 or 1): each consumer's Q by cp.async issued before the block's barrier set-up (one
round trip, not two); `epilogue` (0 or 1): O stored from two row pointers worked out once (802 -> 276 SASS
instructions a warp after the last product at D128): fixed costs a block pays once, which weigh most at
short N. exp_fma=1, prologue=1 and epilogue=1 are the defaults (measured on H100 beside each other and
cuDNN). `persistent` (0 or 1; GPU-tested, measured on H200 within about one run-to-run spread of the
default: +1 to +3.5% at D128 N <= 4096, -0.2 to -0.6% at N >= 8192, so not a default): one block an SM
(`num_sms`, the device's count, else the target's; at most one a unit of work) walks the (query block, head,
batch) tiles in the grid's order (causal: units pairing query blocks p and last - p, equal work each), the
ring's stage and phase carried from tile to tile so the producer streams the next tile's K/V while the
consumers finish this one; dense batches and prologue=1 only (refused otherwise). `blocks` (with persistent=1,
a positive int): the persistent grid's size instead of one block an SM (still at most one a unit of work):
a smaller grid gives each block more tiles (what the GPU tests use to walk many tiles on small shapes).
Rejected before anything compiles, naming the limit: shared memory beyond the 227 KiB a block may use.
"""

import ctypes
import math

from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ._attention_args import ForwardArgs, pack_forward
from ._hopper_attention_tma import TMA_ALIGN, TensorMap, encode_tensor_map, map_shape, put_map, tma_serves
from ..targets import parse as _parse_target

SOURCE = "attention_fwd_hopper.cuh"
TEMPLATE = "attention_fwd_hopper"
TILES = ("block_kv", "consumers", "stages", "pingpong", "overlap", "producer", "lean", "exp_fma", "prologue",
         "epilogue", "persistent", "blocks")
SMEM_LIMIT = _parse_target("sm_90a").smem_per_block
# exp_fma=1, prologue=1, epilogue=1: together faster than without on 13 of 14 H100 timings (two runs, 6-8
# shapes, +1-3%; the one loss N8192 D128 causal -1.4%), none of the three alone consistently
# (docs/notes/attention_hopper.md)
_DEFAULTS = {64: dict(block_kv=128, consumers=2, stages=3, pingpong=1, overlap=0, producer="tma", lean=0, exp_fma=1,
                 prologue=1, epilogue=1, persistent=0),
             128: dict(block_kv=128, consumers=2, stages=3, pingpong=1, overlap=0, producer="tma", lean=0, exp_fma=1,
                  prologue=1, epilogue=1, persistent=0)}
_CHOICES = {"block_kv": (64, 128), "consumers": (1, 2), "stages": (2, 3, 4), "pingpong": (0, 1), "overlap": (0, 1),
            "producer": ("lsu", "tma", "cpasync"), "lean": (0, 1, 2), "exp_fma": (0, 1, 2, 3, 4, 6, 8),
            "prologue": (0, 1), "epilogue": (0, 1), "persistent": (0, 1)}
# setmaxnreg of the producer warpgroup (2 consumers). cp.async: 24 would do for NVRTC 13.5, but 13.0
# (what torch's CUDA 13.0 wheels bring) spilled there; with 8- or 4-byte rows (2-4x the copies a stage)
# it keeps the plain loads' 72.
PRODUCER_REGS = {"lsu": 72, "tma": 24, "cpasync": 40}
NARROW_CPASYNC_REGS = 72
_KV_PRODUCER = {name: f"hkjit_attn_hopper::kv_producer::{name}" for name in _CHOICES["producer"]}   # C++ enum


def _err(msg):
    raise InvalidArgumentError(msg)


def smem_bytes(cfg) -> int:
    """Dynamic shared memory: 1 KiB alignment slack, the K/V ring, each consumer's Q tile, barriers."""
    d, kv = cfg["head_dim"], cfg["block_kv"]
    stage = 2 * kv * d * 2
    consumer = 64 * d * 2
    return 1024 + cfg["stages"] * stage + cfg["consumers"] * consumer + 2 * cfg["stages"] * 8


def producer_regs(producer: str, vec: int = 8) -> int:
    """Registers the producer warpgroup keeps (setmaxnreg.dec); `vec`: elements a copy (8 = 16 bytes)."""
    return NARROW_CPASYNC_REGS if producer == "cpasync" and vec != 8 else PRODUCER_REGS[producer]


def consumer_regs(consumers: int, producer: str, vec: int = 8) -> int:
    threads = (consumers + 1) * 128
    entry = 65536 // threads // 8 * 8
    return min(240, (entry * (consumers + 1) - producer_regs(producer, vec)) // consumers // 8 * 8)


def configure(target, p: dict, tiles: dict) -> Config:
    """Validated configuration for attention params `p` (see hkjit.ops.attention) on sm_90a."""
    where = f"attention ({target.arch})"
    check_tiles(where, tiles, TILES)
    if target.arch != "sm_90a":
        _err(f"{where}: the Hopper attention kernel supports sm_90a only")
    d = p["head_dim"]
    chosen = dict(_DEFAULTS[d])
    tiles = dict(tiles)
    blocks = tiles.pop("blocks", None)     # the persistent grid's size (default: one block an SM); not in the type
    for name, v in tiles.items():
        if isinstance(v, bool) or not isinstance(v, (int, str)) or v not in _CHOICES[name]:
            _err(f"{where}: {name}={v!r}; valid choices: {', '.join(map(repr, _CHOICES[name]))}")
        chosen[name] = v
    if chosen["consumers"] == 1:
        if tiles.get("pingpong") == 1:
            _err(f"{where}: pingpong=1 alternates two consumer warpgroups; it needs consumers=2")
        chosen["pingpong"] = 0
    align = p.get("align", 16)
    if align % 4:
        _err(f"{where}: q, k, v aligned to {align} bytes; base pointers and row strides must be aligned to 4 bytes "
             "(an even number of elements)")
    if chosen["overlap"] and chosen["stages"] < 3:
        _err(f"{where}: overlap=1 with stages={chosen['stages']}: the loop-top wait holds stages j - 2 and j - 1 while "
             "it waits for stage j, so it needs stages >= 3; pass stages=3 or 4, or overlap=0")
    if chosen["producer"] == "tma" and "producer" not in tiles and not tma_serves(p):
        chosen["producer"] = "cpasync"     # the default where TMA cannot serve the call (below)
    if chosen["producer"] == "tma":
        if p["varlen"]:
            _err(f"{where}: producer='tma' with cu_seqlens: TMA streams dense (batch, head) views and the packed rows "
                 "past a sequence belong to the next one; use producer='cpasync' for varlen batches")
        if align % TMA_ALIGN:
            _err(f"{where}: producer='tma' needs q, k and v base pointers and strides aligned to {TMA_ALIGN} "
                 f"bytes (these are aligned to {align}); pass contiguous arrays or use producer='cpasync'")
    if chosen["persistent"]:
        if p["varlen"]:
            _err(f"{where}: persistent=1 with cu_seqlens: the persistent grid walks dense (query block, head, batch) "
                 "tiles; pass persistent=0 for varlen batches")
        if not chosen["prologue"]:
            _err(f"{where}: persistent=1 loads each tile's Q by cp.async, prologue=1's path; pass prologue=1")
    if blocks is not None:
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            _err(f"{where}: blocks={blocks!r}; a positive int (the persistent grid's size)")
        if not chosen["persistent"]:
            _err(f"{where}: blocks={blocks} sizes the persistent grid; pass persistent=1 with it")
    cfg = Config(target=target.arch, dtype=p["dtype"], head_dim=d, causal=bool(p["causal"]),
                 varlen=bool(p["varlen"]), vec=min(align, 16) // 2, blocks=blocks or 0, **chosen)
    cfg["block_q"] = 64 * cfg["consumers"]
    smem = smem_bytes(cfg)
    if smem > SMEM_LIMIT:
        _err(f"{where}: shared memory: {cfg['stages']} stages x (K + V) x block_kv={cfg['block_kv']} x head_dim={d} "
             f"plus the Q tiles of {cfg['consumers']} consumers = {smem} bytes exceeds the {SMEM_LIMIT} bytes a "
             "block may use; lower stages or block_kv")
    return cfg


def template_params(cfg) -> dict:
    return {k: cfg[k] for k in ("dtype", "head_dim", "block_kv", "consumers", "stages", "causal", "varlen", "vec",
                                "pingpong", "overlap", "producer", "lean", "exp_fma", "prologue", "epilogue",
                                "persistent")}


def knobs(cfg) -> int:
    """The kernel's KNOBS argument: the consumer's overrides packed in one int (lean: bits 0-1, exp_fma:
    bits 2-5, prologue: bit 6, epilogue: bit 7, persistent: bit 8), so that a new one leaves earlier
    configurations' types, and cubins, unchanged."""
    return (int(cfg["lean"]) | int(cfg["exp_fma"]) << 2 | int(cfg["prologue"]) << 6 | int(cfg["epilogue"]) << 7
            | int(cfg["persistent"]) << 8)


def kernel_type(cfg) -> str:
    b = lambda v: "true" if v else "false"
    k = knobs(cfg)
    knob_arg = f", {k}" if k else ""      # KNOBS: left out at 0, so the types of configurations without knobs stay
    return (f"{TEMPLATE}<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, {int(cfg['block_kv'])}, "
            f"{int(cfg['consumers'])}, {int(cfg['stages'])}, {b(cfg['causal'])}, {b(cfg['varlen'])}, {int(cfg['vec'])}, "
            f"{b(cfg['pingpong'])}, {b(cfg['overlap'])}, {_KV_PRODUCER[cfg['producer']]}{knob_arg}>")


def threads(cfg) -> int:
    return (cfg["consumers"] + 1) * 128


def dynamic_smem(cfg) -> int:
    return smem_bytes(cfg)


def checks(cfg) -> tuple:
    """Formulas kept on both sides: the C++ type static_asserts these equal Python's."""
    return (("CONSUMER_REGS", consumer_regs(cfg["consumers"], cfg["producer"], cfg["vec"])),
            ("PRODUCER_REGS", producer_regs(cfg["producer"], cfg["vec"])))


def launch_grid(cfg, p) -> tuple:
    """(query blocks, heads, batch); persistent: `blocks` if given, else one block an SM (p["num_sms"], the
    device's, else the target's), at most one a unit of work (the kernel walks units blockIdx.x, + gridDim.x,
    ...: a tile, or with causal masking a pair of query blocks p and last - p of one head, the same KV blocks
    each)."""
    q_blocks = math.ceil(p["n_q"] / cfg["block_q"])
    if cfg["persistent"]:
        sms = cfg["blocks"] or p.get("num_sms") or _parse_target(cfg["target"]).compute_units
        per_head = (q_blocks + 1) // 2 if cfg["causal"] else q_blocks
        return (max(1, min(per_head * p["heads"] * p["batch"], sms)), 1, 1)
    return (q_blocks, p["heads"], p["batch"])


def workspace(cfg, p) -> tuple:
    return 0, 0


Args = ForwardArgs          # the argument block every forward kernel shares


class TmaArgs(ctypes.Structure):
    """attention_fwd_hopper<..., TMA = true>::args: the K and V tensor maps, then ForwardArgs' fields
    (at 256), padded to the 64-byte alignment of the maps."""
    _fields_ = [("k_map", TensorMap), ("v_map", TensorMap)] + list(ForwardArgs._fields_) + \
               [("_pad", ctypes.c_char * 56)]


def args_type(cfg) -> type:
    """The ctypes mirror of the kernel's args for `cfg` (attention.py's plan asks for it)."""
    return TmaArgs if cfg["producer"] == "tma" else ForwardArgs


def kv_map_shape(cfg, name, ptr, strides, kv_heads, n_k, batch) -> tuple:
    """(dims, byte strides, box) of K's or V's tensor map: (D, n_k, kv_heads, batch) with the caller's
    (row, head, batch) strides, box (64, block_kv, 1, 1) = one 128-byte swizzle chunk of a stage tile.
    A stand-in stride where an extent is 1; unaligned ones refused (_hopper_attention_tma.map_shape)."""
    return map_shape("attention: producer='tma'", "producer='cpasync'", name, ptr, strides, cfg["head_dim"], n_k,
                     kv_heads, batch, cfg["block_kv"])


def fill(cfg, *, o, o_strides, encode=encode_tensor_map, **arguments):
    if int(o) % 4 or int(o_strides[2]) % 2:
        _err(f"attention: out's base pointer or row stride ({o_strides[2]} elements) is not 4-byte aligned; pass a "
             "contiguous out")
    g = pack_forward(cfg["vec"] * 2, cfg["varlen"], o=o, o_strides=o_strides, args_type=args_type(cfg), **arguments)
    if cfg["producer"] != "tma":
        return g
    for name, field in (("k", "k_map"), ("v", "v_map")):
        dims, strides, box = kv_map_shape(cfg, name, arguments[name], arguments[f"{name}_strides"],
                                          arguments["kv_heads"], arguments["n_k"], arguments["batch"])
        put_map(g, field, encode(cfg["dtype"], arguments[name], dims, strides, box))
    return g
