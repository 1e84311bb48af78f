"""The Hopper (sm_90a) half of the attention backward: kernel_sources/attention_bwd_hopper.cuh.

Two kernels (`DQ`, `DKDV`), each with the per-arch interface of hkjit/ops/gemm.py as an object,
each a producer warpgroup streaming blocks into a ring of shared stages and 2 consumer warpgroups
of 64 rows (queries for dq, keys for dkdv), all five products on wgmma:

| kernel | head_dim | streamed block      | stages | rows / block | shared memory |
|--------|----------|---------------------|--------|--------------|---------------|
| dq     | 64       | block_kv = 128 keys | 2      | 128 queries  | 97 KiB        |
| dq     | 128      | block_kv = 64 keys  | 2      | 128 queries  | 129 KiB       |
| dkdv   | 64       | block_q = 64 rows   | 2      | 128 keys     | 66 KiB        |
| dkdv   | 128      | block_q = 64 rows   | 2      | 128 keys     | 130 KiB       |

Overrides: `block_kv` / `block_q` (64 or 128) and `dq_stages` / `dkdv_stages` (2 to 4). Refused
before anything compiles, naming the limit: shared memory beyond the 227 KiB a block may use, and
dkdv with block_q 128 at head_dim 128 (dK, dV, S^T and dP^T alone would take 256 of a consumer
thread's 224 registers), and at head_dim 64 with causal masking or rows aligned to less than 8
bytes (those spill). Deterministic: no atomics; the GQA sum over query heads runs in one block, in order.
"""

import math

from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ..targets import parse as _parse_target
from ._attention_args import BackwardArgs, pack_backward

SOURCE = "attention_bwd_hopper.cuh"
SMEM_LIMIT = _parse_target("sm_90a").smem_per_block
CONSUMERS = 2
PRODUCER_REGS = 56       # attention_bwd_hopper.cuh: register_split<CONSUMERS, 56>
_BLOCKS = (64, 128)
_STAGES = (2, 3, 4)


def _err(msg):
    raise InvalidArgumentError(msg)


