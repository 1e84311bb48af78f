"""Tensor maps of the sm_90a attention kernels' TMA producers (attention_fwd_hopper.cuh streams K and V,
attention_bwd_hopper.cuh streams Q and dO): one 4D map per operand over (D, rows, heads, batch) with
the caller's (row, head, batch) strides, 128-byte swizzle (the layout wgmma reads), box = one
64-column swizzle chunk of a stage tile, zeros out of bounds (rows past the sequence)."""

import ctypes
import functools

from ..errors import InvalidArgumentError

TMA_ALIGN = 16                             # bytes: TMA's base address and stride granule


class TensorMap(ctypes.Structure):
    _fields_ = [("v", ctypes.c_ulonglong * 16)]      # CUtensorMap: 128 bytes, 64-byte aligned in C++


@functools.lru_cache(maxsize=256)
def _encode_cached(data_type, ptr, dims, strides, box):
    from ..runtime import cuda
    return cuda.encode_tensor_map(data_type, ptr, dims, strides, box, 3)    # 3: 128-byte swizzle


def encode_tensor_map(dtype: str, ptr: int, dims: tuple, strides_bytes: tuple, box: tuple) -> bytes:
    """The 128-byte CUtensorMap of a 4D view (innermost first), 128-byte swizzle, zeros out of bounds."""
    from ..runtime import cuda
    return _encode_cached(cuda.TMAP_BFLOAT16 if dtype == "bfloat16" else cuda.TMAP_FLOAT16, int(ptr),
                          tuple(dims), tuple(strides_bytes), tuple(box))


def tma_serves(p: dict) -> bool:
    """Whether a TMA producer can serve a call of attention params `p`: dense batches (packed varlen
    rows past a sequence belong to the next one) with q, k, v (and grad_out) pointers and strides
    aligned to TMA_ALIGN. Where it cannot, the kernels' default producer is cp.async."""
    return not p["varlen"] and p.get("align", 16) % TMA_ALIGN == 0


def map_shape(who: str, instead: str, name: str, ptr: int, strides, head_dim: int, rows: int, heads: int,
              batch: int, box_rows: int) -> tuple:
    """(dims, byte strides, box) of `name`'s map: (head_dim, rows, heads, batch) with the caller's
    (batch, head, row) element strides `strides`, box (64, box_rows, 1, 1). An extent of 1 takes a
    stand-in stride (never used to address); TMA needs every stride used and the base to be a
    nonzero multiple of 16 bytes, refused otherwise as "`who` needs ... or use `instead`"."""
    sb, sh, sr = (int(x) for x in strides)
    sr = sr if rows > 1 else head_dim
    sh = sh if heads > 1 else sr * rows
    sb = sb if batch > 1 else sh * heads
    for what, st in (("row", sr), ("head", sh), ("batch", sb)):
        if st <= 0 or st * 2 % TMA_ALIGN or int(ptr) % TMA_ALIGN:
            raise InvalidArgumentError(
                f"{who} needs {name}'s base pointer and {what} stride ({st} elements) to be nonzero multiples of "
                f"{TMA_ALIGN} bytes; pass {name}.contiguous() or use {instead}")
    return (head_dim, rows, heads, batch), (sr * 2, sh * 2, sb * 2), (64, box_rows, 1, 1)


def put_map(block: ctypes.Structure, field: str, raw: bytes) -> None:
    """Copy an encoded map into the argument block's TensorMap field `field`."""
    ctypes.memmove(ctypes.addressof(block) + getattr(type(block), field).offset, raw, 128)
