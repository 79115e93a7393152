// The tile loop of attnlab's CPU attention, compiled as a whole (see attnlab/core/loop.py).
//
// One task owns one block of query rows of one head (forward) or one K/V head (backward) and
// walks its key blocks in C++: the tile products are BLAS calls (the sgemm that libtorch_cpu
// carries, single-threaded inside torch's parallel region), the softmax of a tile is one pass
// of vectorizable loops, and nothing is issued per tile from Python. The eager tile loop of
// attnlab/core/backends/tiled.py is the reference it is tested against.
//
// Notation as there: scores are in log2 units (q carries scale * log2 e), so every exponential
// is exp2; the band keeps key j for query i when  i + off - left <= j <= i + off + right  (a
// side that is absent is passed as a huge number); lse is returned in natural units.
//
// Softcap c: s = c * tanh(s_nat / c) on the natural score, then times log2 e; the backward
// multiplies dS by 1 - tanh^2.
//
// Diagonal bias (attnlab/core/diagonal.py): a score modifier or mask function that depends on
// positions only through j - i comes as one value per diagonal and query head, diag (BH,
// N_q + N_k - 1) in log2 units, entry (j - i) + N_q - 1 added to score (i, j) after the
// softcap; -inf masks. The backward returns its gradient, dS summed along each diagonal.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc);

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kLog2e = 1.4426950408889634f;

// Row-major C (m x n) = alpha * A (m x k) . op(B) + beta * C, with op(B) = B^T when b_t
// (B stored n x k) else B (k x n). BLAS is column-major: C^T = op(B)^T A^T.
inline void gemm_rm(bool b_t, bool a_t, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const char tb = b_t ? 'T' : 'N';
  const char ta = a_t ? 'T' : 'N';
  sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// One SIMD register of floats (GCC/Clang vector extensions): 16 lanes where -march=native has
// AVX-512, else 8 (AVX2; SSE splits them in two). Loads and stores go through memcpy (no
// alignment assumed).
#if defined(__AVX512F__)
constexpr int W = 16;
#else
constexpr int W = 8;
#endif
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }
inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < W; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
inline float hsum(vf v) {
  float s = 0.0f;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

// 2^x, relative error below 2e-7 (0 below 2^-126, and for -inf): x = n + f with n the nearest
// integer, 2^f by a degree-7 polynomial on [-0.5, 0.5], 2^n added to the exponent bits.
inline vf exp2v(vf x) {
  const vi zero = x < -126.0f;
  x = zero ? splat(-126.0f) : x;
  x = x > 126.0f ? splat(126.0f) : x;
  const vf n = (x + 12582912.0f) - 12582912.0f;            // round to nearest (|x| < 2^22)
  const vf f = x - n;
  vf p = splat(1.5353362e-4f);
  p = p * f + 1.3398874e-3f;
  p = p * f + 9.6181291e-3f;
  p = p * f + 5.5504109e-2f;
  p = p * f + 2.4022651e-1f;
  p = p * f + 6.9314718e-1f;
  p = p * f + 1.0f;
  vi bits = reinterpret_cast<vi&>(p) + (__builtin_convertvector(n, vi) << 23);
  bits &= ~zero;
  return reinterpret_cast<vf&>(bits);
}

inline float exp2s(float x) {                      // one lane of exp2v
  vf v = exp2v(splat(x));
  return v[0];
}

struct Band {
  int64_t off, left, right, n_k;
  // keys [lo, hi) that row i keeps
  inline int64_t lo(int64_t i) const { return std::max<int64_t>(0, i + off - left); }
  inline int64_t hi(int64_t i) const { return std::min<int64_t>(n_k, i + off + right + 1); }
};

// Adds x[c] to y[c] for c < n.
inline void add_to(float* y, const float* x, int n) {
  int c = 0;
  for (; c + W <= n; c += W) store(y + c, load(y + c) + load(x + c));
  for (; c < n; ++c) y[c] += x[c];
}

// Scores of one tile (rows x cols, row stride ld, padded to wd = cols rounded up to W), in
// place: the softcap (natural units in, log2 units out; tanh kept for the backward, stride ld),
// the diagonal bias (dg[j - i] for score (i, j), or none), the band's -inf outside [lo, hi) of
// each row, and -inf in the padding columns cols .. wd - 1.
inline void finish_scores(float* s, int rows, int cols, int ld, int wd, int64_t i0, int64_t j0,
                          const Band& band, bool partial, float cap, float* tanh_out,
                          const float* dg) {
  if (cap > 0.0f) {
    const float inv = 1.0f / cap, out_scale = cap * kLog2e;
    for (int r = 0; r < rows; ++r) {
      float* row = s + static_cast<int64_t>(r) * ld;
      for (int c = 0; c < wd; c += W) {
        // tanh(y) = 1 - 2 / (2^(2 y log2 e) + 1), |y| clipped where tanh is +-1 in float32
        vf y = load(row + c) * inv;
        y = y > 9.0f ? splat(9.0f) : y;
        y = y < -9.0f ? splat(-9.0f) : y;
        const vf t = 1.0f - 2.0f / (exp2v(y * (2.0f * kLog2e)) + 1.0f);
        store(row + c, t * out_scale);
        if (tanh_out) store(tanh_out + static_cast<int64_t>(r) * ld + c, t);
      }
    }
  }
  if (dg != nullptr) {
    for (int r = 0; r < rows; ++r) add_to(s + static_cast<int64_t>(r) * ld, dg + (j0 - i0 - r),
                                          cols);
  }
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<int64_t>(r) * ld;
    int64_t lo = 0, hi = cols;
    if (partial) {
      lo = std::max<int64_t>(0, band.lo(i0 + r) - j0);
      hi = std::max<int64_t>(lo, std::min<int64_t>(cols, band.hi(i0 + r) - j0));
    }
    for (int64_t c = 0; c < std::min<int64_t>(lo, wd); ++c) row[c] = kNegInf;
    for (int64_t c = hi; c < wd; ++c) row[c] = kNegInf;
  }
}