def consumer_regs(consumers: int) -> int:
    threads = (consumers + 1) * 128
    entry = 65536 // threads // 8 * 8
    return min(240, (entry * (consumers + 1) - PRODUCER_REGS) // consumers // 8 * 8)


class Kernel:
    """One backward kernel: `block` names its streamed block (block_kv for dq, block_q for dkdv),
    `stages` its ring depth keyword."""

    def __init__(self, name, template, block, stages, defaults):
        self.name, self.template, self.block, self.stages, self.defaults = name, template, block, stages, defaults
        self.TILES, self.SOURCE, self.Args = (block, stages), SOURCE, BackwardArgs

    def configure(self, target, p, tiles) -> Config:
        where = f"attention backward {self.name} ({target.arch})"
        check_tiles(where, tiles, self.TILES)
        if target.arch != "sm_90a":
            _err(f"{where}: the Hopper attention backward kernels support sm_90a only")
        d = p["head_dim"]
        blk, stages = self.defaults[d]
        blk, stages = tiles.get(self.block, blk), tiles.get(self.stages, stages)
        for name, v, choices in ((self.block, blk, _BLOCKS), (self.stages, stages, _STAGES)):
            if isinstance(v, bool) or v not in choices:
                _err(f"{where}: {name}={v!r}; valid choices: {', '.join(map(str, choices))}")
        align = p.get("align", 16)
        if self.name == "dkdv" and blk == 128 and (d == 128 or p["causal"] or align < 8):
            _err(f"{where}: block_q=128 does not fit the {consumer_regs(CONSUMERS)} registers a consumer thread has "
                 f"at head_dim {d}{', causal' if p['causal'] else ''}, {align}-byte aligned rows (dK, dV, S^T and dP^T "
                 f"take {d + 128} of them; only head_dim 64 without causal masking and with 8-byte aligned rows "
                 "compiles without spills); use block_q=64")
        if align % 4:
            _err(f"{where}: arrays aligned to {align} bytes; base pointers and row strides must be aligned to 4 "
                 "bytes (an even number of elements)")
        cfg = Config(target=target.arch, kernel=self.name, dtype=p["dtype"], head_dim=d, block=blk,
                     consumers=CONSUMERS, stages=stages, causal=bool(p["causal"]), varlen=bool(p["varlen"]),
                     vec=min(align, 16) // 2)
        cfg["rows"] = 64 * CONSUMERS
        smem = self.smem_bytes(cfg)
        if smem > SMEM_LIMIT:
            _err(f"{where}: shared memory: {stages} stages x 2 tiles x {self.block}={blk} x head_dim={d} plus the "
                 f"consumers' tiles = {smem} bytes exceeds the {SMEM_LIMIT} bytes a block may use; lower "
                 f"{self.stages} or {self.block}")
        return cfg

    def smem_bytes(self, cfg) -> int:
        """1 KiB alignment slack, the ring (two blocks x head_dim a stage), the consumers' two resident
        64-row tiles, then dq: each consumer's 64 Delta values; dkdv: a stage's LSE and Delta rows and its
        first row (8 bytes); barriers."""
        d, blk, stages, cons = cfg["head_dim"], cfg["block"], cfg["stages"], cfg["consumers"]
        extra = cons * 64 * 4 if self.name == "dq" else stages * (2 * blk * 4 + 8)
        return 1024 + stages * 2 * blk * d * 2 + cons * 2 * 64 * d * 2 + extra + 2 * stages * 8

    def template_params(self, cfg) -> dict:
        return {k: cfg[k] for k in ("kernel", "dtype", "head_dim", "block", "consumers", "stages", "causal", "varlen",
                                    "vec")}

    def kernel_type(self, cfg) -> str:
        b = lambda v: "true" if v else "false"  # noqa: E731
        return (f"{self.template}<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, {int(cfg['block'])}, "
                f"{int(cfg['consumers'])}, {int(cfg['stages'])}, {b(cfg['causal'])}, {b(cfg['varlen'])}, "
                f"{int(cfg['vec'])}>")

    def threads(self, cfg) -> int:
        return (cfg["consumers"] + 1) * 128

    def dynamic_smem(self, cfg) -> int:
        return self.smem_bytes(cfg)

    def checks(self, cfg) -> tuple:
        """Formulas kept on both sides: the C++ type static_asserts these equal Python's."""
        return (("CONSUMER_REGS", consumer_regs(cfg["consumers"])),)

    def launch_grid(self, cfg, p) -> tuple:
        if self.name == "dq":
            return (math.ceil(p["n_q"] / cfg["rows"]), p["heads"], p["batch"])
        return (math.ceil(p["n_k"] / cfg["rows"]), p["kv_heads"], p["batch"])

    def workspace(self, cfg, p) -> tuple:
        return 0, 0

    def fill(self, cfg, **arguments) -> BackwardArgs:
        lb = cfg["vec"] * 2
        read = ("q", "k", "v", "do") + (("o",) if self.name == "dq" else ())
        written = ("dq",) if self.name == "dq" else ("dk", "dv")
        ptrs = dict(arguments, do=arguments["d_o"])
        for name in read:
            if int(ptrs[name]) % lb or int(arguments[f"{name}_strides"][2]) * 2 % lb:
                _err(f"attention backward: {name}'s base pointer or row stride is not aligned to the {lb}-byte loads "
                     "this kernel was built for")
        for name in written:
            if int(ptrs[name]) % 4 or int(arguments[f"{name}_strides"][2]) % 2:
                _err(f"attention backward: {name}'s base pointer or row stride "
                     f"({arguments[f'{name}_strides'][2]} elements) is not 4-byte aligned; pass a contiguous {name}")
        if cfg["varlen"] and not (arguments["cu_seqlens_q"] and arguments["cu_seqlens_k"]):
            _err("attention backward: a varlen kernel needs cu_seqlens_q and cu_seqlens_k")
        return pack_backward(**arguments)


DQ = Kernel("dq", "attention_bwd_dq_hopper", "block_kv", "dq_stages", {64: (128, 2), 128: (64, 2)})
DKDV = Kernel("dkdv", "attention_bwd_dkdv_hopper", "block_q", "dkdv_stages", {64: (64, 2), 128: (64, 2)})
