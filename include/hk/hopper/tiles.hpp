#pragma once
// hk/hopper/tiles.hpp: the three tile kinds every kernel talks in.
//   gl<T>        a global array: pointer + runtime extents and strides (batch, depth, rows, cols)
//   st<T, R, C>  an R x C tile in shared memory, C contiguous, stored the way TMA writes it and
//                wgmma reads it (128/64/32-byte swizzle, see below)
//   rt<T, R, C>  an R x C tile in the registers of one warpgroup, in wgmma's accumulator layout
#include "types.hpp"
#include "prims.hpp"
#include "sync.hpp"

namespace hk {

template <bool B, class T, class F> struct conditional { using type = T; };
template <class T, class F> struct conditional<false, T, F> { using type = F; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;

// ---- gl: global layout ---------------------------------------------------------------------------
template <class T> struct gl {
  T* ptr;
  int batch, depth, rows, cols;
  i64 stride_b, stride_d, stride_r, stride_c;   // in elements
  HK_INLINE T& operator()(int b, int d, int r, int c) const {
    return ptr[b * stride_b + d * stride_d + r * stride_r + c * stride_c];
  }
  HK_INLINE T& operator()(int r, int c) const { return ptr[r * stride_r + c * stride_c]; }
};
template <class T> HK_INLINE gl<T> make_gl(T* p, int rows, int cols, i64 stride_r, i64 stride_c) {
  return gl<T>{p, 1, 1, rows, cols, 0, 0, stride_r, stride_c};
}

// ---- st: shared tile -----------------------------------------------------------------------------
// Columns are cut into chunks of W = min(C, 64) elements (W*2 = 128, 64 or 32 bytes: one swizzle
// row). A chunk holds all R rows, W*2 bytes each; inside every 8-row group the 16-byte pieces of
// a row are XOR-permuted by the row index (CUTLASS's Swizzle<3|2|1,4,3>), which is exactly what
// TMA writes with CU_TENSOR_MAP_SWIZZLE_{128,64,32}B and what wgmma's descriptor mode 1/2/3 reads.
// Swizzling spreads the 8 rows a tensor-core read touches over all 32 banks.
template <class T, int R, int C> struct alignas(1024) st {
  static_assert(sizeof(T) == 2, "hk::st: 16-bit element types only (bf16, half)");
  static_assert(C == 16 || C == 32 || C % 64 == 0, "hk::st: columns must be 16, 32 or a multiple of 64");
  using dtype = T;
  static constexpr int rows = R, cols = C;
  static constexpr int chunk_cols = C < 64 ? C : 64;
  static constexpr int swizzle_bytes = chunk_cols * 2;
  static constexpr int chunk_bytes = R * swizzle_bytes;
  static constexpr int chunks = C / chunk_cols;
  static constexpr int bytes = R * C * 2;
  static_assert(chunk_bytes % 1024 == 0, "hk::st: each chunk must span whole 1024-byte swizzle atoms");
  T data[R * C];

  // Byte offset of element (r, c) from the tile's start.
  HK_INLINE static u32 offset(int r, int c) {
    u32 o = (c / chunk_cols) * chunk_bytes + r * swizzle_bytes + (c % chunk_cols) * 2;
    return o ^ (((o >> 7) & (swizzle_bytes / 16 - 1)) << 4);
  }
  HK_INLINE T& at(int r, int c) { return *reinterpret_cast<T*>(reinterpret_cast<char*>(data) + offset(r, c)); }
  HK_INLINE void* chunk(int i) { return reinterpret_cast<char*>(data) + i * chunk_bytes; }
};

// Rows [i*RS, (i+1)*RS) of a one-chunk tile (C == 64), or column chunks [i*CS, (i+1)*CS) of a tile:
// both are again valid st's because chunks keep their stride R*W*2 only in these two cases.
template <int RS, class T, int R> HK_INLINE st<T, RS, 64>& subtile_rows(st<T, R, 64>& t, int i) {
  static_assert(R % RS == 0 && RS % 8 == 0);
  return *reinterpret_cast<st<T, RS, 64>*>(reinterpret_cast<char*>(t.data) + i * RS * 128);
}
template <int CS, class T, int R, int C> HK_INLINE st<T, R, CS>& subtile_cols(st<T, R, C>& t, int i) {
  static_assert(C % CS == 0 && CS % 64 == 0);
  return *reinterpret_cast<st<T, R, CS>*>(t.chunk(i * (CS / 64)));
}

// ---- rt: warpgroup register tile in wgmma accumulator layout ------------------------------------
// A 64 x C block is spread over 128 threads: warp w holds rows 16w..16w+15; lane l holds rows
// 16w + l/4 and 16w + l/4 + 8, columns 8j + 2(l%4) and +1 for every j < C/8. Element k of the
// per-thread array v[b] (k < C/2) is: j = k/4, row +8 if k%4 >= 2, column +1 if k odd.
template <class T, int R, int C> struct rt {
  static_assert(R % 64 == 0 && C % 8 == 0, "hk::rt: warpgroup tiles are 64-row blocks, 8-column groups");
  using dtype = T;
  static constexpr int rows = R, cols = C, blocks = R / 64, regs = C / 2;
  T v[blocks][regs];
  // Coordinates of this thread's element k in block b.
  HK_INLINE static int row(int b, int k) {
    int t = warpgroup_thread_();
    return b * 64 + (t / 32) * 16 + (t % 32) / 4 + ((k % 4) >= 2 ? 8 : 0);
  }
  HK_INLINE static int col(int k) { return (k / 4) * 8 + (warpgroup_thread_() % 4) * 2 + (k % 2); }
  HK_INLINE static int warpgroup_thread_() { return threadIdx.x % 128; }

  template <class U> using retype = rt<U, R, C>;
  using rvec = tile_vec<rt<float, R, C>, 0>;
  using cvec = tile_vec<rt<float, R, C>, 1>;
  // Flat element view (common/regs.hpp): element i is v[i / regs][i % regs].
  static constexpr int n_elems = blocks * regs;
  HK_INLINE float get(int i) const { return to_float(v[i / regs][i % regs]); }
  HK_INLINE void set(int i, float x) { v[i / regs][i % regs] = from_float<T>(x); }
  // A thread holds rows r and r + 8 of every 64-row block, columns 2(l % 4) and +1 of every
  // 8-column group: row slot 2b + h, column slot 2j + e.
  static constexpr int row_slots = 2 * blocks, col_slots = C / 4;
  HK_HD static constexpr int row_slot(int i) { return 2 * (i / regs) + ((i % regs) % 4 >= 2 ? 1 : 0); }
  HK_HD static constexpr int col_slot(int i) { return 2 * ((i % regs) / 4) + (i % regs) % 2; }
  // A row lives in 4 adjacent lanes; a column in the lanes l % 4 of all four warps of the
  // warpgroup, combined through shared memory (128 * C bytes, static) and named barrier
  // 1 + warpgroup: a kernel calling col reductions keeps those barrier ids for them.
  template <class Op> HK_INLINE static void finish_rows(float (&x)[row_slots]) {
#pragma unroll
    for (int s = 0; s < row_slots; ++s) x[s] = detail::lane_allreduce<4, Op>(x[s]);
  }
  template <class Op> HK_INLINE static void finish_cols(float (&x)[col_slots]) {
    __shared__ float part[1024 / WARP_THREADS][C];
    const int w = warp_id(), l = lane_id(), w0 = w & ~3;
#pragma unroll
    for (int s = 0; s < col_slots; ++s)
#pragma unroll
      for (int m = 4; m < 32; m <<= 1) x[s] = Op::apply(x[s], __shfl_xor_sync(0xffffffffu, x[s], m));
    named_barrier(1 + w / 4, WARPGROUP_THREADS);   // the previous reduction's reads are done
    if (l < 4)
#pragma unroll
      for (int s = 0; s < col_slots; ++s) part[w][8 * (s / 2) + 2 * l + s % 2] = x[s];
    named_barrier(1 + w / 4, WARPGROUP_THREADS);
#pragma unroll
    for (int s = 0; s < col_slots; ++s) {
      const int c = 8 * (s / 2) + 2 * (l % 4) + s % 2;
      x[s] = Op::apply(Op::apply(part[w0][c], part[w0 + 1][c]), Op::apply(part[w0 + 2][c], part[w0 + 3][c]));
    }
  }
};

}  // namespace hk
