// sgemm_avx512.c: our own fp32 GEMM for AVX-512 CPUs (BLIS-style blocking: packed panels of A and
// B, a 14x32 register-tile micro-kernel). It does not depend on OpenBLAS's CPU detection, which
// falls back to generic SSE3 kernels on CPUs it does not know. Row-major; any transposition is
// absorbed by the packing routines, which read A(i, k) = A[i*rs_a + k*cs_a].
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "kernels/cpu/avx512_transpose.h"
#include "kernels/cpu/cpu_kernels.h"

#define MR 14
#define NR 32
#define KC 256
#define MC (MR * 24)
#define NC 3072

#define AVX512 __attribute__((target("avx512f")))

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
    for (int p = 0; p < mc; p += MR) {
        int rows = mc - p < MR ? mc - p : MR;
        if (cs == 1) {  // rows of A are contiguous in k: transpose 16-wide blocks
            transpose_lines(dst, MR, A + (long)p * rs, rs, rows, kc, alpha);
            for (int i = rows; i < MR; i++)
                for (int k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
        } else if (rs == 1) {  // columns of A are contiguous in i: one masked copy per k
            __mmask16 in = first_lanes(rows), out = first_lanes(MR);
            for (int k = 0; k < kc; k++) {
                __m512 v = _mm512_maskz_loadu_ps(in, A + (long)k * cs + p);
                _mm512_mask_storeu_ps(dst + k * MR, out, alpha == 1.0f ? v : _mm512_mul_ps(va, v));
            }
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

// C (m <= MR rows, n <= NR cols, leading dim ldc) += a (kc, MR) @ b (kc, NR)
AVX512 static void micro_kernel(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                                long ldc, int m, int n) {
    __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a,
           c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a,
           c7b = c0a, c8a = c0a, c8b = c0a, c9a = c0a, c9b = c0a, c10a = c0a, c10b = c0a, c11a = c0a,
           c11b = c0a, c12a = c0a, c12b = c0a, c13a = c0a, c13b = c0a;
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        __m512 av;
#define STEP(i)                                      \
    av = _mm512_set1_ps(a[i]);                       \
    c##i##a = _mm512_fmadd_ps(av, b0, c##i##a);      \
    c##i##b = _mm512_fmadd_ps(av, b1, c##i##b);
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6)
        STEP(7) STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13)
#undef STEP
        a += MR;
        b += NR;
    }
    __m512 rows[MR][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b}, {c3a, c3b}, {c4a, c4b}, {c5a, c5b},
                          {c6a, c6b}, {c7a, c7b}, {c8a, c8b}, {c9a, c9b}, {c10a, c10b}, {c11a, c11b},
                          {c12a, c12b}, {c13a, c13b}};
    if (n == NR) {
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
            _mm512_mask_storeu_ps(row, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), rows[i][0]));
            _mm512_mask_storeu_ps(row + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), rows[i][1]));
        }
    }
}

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

void cpu_sgemm_avx512(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc, int nthreads) {
    long rs_a = trans_a ? 1 : lda, cs_a = trans_a ? lda : 1;
    long rs_b = trans_b ? 1 : ldb, cs_b = trans_b ? ldb : 1;
    int mc_rows = a_block_rows(M, nthreads);
    int n_blocks = (M + mc_rows - 1) / mc_rows;
    float *b_pack = nthreads > 1 ? lazy_buffer(&shared_b_pack, (size_t)KC * NC)
                                 : lazy_buffer(&thread_b_pack, (size_t)KC * NC);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        float *a_pack = lazy_buffer(&thread_a_pack, (size_t)MC * KC);
        if (beta != 1.0f) {
#pragma omp for schedule(static)
            for (int i = 0; i < M; i++) {
                float *row = C + (long)i * ldc;
                if (beta == 0.0f) memset(row, 0, sizeof(float) * (size_t)N);
                else for (int j = 0; j < N; j++) row[j] *= beta;
            }
        }
        for (int jc = 0; jc < N && K > 0 && alpha != 0.0f; jc += NC) {
            int nc = N - jc < NC ? N - jc : NC;
            int n_panels = (nc + NR - 1) / NR;
            for (int pc = 0; pc < K; pc += KC) {
                int kc = K - pc < KC ? K - pc : KC;
#pragma omp for schedule(static)
                for (int q = 0; q < n_panels; q++) {
                    int cols = nc - q * NR < NR ? nc - q * NR : NR;
                    pack_b(b_pack + (long)q * kc * NR, B + pc * rs_b + (jc + q * NR) * cs_b, rs_b, cs_b, kc, cols);
                }
#pragma omp for schedule(dynamic, 1)
                for (int blk = 0; blk < n_blocks; blk++) {
                    int ic = blk * mc_rows;
                    int mc = M - ic < mc_rows ? M - ic : mc_rows;
                    pack_a(a_pack, A + ic * rs_a + pc * cs_a, rs_a, cs_a, mc, kc, alpha);
                    for (int jr = 0; jr < nc; jr += NR) {
                        const float *bp = b_pack + (long)(jr / NR) * kc * NR;
                        int n = nc - jr < NR ? nc - jr : NR;
                        for (int ir = 0; ir < mc; ir += MR) {
                            const float *ap = a_pack + (long)(ir / MR) * kc * MR;
                            int m = mc - ir < MR ? mc - ir : MR;
                            micro_kernel(kc, ap, bp, C + (long)(ic + ir) * ldc + jc + jr, ldc, m, n);
                        }
                    }
                }
            }
        }
    }
}
