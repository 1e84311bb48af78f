#pragma once
// hk/cdna/types.hpp: register tiles, shared tiles (swizzled), global layouts, vectors.
namespace hk {

// ---- register tile layouts ----------------------------------------------------------------
// row_l: an MFMA operand whose K index runs along the tile's columns (A as M x K, or B^T as N x K).
// col_l: an MFMA operand whose K index runs along the tile's rows   (A^T as K x M, or B as K x N).
// acc_l: an MFMA accumulator (M x N).
// row_l and col_l tiles hold the same registers for the same data; only the indexing differs,
// which is what lets mma_AB / mma_ABt / mma_AtB / mma_AtBt share one instruction loop.
struct row_l {};
struct col_l {};
struct acc_l {};

template <typename T, int R, int C, typename L = row_l, typename S = default_shape>
struct rt;

// Operand tiles: storage t[mn subtile][k subtile], each subtile one MFMA operand (E per lane).
template <typename T, int R, int C, typename L, typename S>
  requires(same_t<L, row_l>::value || same_t<L, col_l>::value)
struct rt<T, R, C, L, S> {
  using dtype = T;
  using layout = L;
  using shape = S;
  static constexpr int rows = R, cols = C;
  static constexpr int MN = same_t<L, row_l>::value ? R : C;   // extent along M (or N)
  static constexpr int KD = same_t<L, row_l>::value ? C : R;   // extent along K
  static constexpr int TMN = MN / S::MI, TK = KD / S::MK;
  static_assert(MN % S::MI == 0 && KD % S::MK == 0, "register tile must be a whole number of MFMA operands");
  vec<T, S::E> t[TMN][TK];
  template <typename U> using retype = rt<U, R, C, L, S>;
  // Flat element view (common/regs.hpp): element i is t[i / (TK E)][(i / E) % TK][i % E].
  static constexpr int n_elems = TMN * TK * S::E;
  HK_INLINE float get(int i) const { return to_float(t[i / (TK * S::E)][(i / S::E) % TK][i % S::E]); }
  HK_INLINE void set(int i, float v) { t[i / (TK * S::E)][(i / S::E) % TK][i % S::E] = from_float<T>(v); }
};

// Accumulator tiles: storage t[row subtile][col subtile], MI x MI each, ACC registers per lane.
template <typename T, int R, int C, typename S>
struct rt<T, R, C, acc_l, S> {
  using dtype = T;
  using layout = acc_l;
  using shape = S;
  static constexpr int rows = R, cols = C;
  static constexpr int TR = R / S::MI, TC = C / S::MI;
  static_assert(R % S::MI == 0 && C % S::MI == 0, "accumulator tile must be a whole number of MFMA outputs");
  vec<T, S::ACC> t[TR][TC];
  template <typename U> using retype = rt<U, R, C, acc_l, S>;
  using rvec = tile_vec<rt<float, R, C, acc_l, S>, 0>;
  using cvec = tile_vec<rt<float, R, C, acc_l, S>, 1>;
  // Flat element view (common/regs.hpp): element i is t[i / (TC ACC)][(i / ACC) % TC][i % ACC],
  // at row (i / (TC ACC)) MI + acc_row(i % ACC, lane), column ((i / ACC) % TC) MI + lane % MI.
  static constexpr int n_elems = TR * TC * S::ACC;
  HK_INLINE float get(int i) const { return to_float(t[i / (TC * S::ACC)][(i / S::ACC) % TC][i % S::ACC]); }
  HK_INLINE void set(int i, float v) { t[i / (TC * S::ACC)][(i / S::ACC) % TC][i % S::ACC] = from_float<T>(v); }
  // A lane holds ACC rows of every row subtile and one column of every column subtile.
  static constexpr int row_slots = TR * S::ACC, col_slots = TC;
  HK_HD static constexpr int row_slot(int i) { return (i / (TC * S::ACC)) * S::ACC + i % S::ACC; }
  HK_HD static constexpr int col_slot(int i) { return (i / S::ACC) % TC; }
  // A row lives in the MI adjacent lanes of one lane group; a column in the lanes l % MI.
  template <class Op> HK_INLINE static void finish_rows(float (&v)[row_slots]) {
#pragma unroll
    for (int s = 0; s < row_slots; ++s) v[s] = detail::lane_allreduce<S::MI, Op>(v[s]);
  }
  template <class Op> HK_INLINE static void finish_cols(float (&v)[col_slots]) {
#pragma unroll
    for (int s = 0; s < col_slots; ++s)
#pragma unroll
      for (int m = S::MI; m < WAVE; m <<= 1) v[s] = Op::apply(v[s], shfl_xor(v[s], m));
  }
};

template <int R, int C, typename S = default_shape> using rt_acc = rt<float, R, C, acc_l, S>;

// ---- shared-tile swizzles -----------------------------------------------------------------
// A swizzle XORs the index of a U-byte unit inside a row with f(row); unit U is at least the
// direct-to-LDS chunk (so each lane's chunk stays contiguous) and at least the LDS read width.
// The mapping is an involution per row, so the same function maps LDS -> logical.
// f(r, units) gets the number of units per row; the tile masks f to [0, units).
struct swz_none {
  static constexpr int unit = 16;
  HK_INLINE static constexpr int f(int, int) { return 0; }
};
// K-major operand read with 16-byte ds_read_b128, one row per lane of a 16-lane group
// (gfx950, 64 banks: 256-byte period). 128-byte rows: also conflict-free for 8-lane phases on
// 32 banks. Otherwise rows sharing a bank period get distinct units.
struct swz_k16 {
  static constexpr int unit = 16;
  HK_INLINE static constexpr int f(int r, int units) {
    return units == 8 ? (r ^ (r >> 3)) & 7 : (r / (units >= 16 ? 1 : 16 / units)) & (units - 1);
  }
};
// K-major operand read with 8-byte ds_read_b64 by 16 consecutive rows (gfx942, 32 banks:
// 128-byte period of 16 units): the 16 rows land on 16 distinct 8-byte bank pairs.
struct swz_k8 {
  static constexpr int unit = 8;
  HK_INLINE static constexpr int f(int r, int units) { return (r / (units >= 16 ? 1 : 16 / units)) & (units - 1); }
};
// MN-major operand read with ds_read_b64_tr_b16 (gfx950): one instruction reads rows
// {8q + 0..3} x 32 bytes for q = 0..3; each 32-lane half lands on 16 distinct 16-byte units
// of a 256-byte bank period.
struct swz_mn_tr {
  static constexpr int unit = 16;
  HK_INLINE static constexpr int f(int r, int) { return 2 * ((r & 3) | ((r >> 1) & 4)); }
};
// MN-major operand read element-wise (gfx942): rows {4q + j} x 32 bytes per instruction go to
// the 4 distinct 32-byte quarters of the 128-byte bank period.
struct swz_mn_u16 {
  static constexpr int unit = 32;
  HK_INLINE static constexpr int f(int r, int) { return (r >> 2) & 3; }
};

// ---- shared tile --------------------------------------------------------------------------
template <typename T, int R, int C, typename Swz = swz_none>
struct st {
  using dtype = T;
  using swizzle = Swz;
  static constexpr int rows = R, cols = C;
  static constexpr int row_bytes = C * (int)sizeof(T);
  static constexpr int bytes = R * row_bytes;
  static constexpr int units = row_bytes / Swz::unit;          // units per row
  static_assert(row_bytes % Swz::unit == 0, "row must be a whole number of swizzle units");
  static_assert((units & (units - 1)) == 0, "units per row must be a power of two");
  // Byte offset of logical element (r, c) inside the tile.
  HK_INLINE static constexpr int offset(int r, int c) {
    const int b = c * (int)sizeof(T);
    return r * row_bytes + (((b / Swz::unit) ^ (Swz::f(r, units) & (units - 1))) * Swz::unit) + b % Swz::unit;
  }
  // Logical column of the byte at (row r, byte b of that row in LDS): the swizzle's inverse.
  HK_INLINE static constexpr int col_of(int r, int b) {
    return ((((b / Swz::unit) ^ (Swz::f(r, units) & (units - 1))) * Swz::unit) + b % Swz::unit) / (int)sizeof(T);
  }
  alignas(16) T data[R * C];
  HK_INLINE u32 lds_addr() const { return (u32)(unsigned long long)(const HK_LDS void*)data; }
};

template <typename T, int N>
struct sv {
  alignas(16) T data[N];
};

// ---- global layout ------------------------------------------------------------------------
// (batch, depth, rows, cols) with runtime extents and element strides.
template <typename T>
struct gl {
  T* ptr;
  int batch, depth, rows, cols;
  long long sb, sd, sr, sc;
  HK_INLINE T& operator()(int b, int d, int r, int c) const { return ptr[b * sb + d * sd + r * sr + c * sc]; }
  HK_INLINE T* at(int b, int d, int r, int c) const { return ptr + (b * sb + d * sd + r * sr + c * sc); }
  // Bytes from `at(b, d, r, c)` to one past the last element of the (b, d) matrix.
  HK_INLINE long long bytes_after(int b, int d, int r, int c) const {
    const long long last = b * sb + d * sd + (long long)(rows - 1) * sr + (long long)(cols - 1) * sc + 1;
    return (last - (b * sb + d * sd + r * sr + c * sc)) * (long long)sizeof(T);
  }
};
template <typename T>
HK_INLINE gl<T> make_gl(T* p, int rows, int cols, long long sr, long long sc) {
  return gl<T>{p, 1, 1, rows, cols, 0, 0, sr, sc};
}

}  // namespace hk
