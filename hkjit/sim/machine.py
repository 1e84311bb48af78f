"""The executor of one kernel: compiles basic blocks of decoded instructions into closures, runs
groups of lock-stepped waves over the whole grid, keeps LDS per workgroup and checks hazards."""

import struct
import time

import numpy as np

from .. import targets
from . import coverage
from .dispatch import COMPILERS
from .decode import decode
from .errors import SimError, SimHazardError, SimUnsupportedInstruction
from .hazards import Hazards
from .lds import Lds
from .operands import Ops, PRIVATE_APERTURE_HI, SHARED_APERTURE_HI
from .state import EXEC, SGPR_KEY, Group, pack_mask

U32, I32, I64, U64 = np.uint32, np.int32, np.int64, np.uint64
V_BUDGET = 256 << 20     # bytes of register state per batch of workgroups



def _rup(x, k):
    return (x + k - 1) // k * k


class Machine:
    def __init__(self, kernel, arch, mem, checks=True):
        self.kernel, self.name, self.arch, self.mem = kernel, kernel.name, arch, mem
        self.checks = checks
        meta = kernel.meta
        kd = kernel.descriptor
        if kd.wave32:
            raise SimError("wave32 kernels are not simulated (CDNA is wave64)", kernel=self.name)
        self.nva = max(8, _rup(int(meta.get(".vgpr_count", 256)), 8))
        self.nacc = _rup(int(meta.get(".agpr_count", 0)), 4)
        self.code = kernel.code
        self.entry_pc = kernel.entry_addr - kernel.text_addr
        self.entry_addr = kernel.text_addr        # pc 0 is the start of .text
        self.blocks = {}
        self.winst = 0                            # wave-instructions executed
        self.lds_size = 0
        self.lds = None                           # the LDS of the batch being run (lds.Lds)
        self.hazards = Hazards(self.name)

    # ------------------------------------------------------------ errors
    def pcrel(self, addr):
        return addr - self.entry_pc

    def wave_desc(self, g, i=0):
        w = int(g.wave[i])
        return f"{w} (workgroup {self.wg_ids[int(g.wgi[i])]}, wave {w % self.wpg} in it)" + (
            f" and {g.n - 1} more in lock-step" if g.n > 1 else "")

    def reporter(self, inst):
        """report(g, rule, message, i=0): record a hazard of this instruction, hit by wave g.wave[i]."""
        pc, text = self.pcrel(inst.addr), inst.text()

        def report(g, rule, msg, i=0):
            self.hazards.add(rule, pc, text, self.wave_desc(g, i), msg)
        return report

    def clock(self):
        return int(time.perf_counter() * 1e8)

    # ------------------------------------------------------------ compile
    def compile(self, inst):
        """-> (fn, check_keys, is_terminator): the instruction compiled once into a closure over
        its operands, by the compiler the dispatch table holds for its mnemonic."""
        o = Ops(self, inst)
        name = inst.name
        reason = coverage.why_not(name)
        if reason:
            raise o.err(f"{name} is not simulated: {reason}")
        compiler = COMPILERS.get(name)
        out = compiler(o, inst, self) if compiler else None
        if out is None:
            raise o.err(f"instruction {name} ({inst.fam}{', ' + inst.sub if inst.sub else ''}) is not simulated")
        fn, terminator = out if isinstance(out, tuple) else (out, False)
        memop = inst.fam in ("GLOBAL", "FLAT", "SCRATCH", "MUBUF", "DS", "SMEM")
        keys = frozenset(o.rk) if memop else frozenset(o.rk | o.wk)
        return fn, keys, terminator

    def _block(self, pc):
        items = []
        term = None
        p = pc
        while True:
            try:
                inst = decode(self.code, p, self.arch, self.name)
                fn, keys, is_term = self.compile(inst)
            except SimUnsupportedInstruction as e:
                def raiser(g, e=e, p=p):
                    raise SimUnsupportedInstruction(e.message, kernel=self.name, pc=self.pcrel(p), inst=e.inst,
                                                    wave=self.wave_desc(g))
                items.append((raiser, frozenset(), None))
                term = (lambda g: None, None)
                break
            if is_term:
                term = (fn, inst)
                break
            items.append((fn, keys, inst))
            p += inst.size
        blk = (tuple(items), term[0], term[1], p)
        self.blocks[pc] = blk
        return blk

    # ------------------------------------------------------------ running groups
    def _hazard_regs(self, g, keys, inst):
        bad = sorted(keys & g.pend)
        k = bad[0]
        src = None
        for q, cnt in ((g.vmq, "vmcnt"), (g.lgkmq, "lgkmcnt")):
            for e in q:
                if k in e[0]:
                    src = (e[1], cnt)
        reg = f"s{k - SGPR_KEY}" if k >= SGPR_KEY else (f"v{k}" if k < self.nva else f"a{k - self.nva}")
        what = f"the load at +{self.pcrel(src[0]):#x}" if src else "a load"
        cnt = src[1] if src else "vmcnt/lgkmcnt"
        self.hazards.add("missing-waitcnt", self.pcrel(inst.addr), inst.text(), self.wave_desc(g),
                         f"{reg} is used before the s_waitcnt {cnt} that covers {what} writing it "
                         f"(real hardware would read a stale value)")
        # reported once: the loads no longer count as writing these registers, so that the
        # consequences further on are not reported as new hazards
        g.vmq = [(e[0] - keys, e[1], e[2]) for e in g.vmq]
        g.lgkmq = [(e[0] - keys, e[1], e[2]) for e in g.lgkmq]
        g.pend = g.pend - keys

    def run_block(self, g):
        blk = self.blocks.get(g.pc) or self._block(g.pc)
        items, term, tinst, tpc = blk
        i = -1
        try:
            if self.checks:
                for i, (fn, keys, inst) in enumerate(items):
                    if g.pend and not keys.isdisjoint(g.pend):
                        self._hazard_regs(g, keys, inst)
                    fn(g)
            else:
                for fn, keys, inst in items:
                    fn(g)
            self.winst += (len(items) + 1) * g.n
            return term(g), tpc
        except (SimError, SimHazardError):
            raise
        except Exception as e:  # a bug of the simulator: say where
            inst = items[i][2] if 0 <= i < len(items) and items[i][2] else tinst
            raise SimError(f"internal simulator error {type(e).__name__}: {e}", kernel=self.name,
                           pc=self.pcrel(inst.addr) if inst else None, wave=self.wave_desc(g),
                           inst=inst.text() if inst else None) from e

    def run_groups(self, groups):
        runnable, waiting = list(groups), []
        while runnable or waiting:
            if not runnable:                   # every live wave waits at a barrier: release them all
                self.lds.barrier()
                runnable, waiting = waiting, []
            runnable.sort(key=lambda x: x.pc)
            g = runnable.pop(0)
            if runnable and runnable[0].pc == g.pc:
                same = [x for x in runnable if x.pc == g.pc and x.same_state(g)]
                if same:
                    ids = {id(x) for x in same}
                    runnable = [x for x in runnable if id(x) not in ids]
                    g = Group.merge([g] + same)
            while True:
                res, tpc = self.run_block(g)
                if isinstance(res, int):
                    g.pc = res
                    if runnable and res > min(x.pc for x in runnable):
                        runnable.append(g)
                        break
                    continue
                if res is None:            # s_endpgm
                    break
                if res == "barrier":
                    g.pc = tpc + 4
                    waiting.append(g)
                    break
                if res[0] == "split":
                    _, t, pa, pb = res
                    ga, gb = g.take(t), g.take(~t)
                    ga.pc, gb.pc = pa, pb
                    runnable += [ga, gb]
                    break
                if res[0] == "multi":
                    t = res[1]
                    for v in np.unique(t):
                        gg = g.take(t == v)
                        gg.pc = int(v)
                        runnable.append(gg)
                    break

    # ------------------------------------------------------------ launch
    def launch(self, grid, block, dynamic_smem, args):
        kd, meta = self.kernel.descriptor, self.kernel.meta
        grid = tuple(int(x) for x in (tuple(grid) + (1, 1, 1))[:3])
        block = tuple(int(x) for x in (tuple(block) + (1, 1, 1))[:3])
        if min(grid) < 1 or min(block) < 1:
            raise SimError(f"launch with an empty grid {grid} or block {block}", kernel=self.name)
        threads = block[0] * block[1] * block[2]
        maxf = int(meta.get(".max_flat_workgroup_size", 1024))
        if threads > maxf:
            raise SimError(f"block of {threads} threads exceeds the kernel's maximum of {maxf}", kernel=self.name)
        self.lds_size = int(kd.group_segment_fixed_size) + int(dynamic_smem)
        lds_limit = targets.parse(self.arch).smem_per_block
        if self.lds_size > lds_limit:
            raise SimError(f"the kernel needs {self.lds_size} bytes of LDS; {self.arch} has {lds_limit}",
                           kernel=self.name)
        if kd.private_segment_fixed_size or meta.get(".private_segment_fixed_size", 0):
            raise SimError("kernels using scratch (private segment) are not simulated", kernel=self.name)
        self.wpg = (threads + 63) // 64
        # kernarg segment: explicit arguments, then the hidden ones the metadata lists
        ksize = max(int(meta.get(".kernarg_segment_size", 0)), len(args), 8)
        karg = bytearray(_rup(ksize, 64))
        karg[:len(args)] = args
        dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
        for a in meta.get(".args", []):
            kind, off, size = a.get(".value_kind", ""), a.get(".offset", 0), a.get(".size", 0)
            val = None
            if kind.startswith("hidden_block_count_"):
                val = grid["xyz".index(kind[-1])]
            elif kind.startswith("hidden_group_size_"):
                val = block["xyz".index(kind[-1])]
            elif kind == "hidden_grid_dims":
                val = dims
            elif kind == "hidden_dynamic_lds_size":
                val = int(dynamic_smem)
            elif kind == "hidden_shared_base":
                val = SHARED_APERTURE_HI << 32
            elif kind == "hidden_private_base":
                val = PRIVATE_APERTURE_HI << 32
            elif kind.startswith("hidden_"):
                val = 0
            if val is not None and off + size <= len(karg):
                karg[off:off + size] = int(val).to_bytes(size, "little")
        mem = self.mem
        kbuf = mem.alloc(len(karg))
        kbuf.u8[:len(karg)] = np.frombuffer(bytes(karg), np.uint8)
        # dispatch packet (hsa_kernel_dispatch_packet_t) for kernels that read it
        pkt = mem.alloc(64)
        pk = struct.pack("<HHHHHHIIIIIQQQQ", 0, dims, block[0], block[1], block[2], 0,
                         grid[0] * block[0], grid[1] * block[1], grid[2] * block[2], 0, 0, 0, 0, kbuf.base, 0)
        pkt.u8[:len(pk)] = np.frombuffer(pk, np.uint8)
        queue = mem.alloc(256)
        old = np.seterr(all="ignore")
        self.hazards = Hazards(self.name)
        try:
            self._run_grid(grid, block, kbuf, pkt, queue)
        finally:
            np.seterr(**old)
            for b in (kbuf, pkt, queue):
                mem.free(b)
        error = self.hazards.error()
        if error:
            raise error

    def _run_grid(self, grid, block, kbuf, pkt, queue):
        kd = self.kernel.descriptor
        nwg = grid[0] * grid[1] * grid[2]
        wpg = self.wpg
        nregs = self.nva + self.nacc
        per_wave = nregs * 64 * 4 + 128 * 4
        batch_wg = max(1, min(nwg, V_BUDGET // (per_wave * wpg)))
        threads = block[0] * block[1] * block[2]
        t = np.arange(wpg * 64)
        tx, ty, tz = t % block[0], (t // block[0]) % block[1], t // (block[0] * block[1])
        v0 = (tx | ty << 10 | tz << 20).astype(U32).reshape(wpg, 64)
        valid = (t < threads).reshape(wpg, 64)
        exec_pair = pack_mask(valid)     # (wpg, 2)
        user = {"private_segment_buffer": [0, 0, 0, 0], "dispatch_ptr": [pkt.base & 0xFFFFFFFF, pkt.base >> 32],
                "queue_ptr": [queue.base & 0xFFFFFFFF, queue.base >> 32],
                "kernarg_segment_ptr": [kbuf.base & 0xFFFFFFFF, kbuf.base >> 32], "dispatch_id": [0, 0],
                "flat_scratch_init": [0, 0], "private_segment_size": [0]}
        s_init = np.zeros(128, U32)
        for name, first, cnt in kd.user_sgprs():
            s_init[first:first + cnt] = user[name]
        nuser = kd.user_sgpr_count
        if kd.preload_length:
            base = sum(c for _, _, c in kd.user_sgprs())
            words = np.frombuffer(kbuf.u8[:len(kbuf.u8) // 4 * 4].tobytes(), U32)
            o = kd.preload_offset
            s_init[base:base + kd.preload_length] = words[o:o + kd.preload_length]
        wgid_en = kd.workgroup_id_enabled
        for start in range(0, nwg, batch_wg):
            ids = np.arange(start, min(nwg, start + batch_wg))
            nb = len(ids)
            self.wg_ids = [(int(i % grid[0]), int(i // grid[0] % grid[1]), int(i // (grid[0] * grid[1])))
                           for i in ids]
            n = nb * wpg
            V = np.zeros((nregs, n, 64), U32)
            V[0] = np.tile(v0, (nb, 1))
            S = np.tile(s_init, (n, 1))
            s = nuser
            wgx, wgy, wgz = ids % grid[0], ids // grid[0] % grid[1], ids // (grid[0] * grid[1])
            for en, val in zip(wgid_en, (wgx, wgy, wgz)):
                if en:
                    S[:, s] = np.repeat(val, wpg)
                    s += 1
            S[:, EXEC:EXEC + 2] = np.tile(exec_pair, (nb, 1))
            wave = np.repeat(ids, wpg) * wpg + np.tile(np.arange(wpg), nb)
            wgi = np.repeat(np.arange(nb), wpg)
            self.lds = Lds(nb, self.lds_size, self.checks, wpg)
            g = Group(V, S, np.zeros(n, bool), wave, wgi, self.entry_pc)
            self.run_groups([g])
