"""The CDNA (gfx942, gfx950) half of the attention backward: kernel_sources/attention_bwd_cdna.hip.

Two kernels, each with the per-arch interface of hkjit/ops/gemm.py as an object (`DQ`, `DKDV`):

- dq: 4 waves x 32 queries of one head (also writes Delta); streams KV blocks of `block_kv` keys
  through LDS (64 by default: 64 KiB at D128; 32 at D128 on gfx942, whose LDS is 64 KiB).
- dkdv: 8 waves, 4 pairs x 32 keys of one KV head (in a pair, one wave computes P and dV, the
  other dS and dK); streams query blocks of `block_q` (32) of every query head of the group
  through LDS (32 KiB at D128, plus 16 KiB for the P hand-over).

Deterministic: no atomics; the GQA sum over query heads runs inside one workgroup, in order.
"""

import math

from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ._attention_args import BackwardArgs, pack_backward

SOURCE = "attention_bwd_cdna.hip"
ROWS = 32                  # rows of the resident operand per wave (pair, for dkdv): queries for dq, keys for dkdv
GROUPS = 4                 # groups of ROWS rows per workgroup: waves (dq) or wave pairs (dkdv)
_MAX_LOAD = {"gfx942": 4, "gfx950": 16}


def _err(msg):
    raise InvalidArgumentError(msg)


Args = BackwardArgs          # hkjit_attn::bwd_args, shared with the sm_90a backward


