// sgemm_avx512.c: our own fp32 GEMM for AVX-512 CPUs (BLIS-style blocking: packed panels of A and
// B, a 14x32 register-tile micro-kernel). It does not depend on OpenBLAS's CPU detection, which
// falls back to generic SSE3 kernels on CPUs it does not know. Row-major; any transposition is
// absorbed by the packing routines, which read A(i, k) = A[i*rs_a + k*cs_a]. Small products skip
// packing what does not repay it: A is read in place when few B panels sweep it (A_IN_PLACE_MAX_N),
// and x W^T with few rows of x is computed as W x^T (W read in place, tiles stored transposed). Every
// form multiplies and adds the same values in the same order: the results are bit-identical.
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "device/cpu/avx512_transpose.h"
#include "device/cpu/cpu_kernels.h"

#define MR CPU_SGEMM_MR
#define NR CPU_SGEMM_NR
#define KC CPU_SGEMM_KC
#define MC CPU_SGEMM_MC
#define NC CPU_SGEMM_NC
#define A_IN_PLACE_MAX_N 512
#define A_COLS_IN_PLACE_MAX_K 512
#define A_ROWS_ALIAS_PACK_MIN_N 256

#define AVX512 __attribute__((target("avx512f")))

enum { A_PACKED, A_ROWS, A_COLS };  // where the micro-kernel reads A: packed panels, or A itself
// A one-thread product with at most this many columns reads A where it lies (rows or columns
// contiguous, alpha 1) instead of packing it: each A panel is swept by only N / NR <= 16 B panels, too
// few to repay its copy. Zen 5, 2 ranks x 1 thread: the seed model's step (M 128: linear2's forward
// and linear1's input gradient read 128 x 2048 activations once each) 1-4% faster, the GPT bench
// model's unchanged; reading A in place also for N 1536-2048 made the GPT step 2-5% slower.
// A whose columns are contiguous (a weight gradient X^T dY: each k of a panel is another row of X) is
// read in place only for K <= A_COLS_IN_PLACE_MAX_K: with a power-of-two row length (512, 2048 floats)
// the rows a KC = 1024 panel walks fall into a few cache sets and evict each other. Zen 5, one thread,
// operands evicted first, 20 alternating calls: the GPT bench model's 2048 x 512 x 2048 and 512 x 512 x
// 2048 weight gradients 168 and 170 GFLOP/s in place, 186 and 181 packed; at K <= 512 (the seed
// model's 128) in place is as fast or faster.
// A with its rows contiguous whose row length is a multiple of 1024 floats (4 KiB: fc2's input and fc1's
// output gradient in the GPT bench model, 2048) is packed when N >= A_ROWS_ALIAS_PACK_MIN_N: the 14 rows
// a panel reads at once then sit in one L1 set (12 ways), and the lines they need evict each other.
// Zen 5, one thread, 2048 x 512 x 2048: as fast either way on one vCPU (181 GFLOP/s), 110 in place
// against 168 packed on the other in the same minutes (a state that came and went on that vCPU); at
// N = 128 (the seed model) packing A is not repaid by 4 B panels, so it stays in place there.

