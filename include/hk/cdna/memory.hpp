#pragma once
// hk/cdna/memory.hpp: global -> LDS (direct-to-LDS buffer loads), LDS -> registers (MFMA operand
// layouts, transposing on gfx950), registers -> global (bounds-checked).
namespace hk {

// ---- buffer resources ---------------------------------------------------------------------
// Raw buffer (stride 0): a lane whose byte offset is >= num_records reads 0 and never faults.
// Word 3 = 0x00020000 (DATA_FORMAT 32-bit), as gfx9 raw buffer accesses expect.
using buffer = __amdgpu_buffer_rsrc_t;
HK_INLINE buffer make_buffer(const void* p, long long num_bytes) {
  const long long n = num_bytes < 0 ? 0 : (num_bytes > 0xFFFFFFFFll ? 0xFFFFFFFFll : num_bytes);
  return __builtin_amdgcn_make_buffer_rsrc(const_cast<void*>(p), (short)0, (int)(u32)n, 0x00020000);
}
// A buffer over global tile (r, c) of a matrix: reads beyond the matrix return 0.
template <typename T>
HK_INLINE buffer make_buffer(const gl<T>& g, int b, int d, int r, int c) {
  return make_buffer((const void*)g.at(b, d, r, c), g.bytes_after(b, d, r, c));
}

// ---- global -> LDS, asynchronous ----------------------------------------------------------
// The direct-to-LDS load is issued from inline asm on purpose: the compiler then neither
// tracks it nor inserts conservative `s_waitcnt vmcnt(0)` before every later LDS read it cannot
// prove disjoint (which would serialize the pipeline). The caller owns the synchronization:
// load_async_wait<N>() (vmcnt) on the issuing wave, then a barrier, before any wave reads.
namespace detail {
// num_records is clamped to 2^31 - 1 (not 2^32 - 1) so that tile_loader can step it down with
// signed scalar arithmetic: every lane offset of a tile is below 2^31 (hkjit checks the leading
// dimension before launch), so the clamp never cuts data a tile reads.
HK_INLINE vec<int, 4> rsrc_words(const void* p, long long num_bytes) {
  const long long n = num_bytes < 0 ? 0 : (num_bytes > 0x7FFFFFFFll ? 0x7FFFFFFFll : num_bytes);
  const unsigned long long a = (unsigned long long)p;
  vec<int, 4> w;
  w[0] = (int)(u32)a;
  w[1] = (int)((u32)(a >> 32) & 0xFFFFu);   // stride 0: raw buffer, range-checked against w[2]
  w[2] = (int)(u32)n;
  w[3] = 0x00020000;
  return w;
}
template <int CH>
HK_INLINE void buffer_load_lds(vec<int, 4> rsrc, u32 lds_addr, u32 voffset) {
  static_assert(CH == 4 || CH == 16, "direct-to-LDS chunk of 4 or 16 bytes");
  if constexpr (CH == 16)
    asm volatile("buffer_load_dwordx4 %1, %2, 0 offen lds" :: "{m0}"(lds_addr), "v"(voffset), "s"(rsrc) : "memory");
  else
    asm volatile("buffer_load_dword %1, %2, 0 offen lds" :: "{m0}"(lds_addr), "v"(voffset), "s"(rsrc) : "memory");
}
// The same load through a resource the compiler must treat as changed by it ("+s"), then the
// resource moved `step` bytes on (base + step, num_records - step, not below 0). The chain
// keeps one resource live per operand: without it the compiler precomputes every
// instruction's resource up front and runs out of SGPRs.
template <int CH>
HK_INLINE void buffer_load_lds_step(vec<int, 4>& rsrc, u32 lds_addr, u32 voffset, u32 step) {
  static_assert(CH == 4 || CH == 16, "direct-to-LDS chunk of 4 or 16 bytes");
  if constexpr (CH == 16)
    asm volatile("buffer_load_dwordx4 %1, %0, 0 offen lds" : "+s"(rsrc) : "v"(voffset), "{m0}"(lds_addr) : "memory");
  else
    asm volatile("buffer_load_dword %1, %0, 0 offen lds" : "+s"(rsrc) : "v"(voffset), "{m0}"(lds_addr) : "memory");
  const unsigned long long a = (((unsigned long long)(u32)rsrc[1] << 32) | (u32)rsrc[0]) + step;
  rsrc[0] = (int)(u32)a;
  rsrc[1] = (int)(u32)(a >> 32);   // still < 2^48: the stride bits above stay 0
  // num_records <= 2^31 - 1 (rsrc_words) and step < 2^31: a signed max, s_sub_i32 + s_max_i32
  // (an unsigned saturating subtract would be a VALU op, illegal in the resource operand)
  rsrc[2] = max(rsrc[2] - (int)step, 0);
}
// Does swizzle f repeat every `step` rows (so one lane's offsets differ by a uniform amount)?
template <typename ST>
constexpr bool swizzle_periodic(int step_rows) {
  if (step_rows <= 0) return false;
  for (int r = 0; r < 256; ++r)
    if ((ST::swizzle::f(r, ST::units) & (ST::units - 1)) != (ST::swizzle::f(r + step_rows, ST::units) & (ST::units - 1))) return false;
  return true;
}
}  // namespace detail

// tile_loader<ST, NW>: NW waves together fill shared tile ST from global memory with
// `buffer_load_dword[x4] ... lds` (4 bytes per lane, or 16 on gfx950). One instruction
// writes 64 consecutive chunks of LDS (M0 + lane * CH); the swizzle is applied by choosing which
// global chunk each lane fetches. Offsets are computed once (init) and reused for every tile
// of the same matrix: only the buffer base moves. Where the swizzle repeats every
// NW * IB / row_bytes rows, one VGPR of offset serves all of a wave's instructions: instruction
// i then reads through a buffer whose base is moved i * step_bytes further (and whose
// num_records shrinks by as much). The step must go into the resource, not into `soffset`:
// a raw buffer's range check covers voffset + the instruction offset only, so a step carried
// in soffset would let lanes past the end of the matrix read real memory instead of 0.
template <typename ST, int NW, int CH_ = arch::lds_dma_bytes>
struct tile_loader {
  using T = typename ST::dtype;
  static constexpr int CH = CH_;                 // bytes per lane: 4, or 16 on gfx950
  static_assert(CH == 4 || (CH == 16 && arch::lds_dma_bytes >= 16), "direct-to-LDS width not available on this target");
  static constexpr int IB = 64 * CH;             // bytes per instruction
  static constexpr int NI = ST::bytes / IB;      // instructions per tile
  static constexpr int PER = NI / NW;            // per wave
  static_assert(ST::bytes % IB == 0 && NI % NW == 0, "tile bytes must split evenly into the waves' direct-to-LDS loads");
  static_assert(ST::swizzle::unit % CH == 0, "swizzle unit must hold whole load chunks");
  static_assert(ST::row_bytes % CH == 0, "rows must hold whole load chunks");
  static constexpr bool UNIFORM_STEP = (NW * IB) % ST::row_bytes == 0 && detail::swizzle_periodic<ST>(NW * IB / ST::row_bytes);
  static constexpr int STEP_ROWS = UNIFORM_STEP ? NW * IB / ST::row_bytes : 0;
  u32 voff[UNIFORM_STEP ? 1 : PER];
  u32 step_bytes;   // uniform: global bytes between a wave's consecutive instructions
  int wave;
  // row_stride: elements between consecutive tile rows in global memory (columns are unit-stride).
  HK_INLINE void init(long long row_stride, int wave_in_group) {
    wave = wave_in_group;
    step_bytes = (u32)(STEP_ROWS * row_stride * (long long)sizeof(T));
    const int l = lane_id();
#pragma unroll
    for (int i = 0; i < (UNIFORM_STEP ? 1 : PER); ++i) {
      const int p = (i * NW + wave) * IB + l * CH;  // byte in the LDS tile
      const int r = p / ST::row_bytes, b = p % ST::row_bytes;
      const int c = ST::col_of(r, b);
      voff[i] = (u32)((r * row_stride + c) * (long long)sizeof(T));
    }
  }
  // Issue the loads of the tile whose first element is at p, in a matrix ending `bytes_left`
  // bytes after p: every lane whose chunk lies past the end reads 0 (a chunk that straddles the
  // end is range-checked per dword, or as a whole: see fix_last_chunk).
  HK_INLINE void issue(ST& dst, const T* p, long long bytes_left) const {
    const u32 lds0 = (u32)(unsigned long long)(HK_LDS void*)dst.data;
    vec<int, 4> rsrc = detail::rsrc_words(p, bytes_left);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const u32 lds = lds0 + (u32)((i * NW + wave) * IB);
      if constexpr (UNIFORM_STEP) detail::buffer_load_lds_step<CH>(rsrc, lds, voff[0], step_bytes);
      else detail::buffer_load_lds<CH>(rsrc, lds, voff[i]);
    }
  }
};
// One-call form: NW waves load `dst` from the tile of g whose top-left element is (r, c).
// (Recomputes the offsets; kernels in a loop keep a tile_loader instead.)
template <int NW, typename ST, typename T>
HK_INLINE void load_async(ST& dst, const gl<T>& g, int r, int c, int wave_in_group) {
  tile_loader<ST, NW> ld;
  ld.init(g.sr, wave_in_group);
  ld.issue(dst, g.at(0, 0, r, c), g.bytes_after(0, 0, r, c));
}