inline int round_up(int64_t x) { return static_cast<int>((x + W - 1) / W * W); }

// Whether the tile [i0, i1) x [j0, j1) is kept whole / partly / not at all by the band.
inline int tile_kind(const Band& b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t lo_first = b.lo(i0), hi_last = b.hi(i1 - 1);
  if (j1 <= lo_first || j0 >= hi_last) return 0;                     // skip
  const int64_t lo_last = b.lo(i1 - 1), hi_first = b.hi(i0);
  if (j0 >= lo_last && j1 <= hi_first) return 2;                      // full
  return 1;                                                           // partial
}

// Calls f(j0, j1, kind) for each key block of query rows i0 .. i1-1 that the band reaches
// (kind 1: the band cuts the tile, 2: it covers it).
template <class F>
inline void for_tiles(const Band& band, int64_t i0, int64_t i1, int64_t block_k, int64_t NK,
                      F&& f) {
  const int64_t j_lo = (band.lo(i0) / block_k) * block_k, j_hi = band.hi(i1 - 1);
  for (int64_t j0 = j_lo; j0 < j_hi; j0 += block_k) {
    const int64_t j1 = std::min(NK, j0 + block_k);
    const int kind = tile_kind(band, i0, i1, j0, j1);
    if (kind != 0) f(j0, j1, kind);
  }
}

// Folds a tile row's largest score `top` into the row's running largest (`best`), its first
// key (`argmax`) and whether another key ties with it (`tied`).
inline void fold_max(const float* row, int cols, float top, int64_t j0, float& best,
                     int64_t& argmax, bool& tied) {
  if (top == kNegInf || top < best) return;
  int first = -1, count = 0;
  for (int c = 0; c < cols; ++c) {
    if (row[c] == top) {
      if (first < 0) first = c;
      ++count;
    }
  }
  if (top > best) {
    best = top;
    argmax = j0 + first;
    tied = count > 1;
  } else {
    tied = true;                                     // equal to an earlier tile's largest
  }
}

// Adds a tile row's weights p (keys j0 .. j1-1, query at aligned position pos) to its masses:
// m[0] the previous key, m[1] the key itself, m[2] the keys within band_w; with the token
// occurrences (occ: every position, sorted by token then position; g: where the query's token
// runs in occ, and whether it equals before[0]), over the keys before pos, m[3] the keys that
// follow an earlier copy of the token (prefix matching: before[j] = ids[j - 1] == token) and
// m[4] the copies. Only the copies are visited (two binary searches per row and tile), not
// every key.
inline void add_masses(const float* p, int64_t j0, int64_t j1, int64_t pos, int64_t band_w,
                       const int32_t* occ, const int32_t* g, float* m) {
  const int64_t lo = std::max<int64_t>(j0, pos - band_w);
  const int64_t hi = std::min<int64_t>(j1 - 1, pos + band_w);
  for (int64_t j = lo; j <= hi; ++j) {
    m[2] += p[j - j0];
    if (j == pos - 1) m[0] += p[j - j0];
    if (j == pos) m[1] += p[j - j0];
  }
  if (occ == nullptr) return;
  const int64_t stop = std::min<int64_t>(j1, pos);
  if (stop <= j0) return;
  const int32_t* a = occ + g[0];
  const int32_t* b = occ + g[1];
  float d_sum = 0.0f, m_sum = 0.0f;
  for (const int32_t* o = std::lower_bound(a, b, static_cast<int32_t>(j0)); o < b && *o < stop;
       ++o) {
    d_sum += p[*o - j0];
  }
  for (const int32_t* o = std::lower_bound(a, b, static_cast<int32_t>(j0 - 1));
       o < b && *o + 1 < stop; ++o) {
    m_sum += p[*o + 1 - j0];
  }
  if (j0 == 0 && g[2] != 0) m_sum += p[0];         // before[0] (no earlier key) is the token
  m[3] += m_sum;
  m[4] += d_sum;
}

