"""The Hopper (sm_90a) half of the attention backward: kernel_sources/attention_bwd_hopper.cuh.

One pass over the keys, two launches (`DQ`, `DKDV`, the per-arch interface of hkjit/ops/gemm.py as
objects; the op names stay the CDNA half's):

| launch | kernel                      | block                                 | shared memory (stages 2) |
|--------|-----------------------------|---------------------------------------|--------------------------|
| dq     | attention_bwd_prep_hopper   | 128 query rows: Delta, dQ of rows that see no key | 0 |
| dkdv   | attention_bwd_dkdv_hopper   | 128 keys (2 consumer warpgroups of 64) + a producer; streams query blocks of 64 rows (D64 with the TMA producer: 128); dK, dV, and dQ through fp32 scratch | D64 129 KiB (128 rows: 195 KiB), D128 226 KiB |

Overrides (dkdv): `block_q` (64; or 128 at head_dim 64 with the TMA producer and dkdv_consumer 8, 10 or 11: half
as many dQ hand-offs, twice the tensor work a step; the default wherever it can run, measured on H200 1.03-1.23x
block_q 64 over 6 D64 shapes) and `dkdv_stages`
(2 to 4; D128 and block_q 128 fit 2 only). Refused before anything compiles, naming the limit. Deterministic: dQ partials
are added in the fixed order of the KV blocks (per-query-block semaphores in the workspace), the GQA
sum over query heads runs in one block, in order.

`dq_warp` (with the cp.async producer: 0 or 1; default 1 when every KV head has one query head, else 0;
the TMA producer always runs with 1): 1 moves the dQ hand-off
(semaphore wait, bulk store/reduction, release, and the last KV block's dQ conversion) onto warp 3 of
the producer warpgroup and the stage loads onto warps 0 .. `load_warps` - 1 (1, 2 or 3; default 3; a
warp issues the loads of 4 / load_warps warps of the four-warp split, warp 0 two at 3), so the next
stage's loads never wait for a dQ add, and frees the shared dQ partial once the bulk operation has
read it. Measured on H100: MHA 5-22% faster, GQA (8 query heads a KV head) 13% slower, load_warps=1
30-45% slower. The producer keeps 56 registers (at 40 or 24 ptxas spills). Refused before compiling:
other values, load_warps other than 4 without dq_warp.

`dkdv_producer` ("tma", the default wherever it can serve the call, else "cpasync"): how Q, dO, LSE
and Delta reach a stage. Measured on H100 (B16, one process beside SDPA): N8192 D128 315 -> 457 TFLOP/s,
causal 304 -> 409, GQA H64/8 N8192 D128 300 -> 439, N4096 D64 causal 219 -> 247, N2048 D128 216 -> 315.
"cpasync": the producer's loading warps issue every 16-byte piece (any strides, varlen, 8- and 4-byte rows).
"tma": one elected thread of warp 0 issues Q and dO as tensor-map boxes over (D, n_q, heads, batch) with the
caller's strides (rows past n_q read as zeros), warp 0's 32 lanes copy LSE and Delta by 4-byte cp.async, warp
3 adds dQ (dq_warp=1, load_warps=1 implied), and the producer keeps 24 registers so the consumers get 240.
Needs dense batches and 16-byte aligned q, k, v and grad_out (pointers and strides): passed explicitly
otherwise, refused naming dkdv_producer='cpasync'.

`dkdv_consumer` (0, 1, 2, 3, 5 or 7, and at head_dim 64 also each of those + 8; "tma" producer only, whose
consumers have 240 registers; default 10 at block_q 128, else 2, and 0 with cp.async): variants of the consumer
step, bits that combine; bits 1, 2 and 4 GPU-tested and timed on H100 (docs/notes/attention_hopper.md), bit 8
GPU-tested and timed on H200 (at block_q 64 within -4% to +1% of 2). 1, wait placement (FlashAttention-3's order):
wait for S alone and compute P while dP runs; issue dV once dS is formed and keep it in flight across the dS^T store and the consumers'
barrier; issue dQ (in S^T's registers at block_q 64), retire dV, issue dK, retire dQ and store its partial while dK runs.
2: dS^T stored by stmatrix (4 a thread) instead of 16 scalar stores. 4 (with 1): dV issued as soon as P is
packed, before the dP wait, so dS is formed while dV runs. 8 (head_dim 64 only): each consumer computes dQ over
its own 64 keys and consumer 0 adds the two partials in shared memory, instead of consumer 0 computing all of
dQ while consumer 1 waits at the barrier before it. With block_q 128 only 8, 10 and 11 (dQ in an accumulator
of its own there; with it 9 spilled 32 bytes under causal masking, and 13 and 15 96 bytes with every wgmma
serialised, NVRTC 13.5).

Device memory (dkdv; varlen: sized by the longest sequence):
- workspace, kept per stream by the launcher: one int semaphore per (batch, head, query block of
  block_q rows), padded to 256 bytes, zero before the first launch and left zero by every launch (1 MiB at
  B16 H64 N16384);
- scratch, per call: one block_q x head_dim fp32 dQ accumulator per query block, written before it is
  read (8 GiB at B16 H64 N16384 D128), so nothing of it is held between calls (hkjit/op.py Plan).
"""