// In-register transpose of a 16x16 block: r[i] holds row i on entry and column i on exit.
AVX512 static inline void transpose16(__m512 r[16]) {
    __m512i v[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_castps_si512(r[i]);
    avx512_transpose16x16(v);
    for (int i = 0; i < 16; i++) r[i] = _mm512_castsi512_ps(v[i]);
}

static inline __mmask16 first_lanes(int n) { return (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1); }

// Transposes `lines` (<= 16) vectors of `len` contiguous floats (line l at src + l*stride) into
// `len` rows of dst (row k at dst + k*dst_stride, `lines` floats each), scaled by alpha.
AVX512 static void transpose_lines(float *dst, long dst_stride, const float *src, long stride, int lines,
                                   int len, float alpha) {
    __m512 va = _mm512_set1_ps(alpha);
    for (int k0 = 0; k0 < len; k0 += 16) {
        int kn = len - k0 < 16 ? len - k0 : 16;
        __mmask16 km = first_lanes(kn), lm = first_lanes(lines);
        __m512 r[16];
        for (int l = 0; l < 16; l++)
            r[l] = l < lines ? _mm512_maskz_loadu_ps(km, src + (long)l * stride + k0) : _mm512_setzero_ps();
        transpose16(r);
        for (int k = 0; k < kn; k++)
            _mm512_mask_storeu_ps(dst + (long)(k0 + k) * dst_stride, lm, alpha == 1.0f ? r[k] : _mm512_mul_ps(va, r[k]));
    }
}

// dst: ceil(mc/MR) panels, each (kc, MR) contiguous: dst[p][k][i] = alpha * A(i0 + p*MR + i, k0 + k),
// zero past mc. A(i, k) = A[i*rs + k*cs].
AVX512 static void pack_a(float *dst, const float *A, long rs, long cs, int mc, int kc, float alpha) {
    __m512 va = _mm512_set1_ps(alpha);
    if (rs == 1 && cs != 1) {  // columns of A contiguous in i: eight rows of k at a time across the panels
        enum { GROUP = 8 };    // (as pack_b_rows: A is read close to its order in memory)
        __mmask16 out = first_lanes(MR);
        for (int k0 = 0; k0 < kc; k0 += GROUP) {
            int kn = kc - k0 < GROUP ? kc - k0 : GROUP;
            for (int p = 0; p < mc; p += MR) {
                __mmask16 in = first_lanes(mc - p < MR ? mc - p : MR);
                float *d = dst + (long)(p / MR) * kc * MR + (long)k0 * MR;
                const float *src = A + (long)k0 * cs + p;
                for (int k = 0; k < kn; k++) {
                    __m512 v = _mm512_maskz_loadu_ps(in, src + (long)k * cs);
                    _mm512_mask_storeu_ps(d + k * MR, out, alpha == 1.0f ? v : _mm512_mul_ps(va, v));
                }
            }
        }
        return;
    }
    for (int p = 0; p < mc; p += MR) {
        int rows = mc - p < MR ? mc - p : MR;
        if (cs == 1) {  // rows of A are contiguous in k: transpose 16-wide blocks
            transpose_lines(dst, MR, A + (long)p * rs, rs, rows, kc, alpha);
            for (int i = rows; i < MR; i++)
                for (int k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
        } else {
            for (int k = 0; k < kc; k++)
                for (int i = 0; i < MR; i++)
                    dst[k * MR + i] = i < rows ? alpha * A[(long)(p + i) * rs + (long)k * cs] : 0.0f;
        }
        dst += (long)kc * MR;
    }
}

// dst: ceil(nc/NR) panels, each (kc, NR) contiguous: dst[q][k][j] = B(k0 + k, j0 + q*NR + j), zero past nc.
AVX512 static void pack_b(float *dst, const float *B, long rs, long cs, int kc, int nc) {
    for (int q = 0; q < nc; q += NR) {
        int cols = nc - q < NR ? nc - q : NR;
        if (cs == 1 && cols == NR) {
            for (int k = 0; k < kc; k++) {
                const float *row = B + (long)k * rs + q;
                _mm512_store_ps(dst + (long)k * NR, _mm512_loadu_ps(row));
                _mm512_store_ps(dst + (long)k * NR + 16, _mm512_loadu_ps(row + 16));
            }
        } else if (cs == 1) {
            for (int k = 0; k < kc; k++) {
                const float *row = B + (long)k * rs + q;
                float *d = dst + (long)k * NR;
                for (int j = 0; j < cols; j++) d[j] = row[j];
                for (int j = cols; j < NR; j++) d[j] = 0.0f;
            }
        } else if (rs == 1) {  // columns of B are contiguous in k: transpose 16 columns at a time
            for (int j0 = 0; j0 < NR; j0 += 16) {
                int lines = cols - j0 < 16 ? (cols - j0 > 0 ? cols - j0 : 0) : 16;
                if (lines > 0) transpose_lines(dst + j0, NR, B + (long)(q + j0) * cs, cs, lines, kc, 1.0f);
                for (int j = j0 + lines; j < j0 + 16; j++)
                    for (int k = 0; k < kc; k++) dst[(long)k * NR + j] = 0.0f;
            }
        } else {
            for (int k = 0; k < kc; k++)
                for (int j = 0; j < NR; j++)
                    dst[(long)k * NR + j] = j < cols ? B[(long)k * rs + (long)(q + j) * cs] : 0.0f;
        }
        dst += (long)kc * NR;
    }
}

// pack_b of a whole block whose rows are contiguous (cs 1): eight rows of B at a time, each panel's
// piece of them in turn, so that B is read close to its order in memory (one panel at a time walks all
// kc rows once per panel: page after page when a row is long). Whole panels only; a last partial panel
// goes through pack_b. dst: as pack_b's, (ceil(nc/NR) panels of (kc, NR)).
AVX512 static void pack_b_rows(float *dst, const float *B, long rs, int kc, int nc) {
    enum { GROUP = 8 };
    int whole = nc / NR;
    for (int k0 = 0; k0 < kc; k0 += GROUP) {
        int kn = kc - k0 < GROUP ? kc - k0 : GROUP;
        for (int q = 0; q < whole; q++) {
            float *d = dst + (long)q * kc * NR + (long)k0 * NR;
            const float *src = B + (long)k0 * rs + q * NR;
            for (int k = 0; k < kn; k++) {
                _mm512_store_ps(d + k * NR, _mm512_loadu_ps(src + k * rs));
                _mm512_store_ps(d + k * NR + 16, _mm512_loadu_ps(src + k * rs + 16));
            }
        }
    }
    if (whole * NR < nc) pack_b(dst + (long)whole * kc * NR, B + whole * NR, rs, 1, kc, nc - whole * NR);
}

// The tile rows (m of MR, n of NR columns) stored transposed: C[j * ldc + i] (+)= rows[i][j / 16] lane
// j % 16, for i < m, j < n; = when `overwrite`. Two 16 x 16 transposes in registers.
AVX512 static inline void store_transposed(__m512 rows[MR][2], float *c, long ldc, int m, int n, int overwrite) {
    __mmask16 lanes = first_lanes(m);
    for (int h = 0; h < 2 && 16 * h < n; h++) {
        __m512 r[16];
        for (int i = 0; i < 16; i++) r[i] = i < MR ? rows[i][h] : _mm512_setzero_ps();
        transpose16(r);
        int cols = n - 16 * h < 16 ? n - 16 * h : 16;
        for (int j = 0; j < cols; j++) {
            float *dst = c + (long)(16 * h + j) * ldc;
            _mm512_mask_storeu_ps(dst, lanes, overwrite ? r[j] : _mm512_add_ps(r[j], _mm512_maskz_loadu_ps(lanes, dst)));
        }
    }
}

// C (m <= rows_max rows, n <= NR cols, leading dim ldc) += a (kc, MR) @ b (kc, NR); = when `overwrite`
// (the first k block of a beta-0 product: C is neither cleared first nor read). rows_max is a constant
// where this is inlined (micro_kernel): a panel with fewer rows than MR (M = 128 leaves 2 of 14) does
// only its own rows' FMAs.
AVX512 static inline __attribute__((always_inline)) void micro_rows(int rows_max, int a_form, int c_trans, int kc,
                                                                   const float *restrict a, long a_ld,
                                                                   const float *restrict b, float *restrict c,
                                                                   long ldc, int m, int n, int overwrite) {
    __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a,
           c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a,
           c7b = c0a, c8a = c0a, c8b = c0a, c9a = c0a, c9b = c0a, c10a = c0a, c10b = c0a, c11a = c0a,
           c11b = c0a, c12a = c0a, c12b = c0a, c13a = c0a, c13b = c0a;
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        __m512 av;
#define STEP(i)                                      \
    if (rows_max > i) {                              \
        av = _mm512_set1_ps(a_form == A_ROWS ? a[i * a_ld] : a[i]); \
        c##i##a = _mm512_fmadd_ps(av, b0, c##i##a);  \
        c##i##b = _mm512_fmadd_ps(av, b1, c##i##b);  \
    }
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6)
        STEP(7) STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13)
#undef STEP
        a += a_form == A_ROWS ? 1 : a_form == A_COLS ? a_ld : MR;
        b += NR;
    }
    __m512 rows[MR][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b}, {c3a, c3b}, {c4a, c4b}, {c5a, c5b},
                          {c6a, c6b}, {c7a, c7b}, {c8a, c8b}, {c9a, c9b}, {c10a, c10b}, {c11a, c11b},
                          {c12a, c12b}, {c13a, c13b}};
    if (c_trans) {
        store_transposed(rows, c, ldc, m, n, overwrite);
        return;
    }
    if (n == NR && overwrite) {
        for (int i = 0; i < m; i++) {
            _mm512_storeu_ps(c + (long)i * ldc, rows[i][0]);
            _mm512_storeu_ps(c + (long)i * ldc + 16, rows[i][1]);
        }
    } else if (n == NR) {
        for (int i = 0; i < m; i++) {
            float *row = c + (long)i * ldc;
            _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), rows[i][0]));
            _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), rows[i][1]));
        }
    } else {
        __mmask16 m0 = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
        __mmask16 m1 = (__mmask16)(n >= 32 ? 0xffff : n > 16 ? (1u << (n - 16)) - 1 : 0);
        for (int i = 0; i < m; i++) {
            float *row = c + (long)i * ldc;
            __m512 lo = rows[i][0], hi = rows[i][1];
            if (!overwrite) {
                lo = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), lo);
                hi = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), hi);
            }
            _mm512_mask_storeu_ps(row, m0, lo);
            _mm512_mask_storeu_ps(row + 16, m1, hi);
        }
    }
}

