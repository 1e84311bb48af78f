#pragma once
// hk/hopper/sync.hpp: mbarriers, fences, named barriers and register reallocation.
// An mbarrier is a 64-bit word in shared memory; we address it by its 32-bit shared address
// because every PTX form below takes a shared::cta address.
#include "../common/platform.hpp"

namespace hk {

constexpr int WARPGROUP_THREADS = 128;

HK_INLINE u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }
HK_INLINE int warpgroup_id() { return threadIdx.x / WARPGROUP_THREADS; }
HK_INLINE int warpgroup_thread() { return threadIdx.x % WARPGROUP_THREADS; }

struct alignas(8) mbarrier { u64 word; };

HK_INLINE void init(mbarrier& b, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(&b)), "r"(arrivals));
}
// Make barrier initialisation visible to the async proxy (TMA) before anyone uses it.
HK_INLINE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

HK_INLINE void arrive(mbarrier& b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(&b)) : "memory");
}
// Arrive and tell the barrier to also wait for `bytes` of asynchronous (TMA) writes.
HK_INLINE void arrive_expect_tx(mbarrier& b, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(&b)), "r"(bytes) : "memory");
}
// Block until the phase with parity `phase` has completed.
HK_INLINE void wait(mbarrier& b, int phase) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" :: "r"(smem_addr(&b)), "r"(phase) : "memory");
}

// Generic-proxy shared writes (st.shared) that TMA stores or wgmma will read need this fence.
HK_INLINE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Named barrier among `threads` threads (a multiple of 32); id 0 is __syncthreads'.
HK_INLINE void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// Arrive at named barrier `id` without waiting (bar.arrive): the producer side of a handshake whose
// other side waits with named_barrier(id, threads).
HK_INLINE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// Register reallocation between warpgroups (sm_90a). The producer gives registers back, the
// consumers take them; only effective with a register cap at entry (__launch_bounds__(T, 1)).
template <int N> HK_INLINE void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N> HK_INLINE void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }

}  // namespace hk