import ctypes
import math

from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ..targets import parse as _parse_target
from ._attention_args import BackwardArgs, pack_backward
from ._hopper_attention_tma import TMA_ALIGN, TensorMap, encode_tensor_map, map_shape, put_map, tma_serves

SOURCE = "attention_bwd_hopper.cuh"
SMEM_LIMIT = _parse_target("sm_90a").smem_per_block
CONSUMERS = 2
# setmaxnreg of the producer warpgroup (attention_bwd_hopper.cuh: register_split<CONSUMERS, PRODUCER_REGS>):
# cp.async keeps 56 (at 40 or 24 ptxas spilled in the loads); TMA issues from one thread and 24 suffice.
PRODUCER_REGS = {"cpasync": 56, "tma": 24}
BLOCK_KV = 64 * CONSUMERS
BLOCK_Q = 64
WIDE_BLOCK_Q = 128     # head_dim 64, dQ by key halves (dkdv_consumer bit 8), the TMA producer: half the dQ links
WIDE_CONSUMERS = (8, 10, 11)   # the consumer variants that compile clean at WIDE_BLOCK_Q (no spills, no C751x)
PREP_ROWS = 128
_STAGES = (2, 3, 4)
_DQ_WARP = (0, 1)
_LOAD_WARPS = {0: (4,), 1: (1, 2, 3)}          # by dq_warp: warps of the producer that issue the loads
_PRODUCERS = ("cpasync", "tma")
# dkdv_consumer, bits: 1 wait placement, 2 stmatrix dS^T, 4 early dV (with 1 only), 8 dQ by key halves (D64)
_CONSUMERS = (0, 1, 2, 3, 5, 7, 8, 9, 10, 11, 13, 15)


class WorkspaceArgs(ctypes.Structure):
    """Mirror of hkjit_attn_hopper::bwd_ws_args: the common block, the semaphores (workspace), the dQ
    accumulators (scratch), the query blocks per (batch, head) both were sized for."""
    _fields_ = [("a", BackwardArgs), ("semaphores", ctypes.c_void_p), ("dq_accum", ctypes.c_void_p),
                ("q_blocks", ctypes.c_int), ("unused", ctypes.c_int)]


class WorkspaceTmaArgs(ctypes.Structure):
    """Mirror of hkjit_attn_hopper::bwd_tma_args (dkdv_producer="tma"): the Q and dO tensor maps, then
    WorkspaceArgs' fields (at 256), padded to the maps' 64-byte alignment."""
    _fields_ = [("q_map", TensorMap), ("do_map", TensorMap)] + list(WorkspaceArgs._fields_) + \
               [("_pad", ctypes.c_char * 56)]


def _err(msg):
    raise InvalidArgumentError(msg)


