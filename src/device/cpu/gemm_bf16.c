// gemm_bf16.c: C = alpha * op(A) @ op(B) + beta * C with bf16 operands and fp32 accumulation, the
// GEMM of bf16 mixed precision. fp32 inputs are rounded to the nearest-even bf16 while they are packed
// (the products of two bf16 values are exact in fp32, so every path computes the same products and
// differs only in summation order, and in denormals, which the bf16 instructions flush to zero).
//
// Paths, chosen at run time (FSDP_GEMM_BF16=amx|avx512bf16|emulate overrides; the best available is
// the default):
//   amx         Intel AMX tiles (TDPBF16PS: a 16x32 by 32x16 bf16 product per instruction) where the CPU
//               has amx_bf16 and the kernel grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
//   avx512bf16  the AVX-512 dot-product instruction VDPBF16PS (pairs of bf16 products into fp32 lanes;
//               Cooper Lake, Sapphire Rapids, Zen 4/5), on the same packed panels.
//   emulate     anywhere: operands rounded to bf16 into fp32 copies, then the fp32 GEMM.
//
// AMX layout. Packed A: tiles of 16 rows x 32 k (bf16); tile (mi, kj) at a + (mi * KT + kj) * 512.
// Packed B: tiles of 16 k-pairs x 16 columns x 2 (the VNNI pair layout TDPBF16PS reads); tile (nj, kj)
// at b + (nj * KT + kj) * 512. M, N and K are padded with zeros to multiples of 32. The micro-kernel
// keeps a 32x32 block of C in four tiles (tmm0-3), with two A tiles (tmm4-5) and two B tiles (tmm6-7).
#include <immintrin.h>
#include <cpuid.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/status.h"
#include "device/cpu/avx512_transpose.h"
#include "device/cpu/cpu_kernels.h"
#include "core/tunables.h"

#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define TILE_ELEMS 512  // bf16 values per packed 16x32 tile (1 KiB)
// fp32 values ahead on each k line that pairs_across_k prefetches: 8 tiles of 16 columns. Its tiles are
// packed along a band of 32 lines, 32 streams that the hardware prefetchers do not keep up with
// (gemm-bench: weight gradient and x @ W 4-6% faster with it; a bf16 source gained nothing).
#define PREFETCH_AHEAD 128
// Rows of C one pass of the VDPBF16PS micro-kernel keeps in registers: 12 rows x 32 columns, 24
// accumulators. VDPBF16PS takes 7-8 cycles on Zen 5 and issues two a cycle, so 16 accumulators (8 rows)
// left no slack (bench/ceiling.c: 16 chains reach the peak exactly); 24 do (a 32 x 32 x 512 product on
// packed tiles 414 -> 422 GFLOP/s, 256 x 256 x 64 387 -> 408, one thread, Zen 5).
#define ROW_GROUP 12
#define MC_ROWS 512     // rows of packed A swept per pass over B (keeps the A block in L2)

enum { PATH_EMULATE, PATH_AVX512BF16, PATH_AMX };
static _Atomic int bf16_path = -1;  // -1: not decided yet (atomic: the first call may come from several threads)

static int avx512bf16_available(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) return 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);  // CPUID.(7,1):EAX[5] avx512_bf16
#else
    return 0;
#endif
}

static int amx_available(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!avx512bf16_available() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;  // packing uses avx512_bf16
    if (!((d >> 24) & 1) || !((d >> 22) & 1)) return 0;                                   // amx_tile, amx_bf16
    // Linux keeps the 8 KiB tile state off until a process asks for it (ARCH_REQ_XCOMP_PERM, XTILEDATA)
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

void cpu_gemm_bf16_select(const char *name) {
    int best = amx_available() ? PATH_AMX : avx512bf16_available() ? PATH_AVX512BF16 : PATH_EMULATE;
    if (name && strcmp(name, "emulate") == 0) bf16_path = PATH_EMULATE;
    else if (name && strcmp(name, "avx512bf16") == 0) bf16_path = best >= PATH_AVX512BF16 ? PATH_AVX512BF16 : best;
    else bf16_path = best;
}

const char *cpu_gemm_bf16_name(void) {
    if (bf16_path < 0) cpu_gemm_bf16_select(fsdp_tunable(FSDP_ENV_GEMM_BF16));
    return bf16_path == PATH_AMX ? "amx" : bf16_path == PATH_AVX512BF16 ? "avx512bf16" : "emulate";
}

// Scratch: per thread for one-thread calls (attention runs GEMMs inside a parallel region), shared
// for team calls. Grown, never shrunk, so steady-state training allocates nothing. Accounted as
// workspace: packed B is its padded size in bf16, ceil32(columns) x ceil32(K) x 2 bytes (K = V for the LM
// head's input gradient); A is packed MC_ROWS rows at a time, min(ceil32(rows), MC_ROWS) x ceil32(K) x 2
// bytes. fsdp/plan.c predicts both from the model's products.
typedef struct {
    void *p;
    size_t bytes;
} scratch;
static _Thread_local scratch thread_a, thread_b;
static scratch team_a, team_b;

static void *grow(scratch *s, size_t bytes) {
    if (s->bytes < bytes) {
        fsdp_free(s->p);
        s->p = fsdp_alloc(bytes, FSDP_MEM_WORKSPACE);
        FSDP_ASSERT(s->p != NULL);
        s->bytes = bytes;
    }
    return s->p;
}

// ---- emulated path --------------------------------------------------------------------------------

// dst (rows, cols) contiguous = bf16-rounded scale * src (rows, cols) with leading dimension ld
static void round_copy(float *dst, const float *src, int rows, int cols, int ld, float scale) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && (long)rows * cols > 65536)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)r * cols + c] = fsdp_bf16_to_f32(fsdp_f32_to_bf16(scale * src[(size_t)r * ld + c]));
}