// Adds a row of weights p (keys j0 .. j1-1, already times the row's keep) to the census's
// extras, each where asked (else nullptr): the column sums col (indexed by key), the pooled
// sums cs and maxima cm of the row's cells (ck keys wide), the row dst (indexed by key).
inline void add_extras(const float* p, int64_t j0, int64_t j1, float* col, float* cs,
                       float* cm, int64_t ck, float* dst) {
  const int n = static_cast<int>(j1 - j0);
  if (col != nullptr) add_to(col + j0, p, n);
  for (int64_t j = j0; cs != nullptr && j < j1;) {     // one cell's keys at a time
    const int64_t cell = j / ck, end = std::min(j1, (cell + 1) * ck);
    const float* x = p + (j - j0);
    const int len = static_cast<int>(end - j);
    vf vs = vf{}, vx = vf{};
    int c = 0;
    for (; c + W <= len; c += W) {
      const vf v = load(x + c);
      vs += v;
      vx = v > vx ? v : vx;
    }
    float sm = hsum(vs), mx = hmax(vx);
    for (; c < len; ++c) {
      sm += x[c];
      mx = x[c] > mx ? x[c] : mx;
    }
    cs[cell] += sm;
    cm[cell] = mx > cm[cell] ? mx : cm[cell];
    j = end;
  }
  if (dst != nullptr) std::memcpy(dst + j0, p, sizeof(float) * n);
}

}  // namespace

