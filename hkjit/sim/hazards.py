"""The hazards a launch finds, collected rather than stopping at the first: each distinct (rule,
instruction) once, with the first wave that hit it, its message and how often it happened.
The launch raises one SimHazardError listing them all when it ends, or as soon as the bounds
below are reached (a kernel that misbehaves everywhere need not run to its end to say so)."""

from dataclasses import dataclass

from .errors import SimHazardError

MAX_REPORTS = 32          # distinct (rule, instruction) pairs
MAX_OCCURRENCES = 4096    # hazards of any kind, counting repeats

RULES = {
    "missing-waitcnt": "a register loaded by memory is used before the s_waitcnt that covers the load",
    "lds-race": "waves of one workgroup touch the same LDS bytes with no s_barrier in between",
    "lds-dma-wait": "LDS written by a direct-to-LDS load is read before the s_waitcnt vmcnt covering it",
    "out-of-bounds": "a global access outside every live allocation",
    "lds-out-of-bounds": "an LDS access past the workgroup's static + dynamic LDS",
    "misaligned": "an atomic on an address not aligned to its size",
    "sgpr-index": "an SGPR-relative move past the SGPRs",
}


@dataclass
class Hazard:
    rule: str
    pc: int          # byte offset from the kernel's entry
    inst: str
    wave: str
    message: str
    count: int = 1

    def line(self):
        times = f" ({self.count} times)" if self.count > 1 else ""
        return f"[{self.rule}] at +{self.pc:#x} ({self.inst}) wave {self.wave}: {self.message}{times}"


class Hazards:
    def __init__(self, kernel):
        self.kernel = kernel
        self.found = {}
        self.total = 0

    def add(self, rule, pc, inst, wave, message):
        assert rule in RULES, rule
        self.total += 1
        h = self.found.get((rule, pc))
        if h is None:
            self.found[rule, pc] = Hazard(rule, pc, inst, wave, message)
        else:
            h.count += 1
        if len(self.found) >= MAX_REPORTS or self.total >= MAX_OCCURRENCES:
            raise self.error(stopped=True)

    def error(self, stopped=False):
        """The SimHazardError listing every hazard found (None if there was none)."""
        if not self.found:
            return None
        hz = list(self.found.values())
        first = hz[0]
        msg = f"[{first.rule}] {first.message}" + (f" ({first.count} times)" if first.count > 1 else "")
        if len(hz) > 1:
            msg += f"\nand {len(hz) - 1} more hazard{'s' if len(hz) > 2 else ''}:\n" + "\n".join(h.line() for h in hz[1:])
        if stopped:
            msg += f"\n(the launch was stopped after {self.total} hazards)"
        e = SimHazardError(msg, kernel=self.kernel, pc=first.pc, wave=first.wave, inst=first.inst)
        e.hazards = hz
        return e