// dst (rows, cols) contiguous = fp32 values of the bf16 src (rows, cols) with leading dimension ld
static void widen_copy(float *dst, const fsdp_bf16 *src, int rows, int cols, int ld) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && (long)rows * cols > 65536)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)r * cols + c] = fsdp_bf16_to_f32(src[(size_t)r * ld + c]);
}

// A and B are each fp32 or bf16 (a_bf16, b_bf16; a bf16 A only with alpha 1)
static void gemm_bf16_emulated(int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A, int a_bf16,
                               int lda, const void *B, int b_bf16, int ldb, float beta, float *C, int ldc) {
    int ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
    int team = !omp_in_parallel();
    float *a = grow(team ? &team_a : &thread_a, sizeof(float) * (size_t)ar * ac);
    float *b = grow(team ? &team_b : &thread_b, sizeof(float) * (size_t)br * bc);
    if (a_bf16) widen_copy(a, A, ar, ac, lda);
    else round_copy(a, A, ar, ac, lda, alpha);  // alpha joins A before rounding, as on the AMX path
    if (b_bf16) widen_copy(b, B, br, bc, ldb);
    else round_copy(b, B, br, bc, ldb, 1.0f);
    cpu_gemm(trans_a, trans_b, M, N, K, 1.0f, a, ac, b, bc, beta, C, ldc);
}

// ---- AMX path -------------------------------------------------------------------------------------

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

// Loaded at the start of every call and released at its end: another library on the same thread
// (oneDNN, PyTorch) may release or reconfigure the tiles between our calls.
AMX_TARGET static void configure_tiles(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

static inline __mmask16 lanes(int n) { return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1); }

// 16 fp32 values of a line, the first `n` from src (the rest zero), times alpha
AMX_TARGET static inline __m512 load16(const float *src, int n, __m512 alpha) {
    return _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(n), src), alpha);
}

// r[l] = bf16 of line l's 32 values src[l*ld + 0..31] (k contiguous: 16 pairs of consecutive k),
// for lines < n_lines and values < n_k; zeros elsewhere.
AMX_TARGET static void lines_along_k(__m512i r[16], const float *src, long ld, int n_lines, int n_k, __m512 alpha) {
    for (int l = 0; l < 16; l++) {
        if (l >= n_lines) {
            r[l] = _mm512_setzero_si512();
            continue;
        }
        const float *p = src + (long)l * ld;
        __m512 lo = load16(p, n_k, alpha), hi = load16(p + 16, n_k - 16, alpha);
        r[l] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    }
}

// r[p] = pairs (k = 2p, 2p + 1) of 16 lines that run across k (src[k*ld + line]): element (p, l) holds
// bf16(src[2p][l]) in its low half and bf16(src[2p+1][l]) in its high half. Zeros past n_lines/n_k.
// sums: NULL, or the lines' running sums (n_lines,): each line's fp32 values (times alpha) are added in
// k order, one k at a time (a bias gradient summed as cpu_bias_backward sums it). Always inlined, into
// pairs_across_k's two calls, so the packing without sums carries no test of them.
__attribute__((always_inline)) AMX_TARGET static inline void pairs_across_k_inline(__m512i r[16], const float *src,
                                                                                   long ld, int n_lines, int n_k,
                                                                                   __m512 alpha, float *sums) {
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512 zero = _mm512_setzero_ps();
    __m512 sum = sums ? _mm512_maskz_loadu_ps(lanes(n_lines), sums) : zero;
    for (int p = 0; p < 16; p++) {
        int k = 2 * p;
        _mm_prefetch((const char *)(src + (long)k * ld + PREFETCH_AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)(src + (long)(k + 1) * ld + PREFETCH_AHEAD), _MM_HINT_T0);
        __m512 even = k < n_k ? load16(src + (long)k * ld, n_lines, alpha) : zero;
        __m512 odd = k + 1 < n_k ? load16(src + (long)(k + 1) * ld, n_lines, alpha) : zero;
        if (sums && k < n_k) sum = _mm512_add_ps(sum, even);
        if (sums && k + 1 < n_k) sum = _mm512_add_ps(sum, odd);
        __m512i both = (__m512i)_mm512_cvtne2ps_pbh(odd, even);  // [even x16 | odd x16]
        r[p] = _mm512_permutexvar_epi16(interleave, both);
    }
    if (sums) _mm512_mask_storeu_ps(sums, lanes(n_lines), sum);
}

