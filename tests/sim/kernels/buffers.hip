// Buffer accesses the way tile libraries write them: the row stride in the resource, the row as
// the index (idxen) and the column as the offset (offen), through inline assembly (clang has no
// builtin for structured buffer accesses). tests/sim/test_sim_buffers.py checks them.
#include "hk/common/platform.hpp"
typedef unsigned int u32;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
#define TID __builtin_amdgcn_workitem_id_x()

__device__ __amdgpu_buffer_rsrc_t rsrc(const void* p, int stride, int records, int word3) {
  return __builtin_amdgcn_make_buffer_rsrc((void*)p, (short)stride, records, word3);
}

// lane t reads row t / cols, column (t % cols) * 4 + 4 (the instruction offset), soffset added
extern "C" __global__ void strided_load(const int* x, int* o, int stride, int rows, int word3, int cols, int soff) {
  u32x2 io = {(u32)(TID / cols), (u32)(TID % cols) * 4};
  int d;
  asm volatile("buffer_load_dword %0, %1, %2, %3 idxen offen offset:4\n\ts_waitcnt vmcnt(0)"
               : "=v"(d) : "v"(io), "s"(rsrc(x, stride, rows, word3)), "s"(soff));
  o[TID] = d;
}

// index only: lane t reads record t at byte 8 of it, two dwords
extern "C" __global__ void indexed_load_x2(const int* x, int* o, int stride, int rows, int word3) {
  u32 idx = TID;
  typedef int i32x2 __attribute__((ext_vector_type(2)));
  i32x2 d;
  asm volatile("buffer_load_dwordx2 %0, %1, %2, 0 idxen offset:8\n\ts_waitcnt vmcnt(0)"
               : "=v"(d) : "v"(idx), "s"(rsrc(x, stride, rows, word3)));
  o[2 * TID] = d.x;
  o[2 * TID + 1] = d.y;
}

// add_tid: the lane id is the index, no address VGPR at all
extern "C" __global__ void tid_load(const int* x, int* o, int stride, int rows, int word3) {
  int d;
  asm volatile("buffer_load_dword %0, off, %1, 0 offset:12\n\ts_waitcnt vmcnt(0)"
               : "=v"(d) : "s"(rsrc(x, stride, rows, word3)));
  o[TID] = d;
}

// structured store: lane t writes t + 1000 to row t / cols, column (t % cols) * 4
extern "C" __global__ void strided_store(int* x, int stride, int rows, int word3, int cols) {
  u32x2 io = {(u32)(TID / cols), (u32)(TID % cols) * 4};
  int v = TID + 1000;
  asm volatile("buffer_store_dword %0, %1, %2, 0 idxen offen\n\ts_waitcnt vmcnt(0)"
               :: "v"(v), "v"(io), "s"(rsrc(x, stride, rows, word3)) : "memory");
}

// structured atomic add with return: lane t adds 1 to row t % rows (several lanes per row)
extern "C" __global__ void strided_atomic(int* x, int* o, int stride, int rows, int word3) {
  u32x2 io = {(u32)(TID % 16), 4};
  int v = 1;
  asm volatile("buffer_atomic_add %0, %1, %2, 0 idxen offen sc0\n\ts_waitcnt vmcnt(0)"
               : "+v"(v) : "v"(io), "s"(rsrc(x, stride, rows, word3)) : "memory");
  o[TID] = v;
}
