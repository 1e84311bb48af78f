"""hkjit's functional simulator of the CDNA3 (gfx942) and CDNA4 (gfx950) instruction sets.

    dev = SimDevice("gfx950")            # or hkjit.sim.device("sim:gfx950")
    k = dev.load(code_object_bytes, "kernel_name")
    k.launch(grid, block, dynamic_smem, args_bytes)

See docs/notes/simulator.md."""

from .backend import SimBuffer, SimDevice, SimKernel, device
from .errors import SimError, SimHazardError, SimUnsupportedInstruction

__all__ = ["SimDevice", "SimKernel", "SimBuffer", "device", "SimError", "SimHazardError",
           "SimUnsupportedInstruction"]