AMX_TARGET static void pairs_across_k(__m512i r[16], const float *src, long ld, int n_lines, int n_k, __m512 alpha,
                                      float *sums) {
    if (sums) pairs_across_k_inline(r, src, ld, n_lines, n_k, alpha, sums);
    else pairs_across_k_inline(r, src, ld, n_lines, n_k, alpha, NULL);
}

static inline __mmask32 lanes32(int n) { return n >= 32 ? 0xffffffffu : n <= 0 ? 0 : (1u << n) - 1; }

// lines_along_k for a bf16 source: 32 values of a line are already 16 pairs
AMX_TARGET static void lines_along_k_bf16(__m512i r[16], const fsdp_bf16 *src, long ld, int n_lines, int n_k) {
    for (int l = 0; l < 16; l++)
        r[l] = l < n_lines ? _mm512_maskz_loadu_epi16(lanes32(n_k), src + (long)l * ld) : _mm512_setzero_si512();
}

// pairs_across_k for a bf16 source
AMX_TARGET static void pairs_across_k_bf16(__m512i r[16], const fsdp_bf16 *src, long ld, int n_lines, int n_k) {
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m256i zero = _mm256_setzero_si256();
    for (int p = 0; p < 16; p++) {
        int k = 2 * p;
        __m256i even = k < n_k ? _mm256_maskz_loadu_epi16(lanes(n_lines), src + (long)k * ld) : zero;
        __m256i odd = k + 1 < n_k ? _mm256_maskz_loadu_epi16(lanes(n_lines), src + (long)(k + 1) * ld) : zero;
        __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1);  // [even x16 | odd x16]
        r[p] = _mm512_permutexvar_epi16(interleave, both);
    }
}

// dst: one packed tile, 64-byte aligned (the scratch is FSDP_ALIGNMENT-aligned, tiles are 1 KiB).
// Masked stores (all lanes): GCC turns a loop of plain stores from r into a 1 KiB memcpy call from the
// stack (perf showed that memcpy at ~1% of a bf16 step).
AMX_TARGET static inline void store_tile(uint16_t *dst, const __m512i r[16]) {
    for (int i = 0; i < 16; i++) _mm512_mask_store_epi32(dst + 32 * i, 0xffff, r[i]);
}

// Packs 16-row group mi (rows m0..) and k-group kj of op(A) (element (m, k) = A[m*rs + k*cs]); A is fp32
// (times alpha, then rounded) or bf16 (copied). sums: NULL, or the rows' running sums over k (a k-major
// fp32 A only).
AMX_TARGET static void pack_a_tile(uint16_t *dst, const void *A, int a_bf16, long rs, long cs, int rows, int n_k,
                                   __m512 alpha, float *sums) {
    __m512i r[16];
    if (cs == 1) {
        if (a_bf16) lines_along_k_bf16(r, A, rs, rows, n_k);
        else lines_along_k(r, A, rs, rows, n_k, alpha);
    } else {  // A stored k-major: pair rows of k, then transpose to rows of m
        if (a_bf16) pairs_across_k_bf16(r, A, cs, rows, n_k);
        else pairs_across_k(r, A, cs, rows, n_k, alpha, sums);
        avx512_transpose16x16(r);
    }
    store_tile(dst, r);
}

// Packs 16-column group and k-group of op(B) (element (k, n) = B[k*rs + n*cs]); B is fp32 or bf16.
// sums: NULL, or the columns' running sums over k (a k-major fp32 B only).
AMX_TARGET static void pack_b_tile(uint16_t *dst, const void *B, int b_bf16, long rs, long cs, int cols, int n_k,
                                   float *sums) {
    __m512i r[16];
    __m512 one = _mm512_set1_ps(1.0f);
    if (rs == 1) {  // B stored n-major (trans_b): each column's k run is contiguous
        if (b_bf16) lines_along_k_bf16(r, B, cs, cols, n_k);
        else lines_along_k(r, B, cs, cols, n_k, one);
        avx512_transpose16x16(r);
    } else if (b_bf16) {
        pairs_across_k_bf16(r, B, rs, cols, n_k);
    } else {
        pairs_across_k(r, B, rs, cols, n_k, one, sums);
    }
    store_tile(dst, r);
}