class Kernel:
    """One backward kernel: `block` names the streamed block (block_kv for dq, block_q for dkdv)."""

    def __init__(self, name, template, block, default_block, waves, entry):
        self.name, self.template, self.block, self.default_block = name, template, block, default_block
        self.waves = waves           # per workgroup: GROUPS for dq, 2 GROUPS (pairs) for dkdv
        self.TILES, self.SOURCE, self.ENTRY, self.Args = (block,), SOURCE, entry, Args

    def configure(self, target, p, tiles) -> Config:
        where = f"attention backward {self.name} ({target.arch})"
        check_tiles(where, tiles, self.TILES)
        if target.arch not in _MAX_LOAD:
            _err(f"{where}: the CDNA attention kernels support gfx942 and gfx950")
        blk = tiles.get(self.block, self.default_block(target.arch, p["head_dim"]))
        if isinstance(blk, bool) or not isinstance(blk, int) or blk < 32 or blk % 32:
            _err(f"{where}: {self.block}={blk!r}; it must be a multiple of 32, e.g. 32, 64")
        align = p.get("align", 16)
        if align % 4:
            _err(f"{where}: arrays aligned to {align} bytes; direct-to-LDS loads need 4-byte aligned rows")
        load = 16 if _MAX_LOAD[target.arch] >= 16 and align % 16 == 0 else 4
        cfg = Config(target=target.arch, kernel=self.name, dtype=p["dtype"], head_dim=p["head_dim"], block=blk,
                     waves=self.waves, rows=GROUPS * ROWS, causal=bool(p["causal"]), varlen=bool(p["varlen"]),
                     load_bytes=load)
        tile = blk * p["head_dim"] * 2
        if tile % (GROUPS * 64 * load):   # each tile is loaded by GROUPS waves
            _err(f"{where}: a {blk} x {p['head_dim']} tile must split into whole direct-to-LDS loads of "
                 f"{GROUPS * 64 * load} bytes; raise {self.block}")
        if self.lds(cfg) > target.smem_per_block:
            _err(f"{where}: LDS limit: {self.lds(cfg)} bytes for {self.block}={blk} exceed the "
                 f"{target.smem_per_block}-byte LDS of {target.arch}; lower {self.block}")
        cfg["lds_bytes"] = self.lds(cfg)
        return cfg

    @staticmethod
    def lds(cfg) -> int:
        """Two stages of two tiles (K, V or Q, dO); dkdv adds each pair's fp32 P hand-over (block x 32)."""
        tiles = 2 * 2 * cfg["block"] * cfg["head_dim"] * 2
        return tiles + (GROUPS * cfg["block"] * ROWS * 4 if cfg["kernel"] == "dkdv" else 0)

    def template_params(self, cfg) -> dict:
        return {k: cfg[k] for k in ("kernel", "dtype", "head_dim", "block", "causal", "varlen", "load_bytes")}

    def kernel_type(self, cfg) -> str:
        b = lambda v: "true" if v else "false"
        return (f"{self.template}<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, {int(cfg['block'])}, "
                f"{int(cfg['waves'])}, "
                f"{b(cfg['causal'])}, {b(cfg['varlen'])}, {int(cfg['load_bytes'])}>")

    def threads(self, cfg) -> int:
        return cfg["waves"] * 64

    def dynamic_smem(self, cfg) -> int:
        return 0

    def checks(self, cfg) -> tuple:
        return (("lds_bytes", self.lds(cfg)),)

    def launch_grid(self, cfg, p) -> tuple:
        if self.name == "dq":
            return (math.ceil(p["n_q"] / cfg["rows"]), p["heads"], p["batch"])
        return (math.ceil(p["n_k"] / cfg["rows"]), p["kv_heads"], p["batch"])

    def workspace(self, cfg, p) -> tuple:
        return 0, 0

    def mfma_per_step(self, cfg) -> int:
        """MFMAs per wave per streamed block by the tile arithmetic, all at 16x16xK (K = 32 on gfx950,
        16 on gfx942), each product block x 32 x head_dim: dq: S^T, dP^T, dQ^T; dkdv: two of the four
        (S and dV^T in the P wave, dP and dK^T in the dS wave)."""
        one = cfg["block"] * ROWS * cfg["head_dim"] // (256 * (32 if cfg["target"] == "gfx950" else 16))
        return (3 if self.name == "dq" else 2) * one

    def fill(self, cfg, *, q, k, v, o, d_o, lse, delta, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, heads,
             kv_heads, n_q, n_k, scale, workspace=0, scratch=0, **strides) -> Args:
        lb = cfg["load_bytes"]
        for name in ("q", "k", "v", "o", "do"):
            ptr = {"q": q, "k": k, "v": v, "o": o, "do": d_o}[name]
            if int(ptr) % lb or int(strides[f"{name}_strides"][2]) * 2 % lb:
                _err(f"attention backward: {name}'s base pointer or row stride is not aligned to the {lb}-byte "
                     "loads this kernel was built for")
        tiled = ("k", "v") if self.name == "dq" else ("q", "do")   # read by direct-to-LDS loads
        for name in tiled:
            if int(strides[f"{name}_strides"][2]) * 2 * cfg["block"] >= 2 ** 31:
                _err(f"attention backward: {name}'s row stride {strides[f'{name}_strides'][2]} is too large for "
                     "32-bit buffer offsets over a tile")
        for name in ("lse", "delta"):
            if int(strides[f"{name}_strides"][2]) != 1:
                _err(f"attention backward: {name}'s rows must be contiguous (row stride 1, got "
                     f"{strides[f'{name}_strides'][2]}); pass {name}.contiguous()")
        return pack_backward(q=q, k=k, v=v, o=o, d_o=d_o, lse=lse, delta=delta, dq=dq, dk=dk, dv=dv,
                             cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, batch=batch, heads=heads,
                             kv_heads=kv_heads, n_q=n_q, n_k=n_k, scale=scale, **strides)


def _dq_block(arch, head_dim):
    """KV block of the dQ kernel: 64, but 32 at D128 on gfx942, where a 64-key block takes all 64 KiB
    of LDS and 307 registers + 51 AGPRs (one wave per SIMD); 32 keys: 32 KiB and 248 (two)."""
    return 32 if arch == "gfx942" and head_dim == 128 else 64


DQ = Kernel("dq", "attention_bwd_dq_cdna", "block_kv", _dq_block, GROUPS, "hkjit_attention_bwd_dq")
DKDV = Kernel("dkdv", "attention_bwd_dkdv_cdna", "block_q", lambda arch, head_dim: 32, 2 * GROUPS,
              "hkjit_attention_bwd_dkdv")