// ---- LDS -> registers ---------------------------------------------------------------------
namespace detail {
template <typename T, int E>
HK_INLINE vec<T, E> lds_vec(const HK_LDS char* base, int off) {
  return *(const HK_LDS vec<T, E>*)(base + off);
}
template <typename T>
HK_INLINE T lds_elem(const HK_LDS char* base, int off) { return *(const HK_LDS T*)(base + off); }
// Zero the elements of a K-run of E operand elements whose K index (k_first + j) is >= k_limit.
// Done with one AND per 32-bit word against a per-lane mask (the same mask serves every
// fragment with the same K position, A and B alike, so the compiler computes it once).
template <typename T, int E>
HK_INLINE vec<T, E> mask_k(vec<T, E> v, int k_first, int k_limit) {
  static_assert(sizeof(T) == 2 && E % 2 == 0, "16-bit operands");
  vec<u32, E / 2> w = __builtin_bit_cast(vec<u32, E / 2>, v);
#pragma unroll
  for (int j = 0; j < E / 2; ++j) {
    const u32 lo = (k_first + 2 * j < k_limit) ? 0x0000FFFFu : 0u;
    const u32 hi = (k_first + 2 * j + 1 < k_limit) ? 0xFFFF0000u : 0u;
    w[j] &= (lo | hi);
  }
  return __builtin_bit_cast(vec<T, E>, w);
}
#if HK_CDNA4
template <typename T>
HK_INLINE vec<T, 4> lds_tr4(const HK_LDS char* base, int off) {
  if constexpr (same_t<T, bf16>::value)
    return __builtin_amdgcn_ds_read_tr16_b64_v4bf16((HK_LDS vec<bf16, 4>*)(base + off));
  else
    return __builtin_bit_cast(vec<half, 4>, __builtin_amdgcn_ds_read_tr16_b64_v4f16((HK_LDS vec<__fp16, 4>*)(base + off)));
}
#endif
}  // namespace detail