// C block (32 x 32 at c, leading dimension ldc; m x n valid) += or = the product of packed A tiles
// (ap, ap + a_kt tiles: two 16-row groups) and B tiles (bp, bp + b_kt tiles: two 16-column groups) over KT
// k-groups. a_kt, b_kt: the tiles between an operand's groups (its k-groups as packed, >= KT).
AMX_TARGET static void micro_kernel(const uint16_t *ap, int a_kt, const uint16_t *bp, int b_kt, int KT, float *c,
                                    int ldc, int m, int n, int accumulate) {
    const uint16_t *a1 = ap + (size_t)a_kt * TILE_ELEMS, *b1 = bp + (size_t)b_kt * TILE_ELEMS;
    int full = m == 32 && n == 32;
    float tmp[32 * 32] __attribute__((aligned(64)));
    if (full && accumulate) {
        _tile_loadd(0, c, ldc * 4);
        _tile_loadd(1, c + 16, ldc * 4);
        _tile_loadd(2, c + (long)16 * ldc, ldc * 4);
        _tile_loadd(3, c + (long)16 * ldc + 16, ldc * 4);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int kj = 0; kj < KT; kj++) {
        _tile_loadd(4, ap + (size_t)kj * TILE_ELEMS, 64);
        _tile_loadd(6, bp + (size_t)kj * TILE_ELEMS, 64);
        _tile_loadd(5, a1 + (size_t)kj * TILE_ELEMS, 64);
        _tile_loadd(7, b1 + (size_t)kj * TILE_ELEMS, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    if (full) {
        _tile_stored(0, c, ldc * 4);
        _tile_stored(1, c + 16, ldc * 4);
        _tile_stored(2, c + (long)16 * ldc, ldc * 4);
        _tile_stored(3, c + (long)16 * ldc + 16, ldc * 4);
        return;
    }
    _tile_stored(0, tmp, 128);
    _tile_stored(1, tmp + 16, 128);
    _tile_stored(2, tmp + 16 * 32, 128);
    _tile_stored(3, tmp + 16 * 32 + 16, 128);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(long)i * ldc + j] = accumulate ? c[(long)i * ldc + j] + tmp[i * 32 + j] : tmp[i * 32 + j];
}

// ROWS rows of a 32-column block of C with VDPBF16PS, block rows first .. first + ROWS - 1 (first and
// ROWS constants after inlining): each row's two 16-column halves in two accumulators; B's pair rows
// are loaded once per group and A's pairs broadcast from the packed A tiles (a0: the block's rows 0-15,
// a1: rows 16-31; row r, pair p at a 32-bit offset r * 16 + p of its tile). rows: the group's valid rows.
// bias: NULL, or the block's 32 columns of a row added to every row (without accumulate): acc + bias, as
// acc + C would add a C filled with it.
__attribute__((always_inline)) AMX_TARGET static inline void rows_avx512bf16(const uint16_t *a0, const uint16_t *a1,
                                                                           const int first, const int ROWS,
                                                                           const uint16_t *bp, const uint16_t *b1,
                                                                           int KT, float *c, int ldc, int rows, int n,
                                                                           int accumulate, const float *bias) {
    // acc stays in registers only where every loop over r is unrolled: without the pragmas -O3 left
    // the store loop rolled, and -O2 all three, keeping acc on the stack (the bf16 step at -O2 2.5x
    // slower, a K = 64 product at -O3 5-8% slower)
    __m512 acc[ROW_GROUP][2];
#pragma GCC unroll 12  // ROW_GROUP (the pragma takes no macro)
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int kj = 0; kj < KT; kj++) {
        const uint16_t *t0 = a0 + (size_t)kj * TILE_ELEMS, *t1 = a1 + (size_t)kj * TILE_ELEMS;
        const uint16_t *bt0 = bp + (size_t)kj * TILE_ELEMS, *bt1 = b1 + (size_t)kj * TILE_ELEMS;
        for (int p = 0; p < 16; p++) {
            __m512bh v0 = (__m512bh)_mm512_load_si512(bt0 + 32 * p), v1 = (__m512bh)_mm512_load_si512(bt1 + 32 * p);
#pragma GCC unroll 12  // ROW_GROUP (the pragma takes no macro)
            for (int r = 0; r < ROWS; r++) {
                int br = first + r;
                const uint16_t *a = br < 16 ? t0 + 32 * br : t1 + 32 * (br - 16);
                int32_t pair;
                memcpy(&pair, a + 2 * p, sizeof pair);
                __m512bh va = (__m512bh)_mm512_set1_epi32(pair);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], va, v0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], va, v1);
            }
        }
    }
    __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
#pragma GCC unroll 12  // ROW_GROUP (the pragma takes no macro)
    for (int r = 0; r < ROWS; r++) {
        if (r >= rows) break;
        float *row = c + (long)(first + r) * ldc;
        if (accumulate) {
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, row));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, row + 16));
        } else if (bias) {
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, bias));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, bias + 16));
        }
        _mm512_mask_storeu_ps(row, m0, acc[r][0]);
        _mm512_mask_storeu_ps(row + 16, m1, acc[r][1]);
    }
}