// out (BH, N_q, D_v), lse (BH, N_q) natural units.
// q (BH, N_q, D_k) already times scale (natural units when cap > 0, else times log2 e);
// k (BKV, N_k, D_k), v (BKV, N_k, D_v); query head bh reads K/V head bh / groups.
// With `stats`, the census's row statistics in the same loop, each accumulated unnormalized
// with the online softmax's rescaling and divided by the row's sum at the end: the entropy
// (from A = sum p (s - m), rescaled as A' = alpha (A + (m - m') S) when the shift moves from m
// to m', so H = log2 S - A / S in log2 units with no cancellation against m), the mean key
// position and the mass on keys [sink_start, sink_start + sink_count); with `masses` also
// (see fold_max and add_masses for what each is) the largest score (log2 units), its first key and
// ties, and the masses on the previous key, the key itself, the keys within band_w, prefix
// matches and duplicates (with the token occurrences, see add_masses). Every row then takes
// the shifted path.
// With `extras` (columns, pooled maps or rows: see add_extras), a task owns a whole head and
// keeps its query block's unnormalized weights for every key (block_q x N_k floats) with the
// shift each tile used; once the block's rows are done, each row is normalized tile by tile
// and added to the column sums, its pooled cells and the rows asked for, so no second pass
// recomputes the scores.
static std::vector<at::Tensor> forward_impl(at::Tensor q, at::Tensor k, at::Tensor v,
                                            int64_t groups, int64_t off, int64_t left,
                                            int64_t right, double cap, int64_t block_q,
                                            int64_t block_k, bool stats, at::Tensor occ,
                                            at::Tensor group, int64_t band_w,
                                            at::Tensor diag, int64_t sink_start,
                                            int64_t sink_count, bool with_masses,
                                            bool columns = false, at::Tensor keep = {},
                                            at::Tensor row_slot = {}, int64_t n_rows = 0,
                                            int64_t cq = 1, int64_t ck = 1, int64_t gq = 0,
                                            int64_t gk = 0) {
  TORCH_CHECK(q.dtype() == at::kFloat && k.dtype() == at::kFloat &&
              v.dtype() == at::kFloat, "the compiled tile loop takes float32");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
  const int64_t BH = q.size(0), NQ = q.size(1), DK = q.size(2), NK = k.size(1), DV = v.size(2);
  auto out = at::empty({BH, NQ, DV}, q.options());
  auto lse = at::empty({BH, NQ}, q.options());
  const Band band{off, left, right, NK};
  const int64_t nqb = (NQ + block_q - 1) / block_q;
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* lp = lse.data_ptr<float>();
  const float fcap = static_cast<float>(cap);
  const bool has_ids = stats && with_masses && occ.numel() > 0;
  constexpr int NS = 8;          // prev, self, local, match, dup masses; A; sum p j; sink mass
  if (has_ids) {
    occ = occ.to(at::kInt).contiguous();
    group = group.to(at::kInt).contiguous();
    TORCH_CHECK(group.dim() == 2 && group.size(1) == 3 && group.size(0) >= NQ,
                "group must be (N, 3) int32 with a row per query");
  }
  const int32_t* ocp = has_ids ? occ.data_ptr<int32_t>() : nullptr;
  const int32_t* grp = has_ids ? group.data_ptr<int32_t>() : nullptr;
  const bool has_diag = diag.numel() > 0;
  if (has_diag) {
    diag = diag.contiguous();
    TORCH_CHECK(diag.dtype() == at::kFloat && diag.dim() == 2 && diag.size(0) == BH &&
                diag.size(1) == NQ + NK - 1, "diag must be float32 (BH, N_q + N_k - 1)");
  }
  const float* dgp = has_diag ? diag.data_ptr<float>() : nullptr;
  // max |finite diag| per query head: widens the bound of rows that need no shift
  std::vector<float> dmax(BH, 0.0f);
  for (int64_t h = 0; has_diag && h < BH; ++h) {
    for (int64_t t = 0; t < NQ + NK - 1; ++t) {
      const float x = std::fabs(dgp[h * (NQ + NK - 1) + t]);
      if (std::isfinite(x)) dmax[h] = std::max(dmax[h], x);
    }
  }
  const int64_t n_st = stats ? BH : 0;
  auto best = at::full({n_st, NQ}, kNegInf, q.options());
  auto argmax = at::full({n_st, NQ}, -1, q.options().dtype(at::kLong));
  auto tied = at::zeros({n_st, NQ}, q.options().dtype(at::kBool));
  auto masses = at::zeros({NS, n_st, NQ}, q.options());
  float* bp = best.data_ptr<float>();
  int64_t* ap = argmax.data_ptr<int64_t>();
  bool* tp = tied.data_ptr<bool>();
  float* msp = masses.data_ptr<float>();
  // max_j |k_j| per K/V head (for the bound of rows that need no shift), by ATen's vectorized
  // and threaded reductions (a serial loop here cost about 1% of a forward at N = 4096)
  const auto kmax_t = k.mul(k).sum(-1).amax(-1).sqrt_().contiguous();
  const float* kmax = kmax_t.data_ptr<float>();
  const bool has_keep = stats && keep.defined() && keep.numel() > 0;
  const bool has_rows = stats && row_slot.defined() && row_slot.numel() > 0;
  const bool pooled = stats && gk > 0;
  const bool extras = stats && (columns || pooled || has_rows);
  if (has_keep) keep = keep.contiguous();
  if (has_rows) row_slot = row_slot.contiguous();
  auto received = at::zeros({columns && stats ? BH : 0, NK}, q.options());
  auto p_sum = at::zeros({pooled ? BH : 0, gq * gk}, q.options());
  auto p_max = at::zeros({pooled ? BH : 0, gq * gk}, q.options());
  auto row_w = at::zeros({has_rows ? BH : 0, n_rows, NK}, q.options());
  const float* kpp = has_keep ? keep.data_ptr<float>() : nullptr;
  const int64_t* slp = has_rows ? row_slot.data_ptr<int64_t>() : nullptr;
  float* rc = columns && stats ? received.data_ptr<float>() : nullptr;
  float* ps = pooled ? p_sum.data_ptr<float>() : nullptr;
  float* pm = pooled ? p_max.data_ptr<float>() : nullptr;
  float* rw = has_rows ? row_w.data_ptr<float>() : nullptr;
  const int ldk = round_up(block_k);
  const int ldb = extras ? round_up(NK) + W : 0;          // a block's weights, every key
  const int64_t n_kt = (NK + block_k - 1) / block_k + 1;  // key tiles a block may visit
  auto task = [&](int64_t begin, int64_t end) {
    std::vector<float> s(extras ? block_q * static_cast<int64_t>(ldb) : block_q * ldk);
    std::vector<float> acc(block_q * DV), mx(block_q), sum(block_q);
    std::vector<float> mt(extras ? n_kt * block_q : 0);   // the shift of each tile's weights
    std::vector<int64_t> visited;
    std::vector<char> fixed(block_q);
    std::vector<float> mass(stats ? NS * block_q : 0);
    vf iota;
    for (int x = 0; x < W; ++x) iota[x] = static_cast<float>(x);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bh = t / nqb, i0 = (t % nqb) * block_q, i1 = std::min(NQ, i0 + block_q);
      const int rows = static_cast<int>(i1 - i0);
      const float* qb = qp + (bh * NQ + i0) * DK;
      const float* kh = kp + (bh / groups) * NK * DK;
      const float* vh = vp + (bh / groups) * NK * DV;
      std::fill(acc.begin(), acc.begin() + rows * DV, 0.0f);
      std::fill(sum.begin(), sum.begin() + rows, 0.0f);
      std::fill(mass.begin(), mass.end(), 0.0f);
      // Rows whose every score is bounded by 64 in log2 units need no shift: 2^s stays within
      // [2^-64, 2^64], so the row's maximum is never taken (mx = 0 throughout). The bound is
      // the cap, or |q_i| max_j |k_j| (Cauchy-Schwarz) without one.
      for (int r = 0; r < rows; ++r) {
        float bound = fcap > 0.0f ? fcap * kLog2e : 0.0f;
        if (fcap == 0.0f) {
          const float* qr = qb + static_cast<int64_t>(r) * DK;
          float n2 = 0.0f;
          for (int d = 0; d < DK; ++d) n2 += qr[d] * qr[d];
          bound = std::sqrt(n2) * kmax[bh / groups];
        }
        bound += dmax[bh];
        fixed[r] = !stats && bound <= 64.0f;
        mx[r] = fixed[r] ? 0.0f : kNegInf;
      }
      const int64_t j_lo = (band.lo(i0) / block_k) * block_k, j_hi = band.hi(i1 - 1);
      visited.clear();
      for (int64_t j0 = j_lo; j0 < j_hi; j0 += block_k) {
        const int64_t j1 = std::min(NK, j0 + block_k);
        const int kind = tile_kind(band, i0, i1, j0, j1);
        if (kind == 0) continue;
        const int cols = static_cast<int>(j1 - j0), wd = round_up(cols);
        const int ld = extras ? ldb : wd;
        float* sb = s.data() + (extras ? j0 : 0);
        gemm_rm(true, false, rows, cols, DK, 1.0f, qb, DK, kh + j0 * DK, DK, 0.0f, sb, ld);
        finish_scores(sb, rows, cols, ld, wd, i0, j0, band, kind == 1, fcap, nullptr,
                      has_diag ? dgp + bh * (NQ + NK - 1) + NQ - 1 : nullptr);
        for (int r = 0; r < rows; ++r) {
          float* row = sb + static_cast<int64_t>(r) * ld;
          if (fixed[r]) {                            // no shift: 2^s summed as it comes
            vf vl = vf{};
            for (int c = 0; c < wd; c += W) {
              const vf p = exp2v(load(row + c));
              store(row + c, p);
              vl += p;
            }
            sum[r] += hsum(vl);
            continue;
          }
          vf vm = splat(kNegInf);
          for (int c = 0; c < wd; c += W) {
            const vf x = load(row + c);
            vm = x > vm ? x : vm;
          }
          const float top = hmax(vm);
          const float m_new = top > mx[r] ? top : mx[r];
          const int64_t i = i0 + r, at = bh * NQ + i;
          if (stats && with_masses) fold_max(row, cols, top, j0, bp[at], ap[at], tp[at]);
          if (m_new == kNegInf) {                    // nothing kept yet: P = 0 on this tile
            std::fill(row, row + wd, 0.0f);
            continue;
          }
          vf vl = vf{}, va = vf{}, vj = vf{};
          if (stats) {
            for (int c = 0; c < wd; c += W) {
              vf x = load(row + c) - m_new;
              const vf p = exp2v(x);
              store(row + c, p);
              vl += p;
              x = x < -200.0f ? splat(-200.0f) : x;   // p = 0 there: no -inf * 0
              va += p * x;
              vj += p * (iota + static_cast<float>(c));
            }
          } else {
            for (int c = 0; c < wd; c += W) {
              const vf p = exp2v(load(row + c) - m_new);
              store(row + c, p);
              vl += p;
            }
          }
          if (m_new > mx[r]) {
            const float alpha = mx[r] == kNegInf ? 0.0f : exp2s(mx[r] - m_new);
            float* a = acc.data() + static_cast<int64_t>(r) * DV;
            for (int d = 0; d < DV; ++d) a[d] *= alpha;
            if (stats) {
              float& A = mass[5 * block_q + r];
              A = mx[r] == kNegInf ? 0.0f : alpha * (A + (mx[r] - m_new) * sum[r]);
              for (int x = 0; x < NS; ++x) if (x != 5) mass[x * block_q + r] *= alpha;
            }
            sum[r] *= alpha;
            mx[r] = m_new;
          }
          const float tile_sum = hsum(vl);
          sum[r] += tile_sum;
          if (stats) {
            mass[5 * block_q + r] += hsum(va);
            mass[6 * block_q + r] += hsum(vj) + static_cast<float>(j0) * tile_sum;
            const int64_t s_lo = std::max(j0, sink_start);
            const int64_t s_hi = std::min(j1, sink_start + sink_count);
            for (int64_t j = s_lo; j < s_hi; ++j) mass[7 * block_q + r] += row[j - j0];
          }
          if (stats && with_masses) {
            float m[5] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            add_masses(row, j0, j1, i + off, band_w, ocp, has_ids ? grp + 3 * i : nullptr, m);
            for (int x = 0; x < 5; ++x) mass[x * block_q + r] += m[x];
          }
        }
        if (DV > 0) {
          gemm_rm(false, false, rows, DV, cols, 1.0f, sb, ld, vh + j0 * DV, DV, 1.0f,
                  acc.data(), DV);
        }
        if (extras) {                                // the shift these weights carry
          float* m_t = mt.data() + static_cast<int64_t>(visited.size()) * block_q;
          for (int r = 0; r < rows; ++r) m_t[r] = mx[r];
          visited.push_back(j0);
        }
      }
      for (int r = 0; r < rows; ++r) {
        float* o = op + (bh * NQ + i0 + r) * DV;
        const float* a = acc.data() + static_cast<int64_t>(r) * DV;
        if (sum[r] > 0.0f) {
          const float inv = 1.0f / sum[r];
          for (int d = 0; d < DV; ++d) o[d] = a[d] * inv;
          lp[bh * NQ + i0 + r] = (mx[r] + std::log2(sum[r])) * kLn2;
          if (stats) {
            for (int x = 0; x < NS; ++x)
              msp[(x * BH + bh) * NQ + i0 + r] = mass[x * block_q + r] * inv;
            // the entropy in natural units: (log2 S - A / S) ln 2, not below 0
            float& h = msp[(5 * BH + bh) * NQ + i0 + r];
            h = std::max(0.0f, (std::log2(sum[r]) - h) * kLn2);
          }
        } else {                                     // a row that keeps no key
          std::fill(o, o + DV, 0.0f);
          lp[bh * NQ + i0 + r] = kNegInf;
        }
      }
      for (int r = 0; extras && r < rows; ++r) {     // normalized, then into the extras
        const int64_t i = i0 + r, at = bh * NQ + i;
        const float kf = has_keep ? kpp[at] : 1.0f;
        if (!(sum[r] > 0.0f) || kf == 0.0f) continue;
        float* row = s.data() + static_cast<int64_t>(r) * ldb;
        float* cs = pooled ? ps + (bh * gq + i / cq) * gk : nullptr;
        float* cm = pooled ? pm + (bh * gq + i / cq) * gk : nullptr;
        float* dst = has_rows && slp[i] >= 0 ? rw + (bh * n_rows + slp[i]) * NK : nullptr;
        for (size_t x = 0; x < visited.size(); ++x) {
          const int64_t j0 = visited[x], j1 = std::min(NK, j0 + block_k);
          const float f = exp2s(mt[x * block_q + r] - mx[r]) * (kf / sum[r]);
          float* seg = row + j0;
          const int n = static_cast<int>(j1 - j0);
          int c = 0;
          for (; c + W <= n; c += W) store(seg + c, load(seg + c) * f);
          for (; c < n; ++c) seg[c] *= f;
          add_extras(seg, j0, j1, rc != nullptr ? rc + bh * NK : nullptr, cs, cm, ck, dst);
        }
      }
    }
  };
  if (extras) {            // a task per head: it owns the head's columns, cells and rows
    at::parallel_for(0, BH, 1, [&](int64_t b0, int64_t b1) { task(b0 * nqb, b1 * nqb); });
  } else {
    at::parallel_for(0, BH * nqb, 1, task);
  }
  if (!stats) return {out, lse};
  return {out, lse, best, argmax, tied, masses, received, p_sum, p_max, row_w};
}

