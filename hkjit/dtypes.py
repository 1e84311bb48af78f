"""The dtypes hkjit knows, by one canonical name each, and their C++ spelling in include/hk.
Only names from this table ever reach generated source."""

from __future__ import annotations

from .errors import DTypeError
from .values import Frozen


class DType(Frozen):
    __slots__ = ("name", "itemsize", "cpp", "dlpack", "numpy")

    def __init__(self, name: str, itemsize: int, cpp: str, dlpack: tuple, numpy: str | None):
        # name: canonical ("bfloat16"); itemsize: bytes; cpp: the type in include/hk ("hk::bf16");
        # dlpack: (DLDataTypeCode, bits); numpy: numpy's dtype string, None where numpy has no such type
        self._set(name=name, itemsize=itemsize, cpp=cpp, dlpack=dlpack, numpy=numpy)


# DLPack type codes: 0 int, 1 uint, 2 float, 4 bfloat.
DTYPES = {d.name: d for d in (
    DType("bfloat16", 2, "hk::bf16", (4, 16), None),
    DType("float16", 2, "hk::half", (2, 16), "float16"),
    DType("float32", 4, "float", (2, 32), "float32"),
    DType("float64", 8, "double", (2, 64), "float64"),
    DType("int32", 4, "int", (0, 32), "int32"),
    DType("int64", 8, "long long", (0, 64), "int64"),
    DType("uint8", 1, "unsigned char", (1, 8), "uint8"),
    DType("int8", 1, "signed char", (0, 8), "int8"),
)}
# The dtype groups ops accept, named once: matrix units take 16-bit floats; results and epilogues
# are written as 16- or 32-bit floats.
MMA_INPUTS = ("bfloat16", "float16")
FLOAT_OUTPUTS = ("bfloat16", "float16", "float32")
_BY_DLPACK = {d.dlpack: d for d in DTYPES.values()}
_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16",
            "fp32": "float32", "float": "float32", "f32": "float32", "fp64": "float64"}


def dtype(value) -> DType:
    """Canonical DType for a name, a DType, or a torch/numpy/cupy/jax dtype object."""
    if isinstance(value, DType):
        return value
    name = str(value)
    for prefix in ("torch.", "dtype(", "<class 'numpy.", "jnp."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = name.strip("')>\"")
    name = _ALIASES.get(name, name)
    if name in DTYPES:
        return DTYPES[name]
    raise DTypeError(f"unknown dtype {value!r}; hkjit knows {', '.join(DTYPES)}")


def from_dlpack_code(code: int, bits: int, lanes: int = 1) -> DType:
    d = _BY_DLPACK.get((code, bits))
    if d is None or lanes != 1:
        raise DTypeError(f"DLPack dtype (code={code}, bits={bits}, lanes={lanes}) is not supported; "
                         f"hkjit knows {', '.join(DTYPES)}")
    return d