// The same 32x32 block as micro_kernel with VDPBF16PS: rows in groups of ROW_GROUP, ROW_GROUP and the
// rest (12, 12, 8). Every element sums its products in the same order whatever the grouping.
AMX_TARGET static void micro_kernel_avx512bf16(const uint16_t *ap, int a_kt, const uint16_t *bp, int b_kt, int KT,
                                               float *c, int ldc, int m, int n, int accumulate, const float *bias) {
    const uint16_t *b1 = bp + (size_t)b_kt * TILE_ELEMS, *a1 = ap + (size_t)a_kt * TILE_ELEMS;
    for (int r = 0; r < m; r++) {  // C's lines are fetched while the first rows compute, not when stored
        _mm_prefetch((const char *)(c + (long)r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (long)r * ldc + 16), _MM_HINT_T0);
    }
    rows_avx512bf16(ap, a1, 0, ROW_GROUP, bp, b1, KT, c, ldc, m, n, accumulate, bias);
    if (m > ROW_GROUP) rows_avx512bf16(ap, a1, ROW_GROUP, ROW_GROUP, bp, b1, KT, c, ldc, m - ROW_GROUP, n, accumulate, bias);
    if (m > 2 * ROW_GROUP) rows_avx512bf16(ap, a1, 2 * ROW_GROUP, 32 - 2 * ROW_GROUP, bp, b1, KT, c, ldc, m - 2 * ROW_GROUP, n, accumulate, bias);
}

// One product's operands and packed tiles, as every thread sees them.
typedef struct {
    int use_amx, M, N, K, MT, NT, KT;  // MT, NT: 16-row/column groups; KT: 32-k groups
    const char *A, *B;                 // op(A)(m, k) at A + (m*rs_a + k*cs_a) * a_esize; op(B) likewise
    long rs_a, cs_a, rs_b, cs_b;
    int a_bf16, b_bf16;
    size_t a_esize, b_esize;
    float *C;  // (M, ldc)
    int ldc, accumulate;
    const float *bias;  // NULL, or (N,): every row of C starts as it (accumulate 0)
    __m512 alpha;
    uint16_t *a_pack;  // (chunk_groups * KT) tiles: the A block being swept
    uint16_t *b_pack;  // (NT * KT) tiles
    // Tiles are packed in the order the source is stored: along k where k runs contiguously (op(A)'s
    // rows, op(B)'s columns under trans_b), else a band of 32 source lines at a time across all of its
    // groups, so reads run along whole lines instead of down 64-byte strips of every line.
    int k_runs_a, k_runs_b;
    // NULL, or running sums over k of op(A)'s rows (a_sums, (M,)) or op(B)'s columns (b_sums, (N,)),
    // added while the tiles are packed (one-thread products of a k-major fp32 operand only: the tiles
    // of a line are then packed in k order)
    float *a_sums, *b_sums;
} bf16_product;

// B tile number t in packing order
AMX_TARGET static void product_pack_b(const bf16_product *p, int t) {
    int nj = p->k_runs_b ? t / p->KT : t % p->NT, kj = p->k_runs_b ? t % p->KT : t / p->NT;
    const char *src = p->B + ((long)kj * 32 * p->rs_b + (long)nj * 16 * p->cs_b) * (long)p->b_esize;
    pack_b_tile(p->b_pack + ((size_t)nj * p->KT + kj) * TILE_ELEMS, src, p->b_bf16, p->rs_b, p->cs_b, p->N - nj * 16,
                p->K - kj * 32, p->b_sums ? p->b_sums + nj * 16 : NULL);
}

// A tile number t in packing order, of the block of 2 * mbn groups from 32-row block mb0
AMX_TARGET static void product_pack_a(const bf16_product *p, int mb0, int mbn, int t) {
    int KT = p->KT, g = p->k_runs_a ? t / KT : t % (2 * mbn), kj = p->k_runs_a ? t % KT : t / (2 * mbn);
    int mi = 2 * mb0 + g;
    const char *src = p->A + ((long)mi * 16 * p->rs_a + (long)kj * 32 * p->cs_a) * (long)p->a_esize;
    pack_a_tile(p->a_pack + ((size_t)g * KT + kj) * TILE_ELEMS, src, p->a_bf16, p->rs_a, p->cs_a, p->M - mi * 16,
                p->K - kj * 32, p->alpha, p->a_sums ? p->a_sums + mi * 16 : NULL);
}