// Operand fragment whose K runs along the shared tile's columns (shared tile rows = M or N):
// dst covers shared rows [r0, r0 + MN) and columns [c0, c0 + KD). Elements whose K index
// (c0-relative column) is >= k_limit are zeroed when MASK (ragged K tails).
namespace detail {
template <bool MASK, typename T, int R, int C, typename S, int SR, int SC, typename Swz>
HK_INLINE void load_frag(rt<T, R, C, row_l, S>& dst, const st<T, SR, SC, Swz>& src, int r0, int c0, int k_limit) {
  using ST = st<T, SR, SC, Swz>;
  const int l = lane_id();
  const HK_LDS char* base = (const HK_LDS char*)(const HK_LDS void*)src.data;
#pragma unroll
  for (int i = 0; i < dst.TMN; ++i)
#pragma unroll
    for (int k = 0; k < dst.TK; ++k) {
      const int r = r0 + i * S::MI + l % S::MI;
      const int kk = k * S::MK + S::E * (l / S::MI);
      dst.t[i][k] = lds_vec<T, S::E>(base, ST::offset(r, c0 + kk));
      if constexpr (MASK) dst.t[i][k] = mask_k<T, S::E>(dst.t[i][k], kk, k_limit);
    }
}

// Operand fragment whose K runs along the shared tile's rows (shared tile = K x MN):
// dst covers shared rows [r0, r0 + KD) and columns [c0, c0 + MN). gfx950 reads with
// ds_read_b64_tr_b16 (each lane gets 4 K-consecutive elements of one column); gfx942 reads
// element by element. Elements whose K index (r0-relative row) is >= k_limit are zeroed.
template <bool MASK, typename T, int R, int C, typename S, int SR, int SC, typename Swz>
HK_INLINE void load_frag(rt<T, R, C, col_l, S>& dst, const st<T, SR, SC, Swz>& src, int r0, int c0, int k_limit) {
  using ST = st<T, SR, SC, Swz>;
  const int l = lane_id();
  const HK_LDS char* base = (const HK_LDS char*)(const HK_LDS void*)src.data;
#pragma unroll
  for (int i = 0; i < dst.TMN; ++i)
#pragma unroll
    for (int k = 0; k < dst.TK; ++k) {
      const int kk = k * S::MK + S::E * (l / S::MI);   // first K row of this lane
      vec<T, S::E> v;
#if HK_CDNA4
      // 16-lane groups: lane s addresses row kk + 4h + (s >> 2), columns 4*(s & 3) .. +3 of
      // its group's 16 columns, and receives column (s) of rows kk + 4h .. +3.
      const int s = l & 15;
      const int col = c0 + i * S::MI + ((l % S::MI) & ~15) + 4 * (s & 3);
#pragma unroll
      for (int h = 0; h < S::E / 4; ++h) {
        const vec<T, 4> q = lds_tr4<T>(base, ST::offset(r0 + kk + 4 * h + (s >> 2), col));
#pragma unroll
        for (int j = 0; j < 4; ++j) v[4 * h + j] = q[j];
      }
#else
      const int col = c0 + i * S::MI + l % S::MI;
#pragma unroll
      for (int j = 0; j < S::E; ++j) v[j] = lds_elem<T>(base, ST::offset(r0 + kk + j, col));
#endif
      if constexpr (MASK) v = mask_k<T, S::E>(v, kk, k_limit);
      dst.t[i][k] = v;
    }
}

}  // namespace detail
// Operand fragments from a shared tile (row_l or col_l, see above); the second form zeroes the
// elements whose K index (relative to the fragment's first K) is >= k_limit.
template <typename RT, typename T, int SR, int SC, typename Swz>
HK_INLINE void load(RT& dst, const st<T, SR, SC, Swz>& src, int r0, int c0) {
  detail::load_frag<false>(dst, src, r0, c0, 0);
}
template <typename RT, typename T, int SR, int SC, typename Swz>
HK_INLINE void load(RT& dst, const st<T, SR, SC, Swz>& src, int r0, int c0, int k_limit) {
  detail::load_frag<true>(dst, src, r0, c0, k_limit);
}

