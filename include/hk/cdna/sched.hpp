#pragma once
// hk/cdna/sched.hpp: barriers, s_waitcnt counters, priorities, scheduling groups, block remaps.
namespace hk {

// s_waitcnt through the builtin (not inline asm), so the compiler's own waitcnt pass knows
// the counters are already drained. gfx9 encoding: vmcnt[3:0]+[15:14], expcnt[6:4], lgkmcnt[11:8].
template <int VM = 63, int LGKM = 15>
HK_INLINE void waitcnt() {
  static_assert(VM >= 0 && VM <= 63 && LGKM >= 0 && LGKM <= 15, "waitcnt counter out of range");
  constexpr int enc = (VM & 0xF) | (((VM >> 4) & 3) << 14) | (7 << 4) | ((LGKM & 0xF) << 8);
  __builtin_amdgcn_s_waitcnt(enc);
  asm volatile("" ::: "memory");
}
template <int N = 0> HK_INLINE void wait_vm() { waitcnt<N, 15>(); }      // global / direct-to-LDS loads
template <int N = 0> HK_INLINE void wait_lgkm() { waitcnt<63, N>(); }    // LDS reads/writes, scalar loads
// load_async completion: wait until at most N of this wave's async loads are in flight.
template <int N = 0> HK_INLINE void load_async_wait() { wait_vm<N>(); }

// Workgroup barrier. The compiler may not move memory operations (empty asm with a memory
// clobber) or any instruction (sched_barrier(0)) across it. It does NOT drain counters:
// callers wait for what the other waves must see first.
HK_INLINE void barrier() {
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("" ::: "memory");
  __builtin_amdgcn_s_barrier();
  asm volatile("" ::: "memory");
  __builtin_amdgcn_sched_barrier(0);
}
// Barrier after the LDS reads/writes of this wave completed (the usual __syncthreads for LDS).
HK_INLINE void sync_lds() {
  wait_lgkm<0>();
  barrier();
}

template <int P> HK_INLINE void setprio() {
  static_assert(P >= 0 && P <= 3, "s_setprio takes 0..3");
  __builtin_amdgcn_s_setprio(P);
}
HK_INLINE void sched_barrier() { __builtin_amdgcn_sched_barrier(0); }
// sched_group_barrier masks (LLVM AMDGPU): 0x8 MFMA, 0x20 VMEM read, 0x40 VMEM write,
// 0x100 DS read, 0x200 DS write, 0x2 VALU, 0x4 SALU.
namespace sg {
inline constexpr int valu = 0x2, salu = 0x4, mfma = 0x8, vmem_read = 0x20, vmem_write = 0x40,
                     ds_read = 0x100, ds_write = 0x200;
}
template <int MASK, int COUNT, int SYNC_ID = 0>
HK_INLINE void sched_group_barrier() { __builtin_amdgcn_sched_group_barrier(MASK, COUNT, SYNC_ID); }

// ---- block-id remapping -------------------------------------------------------------------
// Workgroups are dealt round-robin to the XCDs: block b runs on XCD b % xcds. Renumber so that
// each XCD receives a contiguous range of logical ids (neighbouring tiles share its L2).
// A bijection on [0, n) for any n (XCDs beyond n % xcds get one id fewer).
HK_INLINE int xcd_remap(int b, int n, int xcds = 8) {
  if (n < xcds) return b;
  const int per = (n + xcds - 1) / xcds;     // ids on the XCDs that get one more
  const int tall = n - (per - 1) * xcds;     // how many XCDs get `per` ids
  const int x = b % xcds, local = b / xcds;
  return x < tall ? x * per + local : tall * per + (x - tall) * (per - 1) + local;
}
// GROUP_M ordering: consecutive ids walk down group_m tile rows before moving one tile column,
// so a group of blocks reuses the same B columns and A rows from L2.
HK_INLINE void group_m_tile(int pid, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
  const int in_group = group_m * tiles_n;
  const int first_m = (pid / in_group) * group_m;
  const int size_m = min(tiles_m - first_m, group_m);
  const int r = pid % in_group;
  tm = first_m + r % size_m;
  tn = r / size_m;
}

}  // namespace hk