std::vector<at::Tensor> forward(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor diag,
                                int64_t groups, int64_t off, int64_t left, int64_t right,
                                double cap, int64_t block_q, int64_t block_k) {
  return forward_impl(q, k, v, groups, off, left, right, cap, block_q, block_k, false,
                      at::Tensor(), at::Tensor(), 0, diag, 0, 0, false);
}

std::vector<at::Tensor> forward_stats(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor occ,
                                      at::Tensor group, at::Tensor keep, at::Tensor row_slot,
                                      int64_t n_rows, int64_t groups, int64_t off,
                                      int64_t left, int64_t right, int64_t band_w,
                                      int64_t sink_start, int64_t sink_count, bool masses,
                                      bool columns, int64_t cq, int64_t ck, int64_t gq,
                                      int64_t gk, int64_t block_q, int64_t block_k) {
  return forward_impl(q, k, v, groups, off, left, right, 0.0, block_q, block_k, true, occ,
                      group, band_w, at::Tensor(), sink_start, sink_count, masses, columns,
                      keep, row_slot, n_rows, cq, ck, gq, gk);
}

// (dq, dk, dv) of the forward above, unscaled by the score scale c (the caller multiplies dq
// and dk by it). q as in the forward (times scale, natural when cap > 0); q_raw the unscaled
// q (for dk); lse natural; delta = rowsum(dO * O) - dlse. One task per K/V head: it owns its
// dk and dv (and the diagonal bias's gradient of those heads, with diag_grad) and walks the
// G query heads that read it.
std::vector<at::Tensor> backward(at::Tensor q, at::Tensor q_raw, at::Tensor k,
                                    at::Tensor v, at::Tensor diag, at::Tensor lse,
                                    at::Tensor d_out, at::Tensor delta, int64_t groups,
                                    int64_t off, int64_t left, int64_t right, double cap,
                                    int64_t block_q, int64_t block_k, bool diag_grad) {
  q = q.contiguous(); q_raw = q_raw.contiguous(); k = k.contiguous(); v = v.contiguous();
  lse = lse.contiguous(); d_out = d_out.contiguous(); delta = delta.contiguous();
  const int64_t BH = q.size(0), NQ = q.size(1), DK = q.size(2), NK = k.size(1), DV = v.size(2);
  const int64_t BKV = k.size(0);
  auto dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  const bool has_diag = diag.numel() > 0;
  if (has_diag) diag = diag.contiguous();
  const int64_t L = NQ + NK - 1;
  auto ddiag = at::zeros({has_diag && diag_grad ? BH : 0, L}, q.options());
  const float* dgp = has_diag ? diag.data_ptr<float>() : nullptr;
  float* ddp = has_diag && diag_grad ? ddiag.data_ptr<float>() : nullptr;
  const Band band{off, left, right, NK};
  const float fcap = static_cast<float>(cap);
  const float* qp = q.data_ptr<float>();
  const float* qrp = q_raw.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const float* lp = lse.data_ptr<float>();
  const float* dop = d_out.data_ptr<float>();
  const float* dlp = delta.data_ptr<float>();
  float* dqp = dq.data_ptr<float>();
  float* dkp = dk.data_ptr<float>();
  float* dvp = dv.data_ptr<float>();
  const int ldk = round_up(block_k);
  at::parallel_for(0, BKV, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> p(block_q * ldk), dp(block_q * ldk), th(block_q * ldk), shift(block_q);
    for (int64_t kvh = begin; kvh < end; ++kvh) {
      const float* kh = kp + kvh * NK * DK;
      const float* vh = vp + kvh * NK * DV;
      float* dkh = dkp + kvh * NK * DK;
      float* dvh = dvp + kvh * NK * DV;
      for (int64_t bh = kvh * groups; bh < (kvh + 1) * groups; ++bh) {
        for (int64_t i0 = 0; i0 < NQ; i0 += block_q) {
          const int64_t i1 = std::min(NQ, i0 + block_q);
          const int rows = static_cast<int>(i1 - i0);
          const float* qb = qp + (bh * NQ + i0) * DK;
          const float* qrb = qrp + (bh * NQ + i0) * DK;
          const float* dob = dop + (bh * NQ + i0) * DV;
          float* dqb = dqp + (bh * NQ + i0) * DK;
          for (int r = 0; r < rows; ++r) {
            const float l = lp[bh * NQ + i0 + r];
            shift[r] = l == kNegInf ? std::numeric_limits<float>::infinity() : l * kLog2e;
          }
          for_tiles(band, i0, i1, block_k, NK, [&](int64_t j0, int64_t j1, int kind) {
            const int cols = static_cast<int>(j1 - j0), ld = round_up(cols);
            gemm_rm(true, false, rows, cols, DK, 1.0f, qb, DK, kh + j0 * DK, DK, 0.0f, p.data(),
                    ld);
            finish_scores(p.data(), rows, cols, ld, ld, i0, j0, band, kind == 1, fcap,
                          fcap > 0.0f ? th.data() : nullptr,
                          has_diag ? dgp + bh * L + NQ - 1 : nullptr);
            for (int r = 0; r < rows; ++r) {            // P = 2^(S - lse log2 e), 0 if masked
              float* row = p.data() + static_cast<int64_t>(r) * ld;
              const float sh = shift[r];
              for (int c = 0; c < ld; c += W) store(row + c, exp2v(load(row + c) - sh));
            }
            // dV += P^T dO
            gemm_rm(false, true, cols, DV, rows, 1.0f, p.data(), ld, dob, DV, 1.0f,
                    dvh + j0 * DV, DV);
            // dP = dO V^T
            gemm_rm(true, false, rows, cols, DV, 1.0f, dob, DV, vh + j0 * DV, DV, 0.0f,
                    dp.data(), ld);
            for (int r = 0; r < rows; ++r) {            // dS = P (dP - D) [(1 - t^2)]
              float* ds = dp.data() + static_cast<int64_t>(r) * ld;
              const float* pr = p.data() + static_cast<int64_t>(r) * ld;
              const float dl = dlp[bh * NQ + i0 + r];
              if (fcap > 0.0f || ddp != nullptr) {
                // the diagonal's gradient is dS after the cap, before its 1 - t^2
                for (int c = 0; c < ld; c += W) store(ds + c, load(pr + c) * (load(ds + c) - dl));
                if (ddp != nullptr) add_to(ddp + bh * L + NQ - 1 + (j0 - i0 - r), ds, cols);
                if (fcap > 0.0f) {
                  const float* t = th.data() + static_cast<int64_t>(r) * ld;
                  for (int c = 0; c < ld; c += W) {
                    const vf tv = load(t + c);
                    store(ds + c, load(ds + c) * (1.0f - tv * tv));
                  }
                }
              } else {
                for (int c = 0; c < ld; c += W)
                  store(ds + c, load(pr + c) * (load(ds + c) - dl));
              }
            }
            // dQ += dS K ; dK += dS^T Q
            gemm_rm(false, false, rows, DK, cols, 1.0f, dp.data(), ld, kh + j0 * DK, DK, 1.0f,
                    dqb, DK);
            gemm_rm(false, true, cols, DK, rows, 1.0f, dp.data(), ld, qrb, DK, 1.0f,
                    dkh + j0 * DK, DK);
          });
        }
      }
    }
  });
  return {dq, dk, dv, ddiag};
}