// Zero the logical rectangle [r0, r1) x [c0, c1) of a shared tile, spread over `nthreads`
// threads (this one is `tid`). Used for ragged K tails; not a hot path. Work is dealt out in
// whole LDS dwords (pairs of 16-bit elements: a swizzle unit is >= 4 bytes, so a pair is one
// aligned dword): no two threads write parts of one dword, and a dword cut by c0 or c1 gets a
// 16-bit write of only its element inside the rectangle.
template <typename ST>
HK_INLINE void zero_region(ST& dst, int r0, int r1, int c0, int c1, int tid, int nthreads) {
  using T = typename ST::dtype;
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  constexpr int E = 4 / (int)sizeof(T);   // elements per dword
  const int p0 = c0 / E, p1 = (c1 + E - 1) / E, w = p1 - p0, n = (r1 - r0) * w;
  HK_LDS char* base = (HK_LDS char*)(HK_LDS void*)dst.data;
  for (int i = tid; i < n; i += nthreads) {
    const int r = r0 + i / w, c = (p0 + i % w) * E;
    if (E == 2 && (c < c0 || c + 1 >= c1)) {
      if (c >= c0) *(HK_LDS T*)(base + ST::offset(r, c)) = (T)0.0f;
      if (c + 1 < c1) *(HK_LDS T*)(base + ST::offset(r, c + 1)) = (T)0.0f;
    } else {
      *(HK_LDS u32*)(base + ST::offset(r, c)) = 0u;
    }
  }
}