// The 32x32 block (mb, nb) of C, from the A block that starts at 32-row block mb0
AMX_TARGET static void product_block(const bf16_product *p, int mb0, int mb, int nb) {
    int m = p->M - mb * 32 < 32 ? p->M - mb * 32 : 32, n = p->N - nb * 32 < 32 ? p->N - nb * 32 : 32;
    const uint16_t *ap = p->a_pack + (size_t)(mb - mb0) * 2 * p->KT * TILE_ELEMS;
    const uint16_t *bp = p->b_pack + (size_t)nb * 2 * p->KT * TILE_ELEMS;
    float *cb = p->C + (long)mb * 32 * p->ldc + nb * 32;
    const float *bias = p->bias ? p->bias + nb * 32 : NULL;
    if (p->use_amx && bias) {  // the tiles start from C: the block filled with the bias first, as fill_rows would
        for (int i = 0; i < m; i++) memcpy(cb + (long)i * p->ldc, bias, sizeof(float) * (size_t)n);
        micro_kernel(ap, p->KT, bp, p->KT, p->KT, cb, p->ldc, m, n, 1);
    } else if (p->use_amx) {
        micro_kernel(ap, p->KT, bp, p->KT, p->KT, cb, p->ldc, m, n, p->accumulate);
    } else {
        micro_kernel_avx512bf16(ap, p->KT, bp, p->KT, p->KT, cb, p->ldc, m, n, p->accumulate, bias);
    }
}

// Packs both operands into tiles, then runs the AMX or the VDPBF16PS micro-kernel over 32x32 blocks.
// A is packed MC_ROWS rows at a time, just before its blocks of 32x32 are swept across all of B, so the
// packed A block is still in L2 when the micro-kernels read it.
AMX_TARGET static void gemm_bf16_packed(int use_amx, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                        const void *A, int a_bf16, int lda, const void *B, int b_bf16, int ldb,
                                        float beta, float *C, int ldc, int nthreads, float *a_sums,
                                        float *b_sums, const float *bias) {
    bf16_product p = {.use_amx = use_amx, .M = M, .N = N, .K = K, .MT = (M + 31) / 32 * 2, .NT = (N + 31) / 32 * 2,
                      .KT = (K + 31) / 32, .A = A, .B = B, .rs_a = trans_a ? 1 : lda, .cs_a = trans_a ? lda : 1,
                      .rs_b = trans_b ? 1 : ldb, .cs_b = trans_b ? ldb : 1, .a_bf16 = a_bf16, .b_bf16 = b_bf16,
                      .a_esize = a_bf16 ? sizeof(fsdp_bf16) : sizeof(float),
                      .b_esize = b_bf16 ? sizeof(fsdp_bf16) : sizeof(float), .C = C, .ldc = ldc,
                      .accumulate = beta != 0.0f, .alpha = _mm512_set1_ps(alpha), .a_sums = a_sums,
                      .b_sums = b_sums, .bias = bias};
    p.k_runs_a = p.cs_a == 1;
    p.k_runs_b = p.rs_b == 1;
    int team = nthreads > 1, KT = p.KT;
    FSDP_ASSERT(!team || (!a_sums && !b_sums));  // a team packs a line's tiles on several threads
    int chunk_groups = p.MT < MC_ROWS / 16 ? p.MT : MC_ROWS / 16;  // 16-row groups of A packed at a time
    p.a_pack = grow(team ? &team_a : &thread_a, sizeof(uint16_t) * TILE_ELEMS * (size_t)chunk_groups * KT);
    p.b_pack = grow(team ? &team_b : &thread_b, sizeof(uint16_t) * TILE_ELEMS * (size_t)p.NT * KT);
    int m_blocks = p.MT / 2, n_blocks = p.NT / 2, mc_blocks = MC_ROWS / 32;
    int scale = beta != 0.0f && beta != 1.0f;
    if (!team) {  // no OpenMP constructs at all: a team of one still pays a futex call per barrier
        if (use_amx) configure_tiles();
        if (scale) cpu_scale_rows(C, ldc, 0, M, N, beta);
        for (int t = 0; t < p.NT * KT; t++) product_pack_b(&p, t);
        for (int mb0 = 0; mb0 < m_blocks; mb0 += mc_blocks) {
            int mbn = m_blocks - mb0 < mc_blocks ? m_blocks - mb0 : mc_blocks;
            for (int t = 0; t < 2 * mbn * KT; t++) product_pack_a(&p, mb0, mbn, t);
            for (int nb = 0; nb < n_blocks; nb++)
                for (int mb = mb0; mb < mb0 + mbn; mb++) product_block(&p, mb0, mb, nb);
        }
        if (use_amx) _tile_release();
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        if (use_amx) configure_tiles();
        if (scale) {
#pragma omp for schedule(static)
            for (int i = 0; i < M; i++) cpu_scale_rows(C, ldc, i, i + 1, N, beta);
        }
#pragma omp for schedule(static) nowait
        for (int t = 0; t < p.NT * KT; t++) product_pack_b(&p, t);
        for (int mb0 = 0; mb0 < m_blocks; mb0 += mc_blocks) {
            int mbn = m_blocks - mb0 < mc_blocks ? m_blocks - mb0 : mc_blocks;
#pragma omp for schedule(static)
            for (int t = 0; t < 2 * mbn * KT; t++) product_pack_a(&p, mb0, mbn, t);
#pragma omp for schedule(static) collapse(2)
            for (int nb = 0; nb < n_blocks; nb++)
                for (int mb = mb0; mb < mb0 + mbn; mb++) product_block(&p, mb0, mb, nb);
        }
        if (use_amx) _tile_release();
    }
}

