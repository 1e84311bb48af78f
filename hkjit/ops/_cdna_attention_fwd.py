"""The CDNA (gfx942, gfx950) half of the attention forward: kernel_sources/attention_fwd_cdna.hip.

Configuration (HipKittens' forward: 8 waves x 32 query rows, KV blocks of 64, two LDS stages):

| target | waves | query rows / block | block_kv | LDS (D128 / D64) | MFMA (S^T and O^T) |
|--------|-------|--------------------|----------|------------------|--------------------|
| gfx950 | 8     | 256                | 64       | 64 / 32 KiB      | 16x16x32           |
| gfx942 | 8     | 256                | 64       | 64 / 32 KiB      | 16x16x16           |

Overrides: `block_kv` (a multiple of 32), `waves` (4, or 8 for the ping-pong schedule). Rejected
before anything compiles, naming the limit: LDS beyond the target's (2 stages x (K + V) tiles),
tiles that do not split into whole direct-to-LDS loads of all waves, and the register estimate
above 256 per lane for 8 waves (two waves per SIMD).
"""

import math

from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..op import Config, check_tiles
from ._attention_args import ForwardArgs, pack_forward

SOURCE = "attention_fwd_cdna.hip"
TEMPLATE = "attention_fwd_cdna"
TILES = ("block_kv", "waves")
WAVE_ROWS = 32           # query rows per wave
REG_BUDGET = 256         # VGPR per lane keeping 8-wave blocks at 2 waves per SIMD
REG_OVERHEAD = 48        # addresses, softmax statistics, loop state (estimate)
_MAX_LOAD = {"gfx942": 4, "gfx950": 16}
_MFMA_K = {"gfx942": 16, "gfx950": 32}   # K of the 16x16xK MFMAs


def _err(msg):
    raise InvalidArgumentError(msg)


def lds_bytes(cfg) -> int:
    return 2 * 2 * cfg["block_kv"] * cfg["head_dim"] * 2


def est_regs(cfg) -> int:
    """VGPRs per lane: Q (32 x D, 16-bit) + O^T (D x 32, fp32) + K fragment + S^T (fp32) + overhead."""
    d, kv = cfg["head_dim"], cfg["block_kv"]
    return WAVE_ROWS * d // 128 + d * WAVE_ROWS // 64 + kv * d // 128 + kv * WAVE_ROWS // 64 + REG_OVERHEAD


def configure(target, p: dict, tiles: dict) -> Config:
    """Validated configuration for attention params `p` (see hkjit.ops.attention) on `target`."""
    where = f"attention ({target.arch})"
    check_tiles(where, tiles, TILES)
    if target.arch not in _MAX_LOAD:
        _err(f"{where}: the CDNA attention kernel supports gfx942 and gfx950")
    for name, v in tiles.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            _err(f"{where}: {name}={v!r}; tile overrides are ints >= 1")
    waves = tiles.get("waves", 8)
    block_kv = tiles.get("block_kv", 64)
    if waves not in (4, 8):
        _err(f"{where}: waves={waves}; valid choices: 4, 8 (8 runs the ping-pong schedule)")
    if block_kv % 32:
        _err(f"{where}: block_kv={block_kv}; it must be a multiple of 32 (the K of the P V MFMA on gfx950), "
             "e.g. 32, 64, 128")
    align = p.get("align", 16)
    load_bytes = 16 if _MAX_LOAD[target.arch] >= 16 and align % 16 == 0 else 4
    if align % 4:
        _err(f"{where}: q, k, v aligned to {align} bytes; direct-to-LDS loads need base pointers and row "
             "strides aligned to 4 bytes (an even number of elements)")
    cfg = Config(target=target.arch, dtype=p["dtype"], head_dim=p["head_dim"], block_kv=block_kv, waves=waves,
                 block_q=waves * WAVE_ROWS, causal=bool(p["causal"]), varlen=bool(p["varlen"]),
                 load_bytes=load_bytes, mfma_k=_MFMA_K[target.arch])
    tile = block_kv * p["head_dim"] * 2
    per_inst = waves * 64 * load_bytes
    if tile % per_inst:
        _err(f"{where}: a {block_kv} x {p['head_dim']} K/V tile ({tile} bytes) must split into whole direct-to-LDS "
             f"loads of {waves} waves x 64 lanes x {load_bytes} bytes = {per_inst} bytes; raise block_kv or "
             "use waves=4")
    lds = lds_bytes(cfg)
    if lds > target.smem_per_block:
        _err(f"{where}: LDS limit: 2 stages x (K + V) x block_kv x head_dim x 2 = {lds} bytes exceeds the "
             f"{target.smem_per_block}-byte LDS of {target.arch}; lower block_kv")
    regs = est_regs(cfg)
    if waves == 8 and regs > REG_BUDGET:
        _err(f"{where}: about {regs} registers per lane for block_kv={block_kv}, head_dim={p['head_dim']} exceed "
             f"{REG_BUDGET} (8 waves keep two per SIMD); lower block_kv or use waves=4")
    cfg["lds_bytes"] = lds
    return cfg


def template_params(cfg) -> dict:
    return {k: cfg[k] for k in ("dtype", "head_dim", "block_kv", "waves", "causal", "varlen", "load_bytes")}


def kernel_type(cfg) -> str:
    b = lambda v: "true" if v else "false"
    return (f"{TEMPLATE}<{DTYPES[cfg['dtype']].cpp}, {int(cfg['head_dim'])}, {int(cfg['block_kv'])}, "
            f"{int(cfg['waves'])}, {b(cfg['causal'])}, {b(cfg['varlen'])}, {int(cfg['load_bytes'])}>")


def threads(cfg) -> int:
    return cfg["waves"] * 64


def dynamic_smem(cfg) -> int:
    return 0   # static LDS (the code object's group_segment_fixed_size)


def checks(cfg) -> tuple:
    return (("lds_bytes", lds_bytes(cfg)),)


def launch_grid(cfg, p) -> tuple:
    return (math.ceil(p["n_q"] / cfg["block_q"]), p["heads"], p["batch"])


def workspace(cfg, p) -> tuple:
    return 0, 0


def mfma_per_kv_block(cfg) -> int:
    """MFMAs per wave per KV block by the tile arithmetic: S^T (block_kv x 32 x D) and O^T
    (D x 32 x block_kv), both at 16x16xK (K = 32 on gfx950, 16 on gfx942)."""
    d, kv = cfg["head_dim"], cfg["block_kv"]
    return 2 * kv * WAVE_ROWS * d // (256 * cfg["mfma_k"])


Args = ForwardArgs          # the argument block every forward kernel shares


def fill(cfg, *, k_strides, v_strides, **arguments) -> Args:
    for name, strides in (("k", k_strides), ("v", v_strides)):
        if int(strides[2]) * 2 * cfg["block_kv"] >= 2 ** 31:
            _err(f"attention: {name}'s row stride {strides[2]} is too large for 32-bit buffer offsets")
    return pack_forward(cfg["load_bytes"], cfg["varlen"], k_strides=k_strides, v_strides=v_strides, **arguments)