// The direct-to-LDS chunk that holds a matrix's last element straddles the end of the buffer
// when the matrix's unit-stride extent is not a whole number of chunks (e.g. K = 29 with 4-byte
// chunks, or M = 37 with 16-byte chunks). The range check of that load is per dword (or, on
// some parts, per access), so the valid elements sharing a dword (or the chunk) with bytes past
// the end read as 0. Rewrite that chunk element by element: lanes [0, CH / sizeof(T)) of the
// calling wave each load one element of shared-tile row r, chunk of column c_last, through a
// buffer over the tile (p, bytes_left) -- exact range check, past the end reads 0 -- and store it.
// The caller orders this after the tile's direct-to-LDS loads completed (a barrier) and before
// anyone reads the tile (a barrier).
template <int CH, typename ST>
HK_INLINE void fix_last_chunk(ST& dst, const typename ST::dtype* p, long long bytes_left, long long row_stride,
                              int r, int c_last) {
  using T = typename ST::dtype;
  static_assert(sizeof(T) == 2, "16-bit elements");
  constexpr int EPC = CH / (int)sizeof(T);
  const int l = lane_id();
  if (l < EPC) {
    const int c = (c_last / EPC) * EPC + l;
    const u32 off = (u32)(((long long)r * row_stride + c) * (long long)sizeof(T));
    const unsigned short v = __builtin_amdgcn_raw_buffer_load_b16(make_buffer(p, bytes_left), off, 0, 0);
    HK_LDS char* base = (HK_LDS char*)(HK_LDS void*)dst.data;
    *(HK_LDS unsigned short*)(base + ST::offset(r, c)) = v;
  }
}

// ---- registers -> global ------------------------------------------------------------------
// Accumulator tile to global (any strides), rows/cols beyond (rows_left, cols_left) skipped.
template <typename TO, typename T, int R, int C, typename S>
HK_INLINE void store(TO* dst, long long sr, long long sc, const rt<T, R, C, acc_l, S>& src, int rows_left, int cols_left) {
  const int l = lane_id();
#pragma unroll
  for (int i = 0; i < src.TR; ++i)
#pragma unroll
    for (int j = 0; j < src.TC; ++j)
#pragma unroll
      for (int v = 0; v < S::ACC; ++v) {
        const int r = i * S::MI + S::acc_row(v, l), c = j * S::MI + S::acc_col(l);
        if (r < rows_left && c < cols_left) dst[r * sr + c * sc] = from_float<TO>(to_float(src.t[i][j][v]));
      }
}
namespace detail {
// Four consecutive elements a..d (memory order) at p, converted to TO, as one 4 * sizeof(TO)-byte
// global store (global_store_dwordx2 for 16-bit TO, dwordx4 for fp32). The access is declared only
// sizeof(TO)-aligned, so it is correct at any element address: the HSA ABI runs CDNA in
// unaligned-access mode (LLVM's amdhsa targets assume it, and merge adjacent narrow stores the same
// way); an aligned address is one memory transaction.
template <typename TO>
HK_INLINE void st_global_run4(TO* p, float a, float b, float c, float d) {
  typedef TO run4 __attribute__((ext_vector_type(4), aligned(sizeof(TO))));
  *(__attribute__((address_space(1))) run4*)p =
      run4{from_float<TO>(a), from_float<TO>(b), from_float<TO>(c), from_float<TO>(d)};
}
}  // namespace detail