// The rows a census picks from the forward's maxima (attnlab/core/stats.py), once every row's
// shift = lse in log2 units is known: for each query with row_slot[i] >= 0, its whole weight
// row P = 2^(S - shift) times the row's `keep` into row n_rows' slot. One task per head; only
// the query blocks that hold such a row are computed.
at::Tensor rows_pass(at::Tensor q, at::Tensor k, at::Tensor shift, at::Tensor keep,
                     at::Tensor row_slot, int64_t n_rows, int64_t groups, int64_t off,
                     int64_t left, int64_t right, int64_t block_q, int64_t block_k) {
  TORCH_CHECK(q.dtype() == at::kFloat && k.dtype() == at::kFloat && shift.dtype() == at::kFloat,
              "the compiled rows pass takes float32");
  q = q.contiguous(); k = k.contiguous(); shift = shift.contiguous();
  row_slot = row_slot.contiguous();
  const int64_t BH = q.size(0), NQ = q.size(1), DK = q.size(2), NK = k.size(1);
  const bool has_keep = keep.numel() > 0;
  if (has_keep) keep = keep.contiguous();
  auto row_w = at::zeros({BH, n_rows, NK}, q.options());
  const Band band{off, left, right, NK};
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* shp = shift.data_ptr<float>();
  const float* kpp = has_keep ? keep.data_ptr<float>() : nullptr;
  const int64_t* slp = row_slot.data_ptr<int64_t>();
  float* rw = row_w.data_ptr<float>();
  const int ldk = round_up(block_k);
  at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(block_q * ldk);
    for (int64_t bh = begin; bh < end; ++bh) {
      const float* kh = kp + (bh / groups) * NK * DK;
      for (int64_t i0 = 0; i0 < NQ; i0 += block_q) {
        const int64_t i1 = std::min(NQ, i0 + block_q);
        const int rows = static_cast<int>(i1 - i0);
        bool any = false;
        for (int64_t x = i0; x < i1 && !any; ++x) any = slp[x] >= 0;
        if (!any) continue;
        const float* qb = qp + (bh * NQ + i0) * DK;
        for_tiles(band, i0, i1, block_k, NK, [&](int64_t j0, int64_t j1, int kind) {
          const int cols = static_cast<int>(j1 - j0), ld = round_up(cols);
          gemm_rm(true, false, rows, cols, DK, 1.0f, qb, DK, kh + j0 * DK, DK, 0.0f, s.data(),
                  ld);
          finish_scores(s.data(), rows, cols, ld, ld, i0, j0, band, kind == 1, 0.0f, nullptr,
                        nullptr);
          for (int r = 0; r < rows; ++r) {
            const int64_t i = i0 + r, at = bh * NQ + i;
            if (slp[i] < 0) continue;
            float* row = s.data() + static_cast<int64_t>(r) * ld;
            const float sh = shp[at];
            const float kf = has_keep ? kpp[at] : 1.0f;
            float* dst = rw + (bh * n_rows + slp[i]) * NK + j0;
            for (int c = 0; c < ld; c += W) store(row + c, exp2v(load(row + c) - sh));
            for (int c = 0; c < cols; ++c) dst[c] += row[c] * kf;
          }
        });
      }
    }
  });
  return row_w;
}

TORCH_LIBRARY(attnlab_loop, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor diag, int groups, int off, int left, "
        "int right, float cap, int block_q, int block_k) -> Tensor[]", &forward);
  m.def("backward(Tensor q, Tensor q_raw, Tensor k, Tensor v, Tensor diag, Tensor lse, "
        "Tensor d_out, Tensor delta, int groups, int off, int left, int right, float cap, "
        "int block_q, int block_k, bool diag_grad) -> Tensor[]", &backward);
  m.def("forward_stats(Tensor q, Tensor k, Tensor v, Tensor occ, Tensor group, Tensor keep, "
        "Tensor row_slot, int n_rows, int groups, int off, int left, int right, int band, "
        "int sink_start, int sink_count, bool masses, bool columns, int cq, int ck, int gq, "
        "int gk, int block_q, int block_k) -> Tensor[]", &forward_stats);
  m.def("rows_pass(Tensor q, Tensor k, Tensor shift, Tensor keep, Tensor row_slot, "
        "int n_rows, int groups, int off, int left, int right, int block_q, int block_k) "
        "-> Tensor", &rows_pass);
}