// micro_rows for the panel's rows rounded up to even: 7 unrolled variants
AVX512 static void micro_kernel(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                                long ldc, int m, int n, int overwrite) {
    switch ((m + 1) / 2) {
        case 1: micro_rows(2, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
        case 2: micro_rows(4, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
        case 3: micro_rows(6, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
        case 4: micro_rows(8, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
        case 5: micro_rows(10, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
        case 6: micro_rows(12, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
        default: micro_rows(MR, A_PACKED, 0, kc, a, MR, b, c, ldc, m, n, overwrite); break;
    }
}

// micro_rows reading A where it lies (form A_ROWS: row i at a + i*a_ld, contiguous in k; A_COLS: the
// panel's rows contiguous at each k, k at a + k*a_ld): exactly m rows, so nothing past A is read.
// c_trans: the tile is stored transposed (store_transposed).
#define DIRECT_ROWS(form, ct, r) \
    case r: micro_rows(r, form, ct, kc, a, a_ld, b, c, ldc, m, n, overwrite); break;
#define DIRECT_CASES(form, ct)                                                                              \
    switch (m) {                                                                                            \
        DIRECT_ROWS(form, ct, 1) DIRECT_ROWS(form, ct, 2) DIRECT_ROWS(form, ct, 3) DIRECT_ROWS(form, ct, 4)  \
        DIRECT_ROWS(form, ct, 5) DIRECT_ROWS(form, ct, 6) DIRECT_ROWS(form, ct, 7) DIRECT_ROWS(form, ct, 8)  \
        DIRECT_ROWS(form, ct, 9) DIRECT_ROWS(form, ct, 10) DIRECT_ROWS(form, ct, 11)                        \
        DIRECT_ROWS(form, ct, 12) DIRECT_ROWS(form, ct, 13)                                                 \
        default: micro_rows(MR, form, ct, kc, a, a_ld, b, c, ldc, m, n, overwrite); break;                  \
    }
AVX512 static void micro_kernel_rows(int kc, const float *restrict a, long a_ld, const float *restrict b,
                                     float *restrict c, long ldc, int m, int n, int overwrite) {
    DIRECT_CASES(A_ROWS, 0)
}
AVX512 static void micro_kernel_cols(int kc, const float *restrict a, long a_ld, const float *restrict b,
                                     float *restrict c, long ldc, int m, int n, int overwrite) {
    DIRECT_CASES(A_COLS, 0)
}
AVX512 static void micro_kernel_rows_transposed(int kc, const float *restrict a, long a_ld, const float *restrict b,
                                                float *restrict c, long ldc, int m, int n, int overwrite) {
    DIRECT_CASES(A_ROWS, 1)
}
#undef DIRECT_CASES
#undef DIRECT_ROWS

// Per-thread A panels, and B panels: per thread for one-thread calls (attention runs many small GEMMs
// concurrently), one shared block for team calls (threads pack it together, then share it). Fixed
// sizes, allocated on first use and kept (accounted as workspace: fsdp/plan.c predicts them).
static _Thread_local float *thread_a_pack;  // (MC, KC)
static _Thread_local float *thread_b_pack;  // (KC, NC)
static float *shared_b_pack;                // (KC, NC)

static float *lazy_buffer(float **slot, size_t floats) {
    if (!*slot) *slot = fsdp_alloc(sizeof(float) * floats, FSDP_MEM_WORKSPACE);
    FSDP_ASSERT(*slot != NULL);
    return *slot;
}

int cpu_sgemm_avx512_available(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return cached;
}

// Rows per A block: at most MC, a multiple of MR, and enough blocks that `nthreads` threads get equal
// shares (dynamic scheduling then absorbs uneven core speed).
static int a_block_rows(int M, int nthreads) {
    if (nthreads <= 1) return MC;
    int per_round = nthreads * MC;
    int rounds = (M + per_round - 1) / per_round;
    int blocks = rounds * nthreads * 2;
    int rows = (M + blocks - 1) / blocks;
    rows = (rows + MR - 1) / MR * MR;
    return rows < MR ? MR : rows;
}

// One (jc, pc) pass of the blocked product: the packed B panels of columns jc.. and k's pc.., and the
// blocks of A rows swept across them.
typedef struct {
    const float *A, *B;  // op(A)(i, k) = A[i*rs_a + k*cs_a], op(B)(k, j) = B[k*rs_b + j*cs_b]
    long rs_a, cs_a, rs_b, cs_b;
    float *C;  // (M, ldc); under c_trans the caller's C, whose rows are this product's columns
    long ldc;
    int M, mc_rows;   // rows of C, rows per A block
    int jc, nc, pc, kc;
    float alpha;
    int overwrite;    // first k block of a beta-0 product
    int a_direct;     // the micro-kernel reads A where it lies (A_IN_PLACE_MAX_N)
    int c_trans;      // this is the product transposed (C^T = B^T A^T): tiles are stored transposed
    float *b_pack;    // (kc, ceil(nc/NR)*NR) panels
} sgemm_pass;

AVX512 static void pass_pack_b(const sgemm_pass *p, int q) {
    int cols = p->nc - q * NR < NR ? p->nc - q * NR : NR;
    pack_b(p->b_pack + (long)q * p->kc * NR, p->B + p->pc * p->rs_b + (p->jc + q * NR) * p->cs_b, p->rs_b, p->cs_b,
           p->kc, cols);
}

// a_pack: (MC, KC) this thread's A panels
AVX512 static void pass_block(const sgemm_pass *p, float *a_pack, int blk) {
    int ic = blk * p->mc_rows, mc = p->M - ic < p->mc_rows ? p->M - ic : p->mc_rows;
    const float *a0 = p->A + ic * p->rs_a + p->pc * p->cs_a;  // A(ic, pc), where A is read in place
    if (!p->a_direct) pack_a(a_pack, a0, p->rs_a, p->cs_a, mc, p->kc, p->alpha);
    for (int jr = 0; jr < p->nc; jr += NR) {
        const float *bp = p->b_pack + (long)(jr / NR) * p->kc * NR;
        int n = p->nc - jr < NR ? p->nc - jr : NR;
        for (int ir = 0; ir < mc; ir += MR) {
            int m = mc - ir < MR ? mc - ir : MR;
            float *c = p->C + (long)(ic + ir) * p->ldc + p->jc + jr;
            if (!p->a_direct)
                micro_kernel(p->kc, a_pack + (long)(ir / MR) * p->kc * MR, bp, c, p->ldc, m, n, p->overwrite);
            else if (p->c_trans)  // tile (ic + ir, jc + jr) of C^T
                micro_kernel_rows_transposed(p->kc, a0 + ir * p->rs_a, p->rs_a, bp,
                                             p->C + (long)(p->jc + jr) * p->ldc + ic + ir, p->ldc, m, n, p->overwrite);
            else if (p->cs_a == 1)
                micro_kernel_rows(p->kc, a0 + ir * p->rs_a, p->rs_a, bp, c, p->ldc, m, n, p->overwrite);
            else
                micro_kernel_cols(p->kc, a0 + ir, p->cs_a, bp, c, p->ldc, m, n, p->overwrite);
        }
    }
}

void cpu_sgemm_avx512(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc, int nthreads) {
    int multiply = K > 0 && alpha != 0.0f;
    // C = beta * C first, except where the first k block can write C outright (beta 0)
    int prescale = beta != 1.0f && !(beta == 0.0f && multiply);
    sgemm_pass p = {.A = A, .B = B, .rs_a = trans_a ? 1 : lda, .cs_a = trans_a ? lda : 1,
                    .rs_b = trans_b ? 1 : ldb, .cs_b = trans_b ? ldb : 1, .C = C, .ldc = ldc, .M = M,
                    .mc_rows = a_block_rows(M, nthreads), .alpha = alpha};
    int n_blocks = (M + p.mc_rows - 1) / p.mc_rows;
    p.b_pack = nthreads > 1 ? lazy_buffer(&shared_b_pack, (size_t)KC * NC) : lazy_buffer(&thread_b_pack, (size_t)KC * NC);
    if (nthreads <= 1) {  // no OpenMP constructs at all: a team of one still pays a futex call per barrier
        float *a_pack = lazy_buffer(&thread_a_pack, (size_t)MC * KC);
        if (prescale) cpu_scale_rows(C, ldc, 0, M, N, beta);
        if (trans_b && !trans_a && alpha == 1.0f && N > M && M <= A_IN_PLACE_MAX_N) {
            // x W^T with few rows of x (a Linear's forward on a small batch): computed as W x^T, W read in
            // place as A (no transposed copy of the large operand), x packed as B, tiles stored transposed
            p.A = B, p.rs_a = ldb, p.cs_a = 1, p.B = A, p.rs_b = 1, p.cs_b = lda, p.M = N, p.c_trans = 1;
            p.mc_rows = a_block_rows(N, 1);
            n_blocks = (N + p.mc_rows - 1) / p.mc_rows;
            int swap = M;
            M = N, N = swap;
        }
        // where A may be read in place (the rules above); W x^T must be, its tiles are stored transposed
        int rows_in_place = p.cs_a == 1 && (p.c_trans || p.rs_a % 1024 != 0 || N < A_ROWS_ALIAS_PACK_MIN_N);
        int cols_in_place = p.rs_a == 1 && K <= A_COLS_IN_PLACE_MAX_K;
        p.a_direct = alpha == 1.0f && N <= A_IN_PLACE_MAX_N && (rows_in_place || cols_in_place);
        for (p.jc = 0; p.jc < N && multiply; p.jc += NC) {
            p.nc = N - p.jc < NC ? N - p.jc : NC;
            for (p.pc = 0; p.pc < K; p.pc += KC) {
                p.kc = K - p.pc < KC ? K - p.pc : KC;
                p.overwrite = beta == 0.0f && p.pc == 0;
                if (p.cs_b == 1)
                    pack_b_rows(p.b_pack, p.B + p.pc * p.rs_b + p.jc, p.rs_b, p.kc, p.nc);
                else
                    for (int q = 0; q < (p.nc + NR - 1) / NR; q++) pass_pack_b(&p, q);
                for (int blk = 0; blk < n_blocks; blk++) pass_block(&p, a_pack, blk);
            }
        }
        return;
    }
#pragma omp parallel num_threads(nthreads) firstprivate(p)
    {
        float *a_pack = lazy_buffer(&thread_a_pack, (size_t)MC * KC);
        if (prescale) {
#pragma omp for schedule(static)
            for (int i = 0; i < M; i++) cpu_scale_rows(C, ldc, i, i + 1, N, beta);
        }
        for (p.jc = 0; p.jc < N && multiply; p.jc += NC) {
            p.nc = N - p.jc < NC ? N - p.jc : NC;
            for (p.pc = 0; p.pc < K; p.pc += KC) {
                p.kc = K - p.pc < KC ? K - p.pc : KC;
                p.overwrite = beta == 0.0f && p.pc == 0;
#pragma omp for schedule(static)
                for (int q = 0; q < (p.nc + NR - 1) / NR; q++) pass_pack_b(&p, q);
#pragma omp for schedule(dynamic, 1)
                for (int blk = 0; blk < n_blocks; blk++) pass_block(&p, a_pack, blk);
            }
        }
    }
}