// Accumulator tile to global whose rows are unit-stride in memory (element (r, c) at
// dst[r + c * sc]): each group of 4 accumulator registers of a lane holds 4 consecutive rows of one
// column (acc_row(4n + u) = acc_row(4n) + u), stored as one 4-element access
// (detail::st_global_run4); a group cut by rows_left is stored element by element, columns beyond
// cols_left are skipped. Other strides: `store` above.
template <typename TO, typename T, int R, int C, typename S>
HK_INLINE void store_unit_rows(TO* dst, long long sc, const rt<T, R, C, acc_l, S>& src, int rows_left, int cols_left) {
  static_assert(S::ACC % 4 == 0, "accumulator registers in runs of 4 consecutive rows");
  const int l = lane_id();
#pragma unroll
  for (int i = 0; i < src.TR; ++i)
#pragma unroll
    for (int j = 0; j < src.TC; ++j) {
      const int c = j * S::MI + S::acc_col(l);
      if (c >= cols_left) continue;
#pragma unroll
      for (int n = 0; n < S::ACC; n += 4) {
        const int r = i * S::MI + S::acc_row(n, l);
        const vec<T, S::ACC>& a = src.t[i][j];
        if (r + 3 < rows_left) {
          detail::st_global_run4(dst + r + c * sc, to_float(a[n]), to_float(a[n + 1]), to_float(a[n + 2]),
                                 to_float(a[n + 3]));
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (r + u < rows_left) dst[r + u + c * sc] = from_float<TO>(to_float(a[n + u]));
        }
      }
    }
}

template <typename TO, typename T, int R, int C, typename S>
HK_INLINE void store(const gl<TO>& g, const rt<T, R, C, acc_l, S>& src, int r0, int c0) {
  store(g.at(0, 0, r0, c0), g.sr, g.sc, src, g.rows - r0, g.cols - c0);
}

// Global -> accumulator tile (bounds-checked; elements outside g get `fill`): the mirror of store.
template <typename TI, typename T, int R, int C, typename S>
HK_INLINE void load(rt<T, R, C, acc_l, S>& dst, const gl<TI>& g, int r0, int c0, float fill = 0.0f) {
  const int l = lane_id();
#pragma unroll
  for (int i = 0; i < dst.TR; ++i)
#pragma unroll
    for (int j = 0; j < dst.TC; ++j)
#pragma unroll
      for (int v = 0; v < S::ACC; ++v) {
        const int r = r0 + i * S::MI + S::acc_row(v, l), c = c0 + j * S::MI + S::acc_col(l);
        dst.t[i][j][v] = from_float<T>((r < g.rows && c < g.cols) ? to_float(g(0, 0, r, c)) : fill);
      }
}

// Global -> operand registers directly (bounds-checked, zero fill): simple path for small
// kernels. K of a row_l tile runs along global columns.
template <typename T, int R, int C, typename S>
HK_INLINE void load(rt<T, R, C, row_l, S>& dst, const gl<T>& g, int r0, int c0) {
  const int l = lane_id();
#pragma unroll
  for (int i = 0; i < dst.TMN; ++i)
#pragma unroll
    for (int k = 0; k < dst.TK; ++k)
#pragma unroll
      for (int j = 0; j < S::E; ++j) {
        const int r = r0 + i * S::MI + l % S::MI, c = c0 + k * S::MK + S::E * (l / S::MI) + j;
        dst.t[i][k][j] = (r < g.rows && c < g.cols) ? g(0, 0, r, c) : (T)0.0f;
      }
}

}  // namespace hk
