"""Errors of the simulator. Each carries the kernel, the instruction address (byte offset from the
kernel's entry), the wave (global wave number, workgroup and wave within it) and the instruction
text where known."""

from ..errors import LaunchError


class SimError(LaunchError):
    """A kernel failed on the simulator (bad code object, bad launch, bad memory access)."""

    def __init__(self, message, *, kernel=None, pc=None, wave=None, inst=None):
        self.kernel, self.pc, self.wave, self.inst = kernel, pc, wave, inst
        where = []
        if kernel is not None:
            where.append(f"kernel {kernel}")
        if pc is not None:
            where.append(f"at +{pc:#x}")
        if inst is not None:
            where.append(f"({inst})")
        if wave is not None:
            where.append(f"wave {wave}")
        self.message = message
        super().__init__(("sim: " + " ".join(where) + ": " if where else "sim: ") + message)


class SimHazardError(SimError):
    """Something real hardware would turn into a wrong answer: a register or LDS value read before
    the s_waitcnt covering its load, LDS shared between waves without an s_barrier, an access out
    of bounds."""


class SimUnsupportedInstruction(SimError):
    """The kernel uses an instruction (or an encoding variant) the simulator does not implement."""