static _Thread_local scratch thread_sums;

// Running sums over k of a k-major fp32 operand, fused into its packing; `lines` padded to 16
static float *fresh_sums(int lines) {
    int padded = (lines + 15) / 16 * 16;
    float *acc = grow(&thread_sums, sizeof(float) * (size_t)padded);
    memset(acc, 0, sizeof(float) * (size_t)padded);
    return acc;
}

// a_sums (M,) / b_sums (N,): NULL, or (at most one of them) += the sums over k of op(A)'s rows / op(B)'s
// columns, an fp32 operand stored k-major and dense (lda == M with trans_a / ldb == N without trans_b),
// alpha 1. Each line is summed in k order from zero and then added, as cpu_bias_backward sums: the same
// bits whether the sums are fused into the packing (one-thread packed products) or taken after the product.
// bias: NULL, or (N,) that every row of C starts as (beta must be 0): the bits of filling C's rows with
// it and multiplying with beta 1.
static void gemm_bf16_any(int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A, int a_bf16,
                          int lda, const void *B, int b_bf16, int ldb, float beta, float *C, int ldc, float *a_sums,
                          float *b_sums, const float *bias) {
    FSDP_ASSERT(!a_sums || (trans_a && lda == M && !a_bf16 && alpha == 1.0f));
    FSDP_ASSERT(!b_sums || (!trans_b && ldb == N && !b_bf16));
    FSDP_ASSERT(!a_sums || !b_sums);  // one dout per product
    FSDP_ASSERT(!bias || beta == 0.0f);
    FSDP_ASSERT(!a_bf16 || alpha == 1.0f);  // a bf16 A is not scaled (alpha would need a second rounding)
    if (bf16_path < 0) cpu_gemm_bf16_select(fsdp_tunable(FSDP_ENV_GEMM_BF16));
    int nthreads = omp_in_parallel() ? 1 : omp_get_max_threads();
    double flops = 2.0 * M * N * (double)K;
    if (flops < 4e6) nthreads = 1;
    int packed = bf16_path != PATH_EMULATE && M > 0 && N > 0 && K > 0 && alpha != 0.0f;
    // fused: one thread packs each line's tiles in k order, and the operand takes the k-major packing
    float *a_acc = a_sums && packed && nthreads == 1 && lda != 1 ? fresh_sums(M) : NULL;
    float *b_acc = b_sums && packed && nthreads == 1 && ldb != 1 ? fresh_sums(N) : NULL;
    if (bias && !packed && N > 0) {  // C's rows filled with the bias, then multiplied into as beta 1
        for (int m = 0; m < M; m++) memcpy(C + (long)m * ldc, bias, sizeof(float) * (size_t)N);
        beta = 1.0f, bias = NULL;
    }
    if (M > 0 && N > 0) {
        if (K <= 0 || alpha == 0.0f) {  // C = beta * C (B is never read; beta 0 ignores NaN in C, as BLAS)
            cpu_scale_rows(C, ldc, 0, M, N, beta);
        } else if (bf16_path == PATH_EMULATE) {
            gemm_bf16_emulated(trans_a, trans_b, M, N, K, alpha, A, a_bf16, lda, B, b_bf16, ldb, beta, C, ldc);
        } else {
            gemm_bf16_packed(bf16_path == PATH_AMX, trans_a, trans_b, M, N, K, alpha, A, a_bf16, lda, B, b_bf16, ldb,
                             beta, C, ldc, nthreads, a_acc, b_acc, bias);
        }
    }
    for (int m = 0; a_acc && m < M; m++) a_sums[m] += a_acc[m];
    for (int n = 0; b_acc && n < N; n++) b_sums[n] += b_acc[n];
    if (a_sums && !a_acc && K > 0) cpu_bias_backward(a_sums, A, K, M);
    if (b_sums && !b_acc && K > 0) cpu_bias_backward(b_sums, B, K, N);
}

void cpu_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(trans_a, trans_b, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, ldc, NULL, NULL, NULL);
}

void cpu_gemm_b16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                       const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(trans_a, trans_b, M, N, K, alpha, A, 0, lda, B, 1, ldb, beta, C, ldc, NULL, NULL, NULL);
}