def consumer_regs(consumers: int, producer: str = "cpasync") -> int:
    threads = (consumers + 1) * 128
    entry = 65536 // threads // 8 * 8
    return min(240, (entry * (consumers + 1) - PRODUCER_REGS[producer]) // consumers // 8 * 8)


def _choice(where, name, value, choices, context=""):
    if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
        _err(f"{where}: {name}={value!r}{context}; valid choices: {', '.join(map(str, choices))}")
    return value


def _common(where, target, p):
    if target.arch != "sm_90a":
        _err(f"{where}: the Hopper attention backward kernels support sm_90a only")
    align = p.get("align", 16)
    if align % 4:
        _err(f"{where}: arrays aligned to {align} bytes; base pointers and row strides must be aligned to 4 "
             "bytes (an even number of elements)")
    return min(align, 16) // 2


def _check_pointers(cfg, arguments, read, written):
    lb = cfg["vec"] * 2
    ptrs = dict(arguments, do=arguments["d_o"])
    for name in read:
        if int(ptrs[name]) % lb or int(arguments[f"{name}_strides"][2]) * 2 % lb:
            _err(f"attention backward: {name}'s base pointer or row stride is not aligned to the {lb}-byte loads "
                 "this kernel was built for")
    for name in written:
        if not ptrs[name]:
            _err(f"attention backward: the sm_90a {cfg['kernel']} kernel writes {name}; pass it")
        if int(ptrs[name]) % 4 or int(arguments[f"{name}_strides"][2]) % 2:
            _err(f"attention backward: {name}'s base pointer or row stride "
                 f"({arguments[f'{name}_strides'][2]} elements) is not 4-byte aligned; pass a contiguous {name}")
    if cfg["varlen"] and not (arguments["cu_seqlens_q"] and arguments["cu_seqlens_k"]):
        _err("attention backward: a varlen kernel needs cu_seqlens_q and cu_seqlens_k")


class _Base:
    SOURCE = SOURCE

    def template_params(self, cfg) -> dict:
        return {k: cfg[k] for k in self.PARAMS}

    def dynamic_smem(self, cfg) -> int:
        return self.smem_bytes(cfg)


class Prep(_Base):
    """Delta = rowsum(dO ∘ O) per query row, and dQ = 0 for the rows that see no key (the dkdv
    kernel may never visit their query blocks). 256 threads, two a row."""
    name, TILES, Args = "dq", (), BackwardArgs
    PARAMS = ("kernel", "dtype", "head_dim", "causal", "varlen", "vec")

    def configure(self, target, p, tiles) -> Config:
        where = f"attention backward prep ({target.arch})"
        if target.arch == "sm_90a" and "block_kv" in tiles:
            _err(f"{where}: block_kv is not tunable on sm_90a: the one-pass backward's KV block is "
                 f"{BLOCK_KV} keys (2 consumer warpgroups x 64); tune block_q / dkdv_stages")
        check_tiles(where, tiles, self.TILES)
        vec = _common(where, target, p)
        return Config(target=target.arch, kernel="prep", dtype=p["dtype"], head_dim=p["head_dim"],
                      causal=bool(p["causal"]), varlen=bool(p["varlen"]), vec=vec)

    def smem_bytes(self, cfg) -> int:
        return 0

    def kernel_type(self, cfg) -> str:
        b = lambda v: "true" if v else "false"  # noqa: E731
        return (f"attention_bwd_prep_hopper<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, "
                f"{b(cfg['causal'])}, {b(cfg['varlen'])}, {int(cfg['vec'])}>")

    def threads(self, cfg) -> int:
        return 2 * PREP_ROWS

    def checks(self, cfg) -> tuple:
        return ()

    def launch_grid(self, cfg, p) -> tuple:
        return (math.ceil(p["n_q"] / PREP_ROWS), p["heads"], p["batch"])

    def workspace(self, cfg, p) -> tuple:
        return 0, 0, 0

    def fill(self, cfg, **arguments) -> BackwardArgs:
        _check_pointers(cfg, arguments, ("o", "do"), ("dq",))
        return pack_backward(**arguments)


class Main(_Base):
    """dK, dV and dQ: one block per 128 keys of a KV head."""
    name, TILES, Args = "dkdv", ("block_q", "dkdv_stages", "dq_warp", "load_warps", "dkdv_producer",
                                 "dkdv_consumer"), WorkspaceArgs
    PARAMS = ("kernel", "dtype", "head_dim", "block", "consumers", "stages", "causal", "varlen", "vec", "dq_warp",
              "load_warps", "producer", "consumer")
    UPDATES = ("dq",)          # given, not an output of the op (the CDNA dkdv kernel leaves it alone): written here

    def configure(self, target, p, tiles) -> Config:
        where = f"attention backward dkdv ({target.arch})"
        check_tiles(where, tiles, self.TILES)
        vec = _common(where, target, p)
        d = p["head_dim"]
        stages = tiles.get("dkdv_stages", 2)
        if isinstance(stages, bool) or stages not in _STAGES:
            _err(f"{where}: dkdv_stages={stages!r}; valid choices: {', '.join(map(str, _STAGES))}")
        producer = tiles.get("dkdv_producer", self._default_producer(p, tiles))
        if not isinstance(producer, str) or producer not in _PRODUCERS:
            _err(f"{where}: dkdv_producer={producer!r}; valid choices: {', '.join(map(repr, _PRODUCERS))}")
        blk = tiles.get("block_q", self._default_block_q(p, tiles, producer))
        if isinstance(blk, bool) or blk not in (BLOCK_Q, WIDE_BLOCK_Q):
            _err(f"{where}: block_q={blk!r}; valid choices: {BLOCK_Q}, or {WIDE_BLOCK_Q} at head_dim 64 (dK, dV, "
                 f"S^T, dP^T and dQ of a wider block would not fit the registers a consumer thread has)")
        if producer == "tma":
            dq_warp, loads = self._tma_roles(where, p, tiles)
        else:
            # dq_warp=1 measured 5-22% faster with one query head per KV head and 13% slower with eight
            # (H100, docs/notes/attention_hopper.md "Backward variants, measured")
            dq_warp = _choice(where, "dq_warp", tiles.get("dq_warp", int(p["heads"] == p["kv_heads"])), _DQ_WARP)
            loads = _choice(where, "load_warps", tiles.get("load_warps", 3 if dq_warp else 4), _LOAD_WARPS[dq_warp],
                            f" with dq_warp={dq_warp}" + ("" if dq_warp else " (all four producer warps load; 1 to 3 "
                                                           "need dq_warp=1, whose warp 3 adds dQ)"))
        consumer = _choice(where, "dkdv_consumer", tiles.get("dkdv_consumer", self._default_consumer(producer, blk)),
                           _CONSUMERS)
        if blk == WIDE_BLOCK_Q and (d != 64 or producer != "tma" or consumer not in WIDE_CONSUMERS):
            _err(f"{where}: block_q={blk} needs head_dim 64 (this is {d}), dkdv_producer='tma' (this is {producer!r}) "
                 f"and dkdv_consumer 8, 10 or 11 (dQ by key halves; this is {consumer}): each consumer's dQ partial "
                 "of 128 rows needs its own 64 registers, which the other consumer variants do not leave, and "
                 "one dS^T buffer must do")
        if consumer & 8 and d != 64:
            _err(f"{where}: dkdv_consumer={consumer} at head_dim={d}; bit 8 (dQ by key halves) is for head_dim 64, "
                 "where dQ's 64 columns are one consumer's tile (at 128 the consumers already split its columns)")
        if consumer and producer != "tma":
            _err(f"{where}: dkdv_consumer={consumer} with dkdv_producer={producer!r}; valid choices: 0 (the variants "
                 f"need the 240 registers a consumer has beside the TMA producer, {consumer_regs(CONSUMERS)} here; "
                 "dkdv_producer='tma' serves dense batches with 16-byte aligned inputs)")
        cfg = Config(target=target.arch, kernel="dkdv", dtype=p["dtype"], head_dim=d, block=blk, consumers=CONSUMERS,
                     stages=stages, causal=bool(p["causal"]), varlen=bool(p["varlen"]), vec=vec, dq_warp=dq_warp,
                     load_warps=loads, producer=producer, consumer=consumer)
        cfg["rows"] = BLOCK_KV
        smem = self.smem_bytes(cfg)
        if smem > SMEM_LIMIT:
            ds_tiles = "one dS^T tile" if blk == WIDE_BLOCK_Q else "two dS^T tiles"
            _err(f"{where}: shared memory: {stages} stages x 2 tiles x block_q={blk} x head_dim={d} plus K, V, "
                 f"{ds_tiles} and two fp32 dQ buffers = {smem} bytes exceeds the {SMEM_LIMIT} bytes a block may use; "
                 "lower dkdv_stages")
        return cfg

    @staticmethod
    def _default_block_q(p, tiles, producer) -> int:
        """128 query rows a step at head_dim 64 wherever they can run (the TMA producer, 2 stages, a
        consumer variant of WIDE_CONSUMERS or none given), else 64. H200, whole backward beside SDPA over
        6 D64 shapes (docs/notes/attention_hopper.md "D64: 128 query rows a step"): 1.03-1.23x the
        block_q 64 default, MHA and GQA, causal or not."""
        consumer = tiles.get("dkdv_consumer", WIDE_CONSUMERS[1])     # (a value of another type: refused later)
        wide = (p["head_dim"] == 64 and producer == "tma" and tiles.get("dkdv_stages", 2) == 2
                and type(consumer) is int and consumer in WIDE_CONSUMERS)
        return WIDE_BLOCK_Q if wide else BLOCK_Q

    @staticmethod
    def _default_consumer(producer, block_q) -> int:
        """block_q 128: dQ by key halves with stmatrix for dS^T (10). Otherwise, with the TMA producer,
        stmatrix for dS^T (2). H100, dK/dV kernel time over 10 shapes (docs/notes/attention_hopper.md):
        2 within 1% of 0 everywhere and up to 2% faster; 3 (FA3's wait placement too) 1-7% slower once
        the dQ sum was converted from shared memory (it had been ahead on causal shapes before, hiding
        the conversion's latency). H200: 10 at block_q 64 within -4% to +1% of 2 (6 D64 shapes)."""
        if block_q == WIDE_BLOCK_Q:
            return WIDE_CONSUMERS[1]
        return 2 if producer == "tma" else 0

    @staticmethod
    def _default_producer(p, tiles) -> str:
        """TMA wherever it can serve the call (measured on H100 1.13-1.46x the cp.async producer over 7
        shapes, MHA and GQA, D64 and D128: docs/notes/attention_hopper.md); cp.async for varlen batches,
        inputs not 16-byte aligned, and the roles TMA does not run (dq_warp=0, load_warps other than 1)."""
        runs_its_roles = all(type(tiles.get(name, 1)) is int and tiles.get(name, 1) == 1
                             for name in ("dq_warp", "load_warps"))
        return "tma" if tma_serves(p) and runs_its_roles else "cpasync"

    @staticmethod
    def _tma_roles(where, p, tiles) -> tuple:
        """(dq_warp, load_warps) of dkdv_producer="tma": warp 0 loads, warp 3 adds dQ; the inputs it
        cannot serve refused, naming the producer that can."""
        if p["varlen"]:
            _err(f"{where}: dkdv_producer='tma' with cu_seqlens: TMA streams dense (batch, head) views of q and "
                 "grad_out and the packed rows past a sequence belong to the next one; use dkdv_producer='cpasync' "
                 "for varlen batches")
        align = p.get("align", 16)
        if align % TMA_ALIGN:
            _err(f"{where}: dkdv_producer='tma' needs q, k, v and grad_out base pointers and strides aligned to "
                 f"{TMA_ALIGN} bytes (these are aligned to {align}); pass contiguous arrays or use "
                 "dkdv_producer='cpasync'")
        for name, value in (("dq_warp", 1), ("load_warps", 1)):
            if name in tiles and (isinstance(tiles[name], bool) or tiles[name] != value):
                _err(f"{where}: {name}={tiles[name]!r} with dkdv_producer='tma'; valid choices: {value} (one thread "
                     "of warp 0 issues the loads, warp 3 adds dQ)")
        return 1, 1

    def smem_bytes(self, cfg) -> int:
        """1 KiB alignment slack, the ring (Q and dO a stage), K and V (128 keys), two dS^T tiles (128 x
        block_q), two fp32 dQ buffers (block_q x head_dim), a stage's LSE, Delta and first row, barriers (a
        stage's two, each dQ buffer's two, the dQ sum's load). block_q 128: one dS^T tile."""
        d, blk, stages = cfg["head_dim"], cfg["block"], cfg["stages"]
        ds_bufs = 1 if blk == WIDE_BLOCK_Q else 2
        return (1024 + stages * 2 * blk * d * 2 + 2 * BLOCK_KV * d * 2 + ds_bufs * BLOCK_KV * blk * 2 + 2 * blk * d * 4
                + stages * (2 * blk * 4 + 8) + (2 * stages + 5) * 8)

    def kernel_type(self, cfg) -> str:
        b = lambda v: "true" if v else "false"  # noqa: E731
        return (f"attention_bwd_dkdv_hopper<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, {int(cfg['block'])}, "
                f"{int(cfg['consumers'])}, {int(cfg['stages'])}, {b(cfg['causal'])}, {b(cfg['varlen'])}, "
                f"{int(cfg['vec'])}, {b(cfg['dq_warp'])}, {int(cfg['load_warps'])}, {b(cfg['producer'] == 'tma')}"
                # consumer 0 named by omission: the cp.async kernels' types (and cubins) stay as before
                + (f", {int(cfg['consumer'])}>" if cfg["consumer"] else ">"))

    def threads(self, cfg) -> int:
        return (cfg["consumers"] + 1) * 128

    def checks(self, cfg) -> tuple:
        """Formulas kept on both sides: the C++ type static_asserts these equal Python's."""
        return (("CONSUMER_REGS", consumer_regs(cfg["consumers"], cfg["producer"])),
                ("PRODUCER_REGS", PRODUCER_REGS[cfg["producer"]]), ("LOADERS", 32 * cfg["load_warps"]))

    def args_type(self, cfg) -> type:
        """The ctypes mirror of the kernel's args (attention_backward.py's plan asks for it)."""
        return WorkspaceTmaArgs if cfg["producer"] == "tma" else WorkspaceArgs

    def launch_grid(self, cfg, p) -> tuple:
        return (math.ceil(p["n_k"] / cfg["rows"]), p["kv_heads"], p["batch"])

    @staticmethod
    def q_blocks(p, block_q=BLOCK_Q) -> int:
        return math.ceil(p["n_q"] / block_q)

    def workspace(self, cfg, p) -> tuple:
        """(workspace bytes, of them zeroed, scratch bytes): the semaphores (all zeroed) and the dQ
        accumulators."""
        slots = p["batch"] * p["heads"] * self.q_blocks(p, cfg["block"])
        sems = (slots * 4 + 255) // 256 * 256
        return sems, sems, slots * cfg["block"] * cfg["head_dim"] * 4

    def fill(self, cfg, encode=encode_tensor_map, **arguments) -> ctypes.Structure:
        _check_pointers(cfg, arguments, ("q", "k", "v", "do"), ("dq", "dk", "dv"))
        for name, what in (("workspace", "semaphores (its workspace)"), ("scratch", "dQ accumulators (its scratch)")):
            if not arguments.get(name):
                _err(f"attention backward: the sm_90a dkdv kernel needs its {what}")
        fields = (pack_backward(**arguments), int(arguments["workspace"]), int(arguments["scratch"]),
                  self.q_blocks(arguments, cfg["block"]), 0)
        if cfg["producer"] != "tma":
            return WorkspaceArgs(*fields)
        g = WorkspaceTmaArgs(**{f[0]: x for f, x in zip(WorkspaceArgs._fields_, fields)})
        for name, ptr, field in (("q", arguments["q"], "q_map"), ("grad_out", arguments["d_o"], "do_map")):
            key = "do" if name == "grad_out" else name
            dims, strides, box = map_shape("attention backward: dkdv_producer='tma'", "dkdv_producer='cpasync'", name,
                                           ptr, arguments[f"{key}_strides"], cfg["head_dim"], arguments["n_q"],
                                           arguments["heads"], arguments["batch"], cfg["block"])
            put_map(g, field, encode(cfg["dtype"], ptr, dims, strides, box))
        return g


DQ = Prep()
DKDV = Main()
