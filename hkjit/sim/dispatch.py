"""Which function compiles an instruction: one table from mnemonic to compiler, built once at
import from the mnemonics of the opcode tables and the ones each module says it handles.
Machine.compile looks a decoded instruction up in it; nothing else reasons about names."""

from . import buffer, control, mfma, salu, salu_extra, valu, valu_extra, vmem, vop3p, vopc, vspecial
from .decode import OPCODES

MODULES = (control, salu, salu_extra, valu, vopc, vspecial, vop3p, mfma, vmem, buffer)
assert valu_extra   # its element-wise ops join valu.T before valu.compilers runs


def _build():
    names = sorted({n for table in OPCODES.values() for fam in table.values() for n in fam.values()})
    out = {}
    for module in MODULES:
        for name, fn in module.compilers(names).items():
            if name in out:
                raise AssertionError(f"{name} is claimed by {module.__name__} and another module")
            out[name] = fn
    return out


COMPILERS = _build()