void cpu_gemm_a16(int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(trans_a, trans_b, M, N, K, alpha, A, 1, lda, B, 0, ldb, beta, C, ldc, NULL, NULL, NULL);
}

void cpu_gemm_a16_b16(int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
                           const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(trans_a, trans_b, M, N, K, alpha, A, 1, lda, B, 1, ldb, beta, C, ldc, NULL, NULL, NULL);
}

void cpu_gemm_b16_dbias(int M, int N, int K, const float *A, const fsdp_bf16 *B, int ldb, float beta, float *C,
                             int ldc, float *dbias) {
    gemm_bf16_any(1, 0, M, N, K, 1.0f, A, 0, M, B, 1, ldb, beta, C, ldc, dbias, NULL, NULL);
}

void cpu_gemm_a16_dbias(int M, int N, int K, const fsdp_bf16 *A, int lda, const float *B, float beta, float *C,
                             int ldc, float *dbias) {
    gemm_bf16_any(1, 0, M, N, K, 1.0f, A, 1, lda, B, 0, N, beta, C, ldc, NULL, dbias, NULL);
}

void cpu_gemm_b16_bias(int trans_b, int M, int N, int K, const float *A, int lda, const fsdp_bf16 *B, int ldb,
                            const float *bias, float *C, int ldc) {
    gemm_bf16_any(0, trans_b, M, N, K, 1.0f, A, 0, lda, B, 1, ldb, 0.0f, C, ldc, NULL, NULL, bias);
}

void cpu_gemm_a16_b16_bias(int trans_b, int M, int N, int K, const fsdp_bf16 *A, int lda, const fsdp_bf16 *B,
                                int ldb, const float *bias, float *C, int ldc) {
    gemm_bf16_any(0, trans_b, M, N, K, 1.0f, A, 1, lda, B, 1, ldb, 0.0f, C, ldc, NULL, NULL, bias);
}

// ---- packed operands kept across products (attention: a head's keys and values) ------------------

int cpu_bf16_tiles_available(void) {
    if (bf16_path < 0) cpu_gemm_bf16_select(fsdp_tunable(FSDP_ENV_GEMM_BF16));
    return bf16_path != PATH_EMULATE;
}

size_t cpu_bf16_tiles_elems(int lines, int K) {
    return (size_t)((lines + 31) / 32 * 32) * (size_t)((K + 31) / 32 * 32);
}

AMX_TARGET void cpu_bf16_tiles_pack_a(uint16_t *dst, const float *A, long rs, long cs, int M, int K, float alpha) {
    int KT = (K + 31) / 32, MT = (M + 31) / 32 * 2;
    __m512 a = _mm512_set1_ps(alpha);
    for (int mi = 0; mi < MT; mi++)
        for (int kj = 0; kj < KT; kj++)
            pack_a_tile(dst + ((size_t)mi * KT + kj) * TILE_ELEMS, A + (long)mi * 16 * rs + (long)kj * 32 * cs, 0, rs,
                        cs, M - mi * 16, K - kj * 32, a, NULL);
}

AMX_TARGET void cpu_bf16_tiles_pack_b(uint16_t *dst, const float *B, long rs, long cs, int N, int K) {
    int KT = (K + 31) / 32, NT = (N + 31) / 32 * 2;
    for (int nj = 0; nj < NT; nj++)
        for (int kj = 0; kj < KT; kj++)
            pack_b_tile(dst + ((size_t)nj * KT + kj) * TILE_ELEMS, B + (long)kj * 32 * rs + (long)nj * 16 * cs, 0, rs,
                        cs, N - nj * 16, K - kj * 32, NULL);
}

AMX_TARGET void cpu_bf16_tiles_product(const uint16_t *a, int a_kt, const uint16_t *b, int b_kt, int KT, int M, int N,
                                       float *C, int ldc, int accumulate) {
    FSDP_ASSERT(bf16_path != PATH_EMULATE && KT <= a_kt && KT <= b_kt);
    int use_amx = bf16_path == PATH_AMX;
    if (use_amx) configure_tiles();
    for (int nb = 0; nb * 32 < N; nb++)
        for (int mb = 0; mb * 32 < M; mb++) {
            int m = M - mb * 32 < 32 ? M - mb * 32 : 32, n = N - nb * 32 < 32 ? N - nb * 32 : 32;
            const uint16_t *ap = a + (size_t)mb * 2 * a_kt * TILE_ELEMS, *bp = b + (size_t)nb * 2 * b_kt * TILE_ELEMS;
            float *cb = C + (long)mb * 32 * ldc + nb * 32;
            if (use_amx) micro_kernel(ap, a_kt, bp, b_kt, KT, cb, ldc, m, n, accumulate);
            else micro_kernel_avx512bf16(ap, a_kt, bp, b_kt, KT, cb, ldc, m, n, accumulate, NULL);
        }
    if (use_amx) _tile_release();
}
