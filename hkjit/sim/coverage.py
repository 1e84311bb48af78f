"""What the simulator does not simulate: the named, documented list every instruction of the
opcode tables is checked against (tests/sim/test_sim_conformance.py compiles every encoding
llvm-mc-22 assembles: it either compiles, or stops with one of these reasons).

NOT_SIMULATED: whole instructions, by mnemonic pattern, with the reason.
LIMITS: forms or operand values of otherwise simulated instructions.
docs/notes/simulator.md lists both."""

import fnmatch
import functools

NOT_SIMULATED = {
    "private (scratch) memory: kernels with a private segment are refused at launch":
        ("scratch_*", "s_scratch_*"),
    "scalar memory stores and atomics":
        ("s_store_*", "s_buffer_store_*", "s_atomic_*", "s_buffer_atomic_*"),
    "typed buffer accesses (the format conversions of MTBUF and buffer_*_format_*)":
        ("tbuffer_*", "buffer_load_format_*", "buffer_store_format_*"),
    "the global data share and global wave sync (GDS, GWS, ds_append, ds_consume)":
        ("ds_gws_*", "ds_append", "ds_consume"),
    "LDS instructions no compiler emits for these targets":
        ("ds_wrap_rtn_b32", "ds_condxchg32_rtn_b64", "ds_wrxchg2*", "ds_read_addtid_b32", "ds_write_addtid_b32"),
    "transposing LDS reads of 8-, 6- and 4-bit elements":
        ("ds_read_b64_tr_b8", "ds_read_b64_tr_b4", "ds_read_b96_tr_b6"),
    "VGPR indexing mode":
        ("s_set_gpr_idx_*",),
    "debugger branches, trap return, fork/join and kill":
        ("s_cbranch_cdbg*", "s_rfe_*", "s_cbranch_g_fork", "s_cbranch_i_fork", "s_cbranch_join", "s_setkill",
         "s_setvskip", "s_endpgm_ordered_ps_done"),
    "graphics and video instructions":
        ("v_cube*", "v_screen_partition_4se_b32", "v_qsad_pk_u16_u8", "v_mqsad_*", "v_msad_u8",
         "v_cvt_pkaccum_u8_f32"),
    "legacy (GFX8) f16 and 16-bit multiply-add forms":
        ("v_mad_legacy_f16", "v_fma_legacy_f16", "v_div_fixup_legacy_f16", "v_mad_legacy_u16", "v_mad_legacy_i16"),
    "the f64 trigonometric range reduction helper":
        ("v_trig_preop_f64",),
    "stochastic rounding and the hardware random number generator":
        ("v_cvt_sr_*", "v_prng_b32"),
    "CDNA4's scaled conversions (fp8/fp6/fp4 with an E8M0 scale)":
        ("v_cvt_scalef32_*",),
    "CDNA4's packed 8-bit shifts with saturation":
        ("v_ashr_pk_*",),
    "sparse MFMAs, multi-block MFMAs (_2b, _4b, _16b), f64 and xf32 MFMAs":
        ("v_smfmac_*", "v_mfma_*_2b_*", "v_mfma_*_4b_*", "v_mfma_*_16b_*", "v_mfma_f64_*", "v_mfma_*_xf32"),
}

LIMITS = {
    "mfma-broadcast": "MFMA broadcast controls (cbsz/abid/blgp)",
    "mfma-fp6-fp4": "f8f6f4 MFMAs with fp6/fp4 operands (only fp8/bf8)",
    "mfma-operand": "MFMA A/B operands that are not registers",
    "integer-clamp": "integer clamp (saturation)",
    "packed-clamp": "clamp on packing conversions",
    "dpp-sdwa": "DPP and SDWA forms of VALU instructions that are not element-wise (carries, v_cndmask, lane moves)",
    "dpp-compare": "DPP forms of compares",
    "dpp-control": "DPP controls other than quad_perm, row shifts and rotates, wave shifts and rotates, mirrors and broadcasts",
    "gds": "GDS (the gds bit of DS instructions)",
    "lds-dma-size": "direct-to-LDS loads of this size on this target",
    "scalar-operand": "scalar operands other than SGPRs, VCC, EXEC, M0, SCC, apertures and constants",
    "vector-operand": "vector sources other than registers, constants, literals, apertures and status bits",
}


def limit(key):
    """The message of a refused form: '<what> is not simulated'."""
    return f"{LIMITS[key]} is not simulated"


@functools.lru_cache(maxsize=None)
def why_not(name):
    """The reason an instruction is not simulated, or None."""
    for reason, patterns in NOT_SIMULATED.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return reason
    return None
