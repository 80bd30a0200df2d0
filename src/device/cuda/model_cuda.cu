// model_cuda.cu: the CUDA device's model-level kernels: embedding lookup (fp32 and bf16 tables) and its
// scatter-add gradient, the fused softmax cross-entropy (forward and backward), the seed's abs-mean loss,
// the AdamW and SGD steps, the sum of squares (gradient norms), and the deterministic mode's exact
// arithmetic: fixed-point quantize / finalize and the exact, carried sum of squares.
//
// Every kernel computes what the CPU kernel (device/cpu/embedding.c, cross_entropy.c, abs_mean.c,
// adamw.c, sgd.c, elementwise.c's cpu_sum_squares, fixed_point.c) computes, in the same order of
// operations: the CPU is built in ISO C mode (no FMA contraction), so every fp32 / double product and sum
// here is written with the _rn intrinsics, which nvcc never fuses. Where that order is the CPU's, the
// results are the CPU's bits:
//  - embedding forward: a copy (fp32) or one add; backward: one thread per channel adding the tokens'
//    rows in token order (embedding.c's order; no atomics, deterministic);
//  - AdamW, SGD: the same fp32 operations element by element (sqrtf and the divisions correctly rounded);
//  - sum_squares and abs_mean: the CPU's fixed blocks (block_sum.h), each block summed in 8 interleaved
//    double lanes (lane j: the block's elements j, j+8, ... in order), the lanes combined in
//    cpu_sum_lanes8's tree, the block sums added in block order on one thread;
//  - fixed_quantize / fixed_finalize: the same double operations (round to nearest even by the
//    1.5 x 2^52 trick, digits from the top down); sum_squares_exact: integer arithmetic, exact in any order.
// Cross-entropy's exponentials are CUDA's expf (within an ulp or two of the CPU's), and its sums run in a
// different, fixed order (256 strided partial sums per row, added in thread order; row losses added in
// row order on one thread): deterministic, not the CPU's bits.
//
// Sizes of 0 write nothing, except where the CPU writes something anyway: cross_entropy_forward over
// N = 0 rows and abs_mean_forward over n = 0 values store the CPU's 0 / 0 (NaN), sum_squares adds 0, and
// sum_squares_exact still carries `words`. A target outside [0, V) (which the CPU does not check, reading
// outside the row) makes that row's loss NaN and takes no one-hot term in backward; embedding indices
// are not checked (the kernels are not told V), as on the CPU.
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_common.cuh"

extern "C" {
#include "kernels/block_sum.h"
}

namespace {

constexpr unsigned kThreads = 256;       // threads per block of the elementwise kernels
constexpr unsigned kEmbedThreads = 32;   // threads per block of embedding_backward (one per channel)
constexpr unsigned kRowThreads = 256;    // threads per block (one block per row) of cross_entropy_forward
constexpr int kLanes = 8;                // block_sum.h's interleaved lanes (cpu_sum_lanes8)
constexpr size_t kSumSquaresMinBlock = 4096;  // elementwise.c's SUM_SQUARES_MIN_BLOCK
constexpr size_t kAbsMeanMinBlock = 4096;     // abs_mean.c's ABS_MEAN_MIN_BLOCK
constexpr double kRoundMagic = 6755399441055744.0;  // fixed_point.c's ROUND_MAGIC: 1.5 x 2^52
constexpr double kRoundLimit = 2251799813685248.0;  // fixed_point.c's ROUND_LIMIT: 2^51
constexpr int kXsumWords = FSDP_XSUM_WORDS;
constexpr int kXsumSlots = FSDP_XSUM_WORDS + 1;  // a block's partial: its words, then its non-finite flag
constexpr unsigned kXsumMaxBlocks = 1024;        // blocks of the exact sum of squares at most

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ double nan_double() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ float nan_float() { return __int_as_float(0x7fc00000); }  // C's NAN

// ---- embedding ----

// out (N*C,) = table (V, C) rows idx (N,) (+= when accumulate); total = N*C
__global__ void k_embedding_forward(float *out, const int32_t *idx, const float *table, size_t total, int C,
                                    int accumulate) {
    GRID_STRIDE(i, total) {
        size_t n = i / (size_t)C, c = i % (size_t)C;
        float v = table[(size_t)idx[n] * (size_t)C + c];
        out[i] = accumulate ? __fadd_rn(out[i], v) : v;
    }
}

// out (N*C,) = (accumulate ? out : 0) + widen(table (V, C) rows idx (N,)) (embedding.c's b16 form: 0 + x,
// so -0 becomes +0 as there); total = N*C
__global__ void k_embedding_forward_b16(float *out, const int32_t *idx, const uint16_t *table, size_t total, int C,
                                        int accumulate) {
    GRID_STRIDE(i, total) {
        size_t n = i / (size_t)C, c = i % (size_t)C;
        float v = cu_bf16_to_f32(table[(size_t)idx[n] * (size_t)C + c]);
        out[i] = __fadd_rn(accumulate ? out[i] : 0.0f, v);
    }
}

// dtable (V, C) += dout (N, C) scattered to rows idx (N,): one thread per channel c, the tokens in order
// (embedding.c's order; a row that repeats gets its additions in token order, and no two threads touch
// the same element)
__global__ void k_embedding_backward(float *dtable, const float *__restrict__ dout, const int32_t *__restrict__ idx,
                                     int N, int C) {
    GRID_STRIDE(c, (size_t)C) {
        for (int n = 0; n < N; n++) {
            size_t at = (size_t)idx[n] * (size_t)C + c;
            dtable[at] = __fadd_rn(dtable[at], dout[(size_t)n * (size_t)C + c]);
        }
    }
}

// ---- cross-entropy ----

// One block of kRowThreads threads per row n of logits (N, V): stats (N, 2) = (max, 1 / sum exp(z - max)),
// losses (N,) = row_loss (N,) (double) = log(sum) - (z[target] - max). Thread j takes the row's elements
// j, j + blockDim, ...; its partial max and (double) sum of expf are combined by thread 0 in thread order.
__global__ void k_cross_entropy_forward(double *row_loss, float *losses, float *stats, const float *logits,
                                        const int32_t *targets, int V) {
    __shared__ float part_max[kRowThreads];
    __shared__ double part_sum[kRowThreads];
    __shared__ float row_max;
    const size_t n = blockIdx.x;
    const float *z = logits + n * (size_t)V;  // (V,)
    const int j = (int)threadIdx.x, nt = (int)blockDim.x;
    float m = z[0];  // row_max's start (and its rule: a larger value replaces m)
    for (int v = j; v < V; v += nt) m = z[v] > m ? z[v] : m;
    part_max[j] = m;
    __syncthreads();
    if (j == 0) {
        float mm = part_max[0];
        for (int k = 1; k < nt; k++) mm = part_max[k] > mm ? part_max[k] : mm;
        row_max = mm;
    }
    __syncthreads();
    const float maxv = row_max;
    double s = 0.0;
    for (int v = j; v < V; v += nt) s = __dadd_rn(s, (double)expf(__fsub_rn(z[v], maxv)));
    part_sum[j] = s;
    __syncthreads();
    if (j == 0) {
        double sum = 0.0;
        for (int k = 0; k < nt; k++) sum = __dadd_rn(sum, part_sum[k]);
        int t = targets[n];
        double loss = t >= 0 && t < V ? __dsub_rn(log(sum), (double)__fsub_rn(z[t], maxv)) : nan_double();
        stats[2 * n] = maxv;
        stats[2 * n + 1] = __double2float_rn(__ddiv_rn(1.0, sum));
        losses[n] = __double2float_rn(loss);
        row_loss[n] = loss;
    }
}

// *out = (vals (count,) added in order from 0) / divisor, on one thread (cross_entropy.c's mean: count 0
// and divisor 0 give 0 / 0, NaN)
__global__ void k_mean_in_order(double *out, const double *vals, int count, double divisor) {
    double total = 0.0;
    for (int k = 0; k < count; k++) total = __dadd_rn(total, vals[k]);
    *out = __ddiv_rn(total, divisor);
}

// dlogits (N*V,) = expf(logits - max) * inv * dloss, minus dloss at each row's target (stats (N, 2),
// targets (N,)); dlogits may be logits (each element read, then written, by one thread); total = N*V
__global__ void k_cross_entropy_backward(float *dlogits, const float *logits, const float *stats,
                                         const int32_t *targets, float dloss, size_t total, int V) {
    GRID_STRIDE(i, total) {
        size_t n = i / (size_t)V;
        int v = (int)(i % (size_t)V);
        float maxv = stats[2 * n], inv = stats[2 * n + 1];
        float d = __fmul_rn(__fmul_rn(expf(__fsub_rn(logits[i], maxv)), inv), dloss);
        if (v == targets[n]) d = __fsub_rn(d, dloss);
        dlogits[i] = d;
    }
}

// ---- sums over fixed blocks (block_sum.h): sum_squares, abs_mean ----

// a lane's term for value x: |x| (kAbs) or x^2, in double
template <int kAbs>
__device__ __forceinline__ double lane_term(float x) {
    double v = (double)x;
    return kAbs ? fabs(v) : __dmul_rn(v, v);  // the square of an fp32 value is exact in double
}

// lanes (nb, 8): lane j of block b = the sum, in order from 0.0, of f(x[i]) over i = b*bs + j + 8t <
// min(n, (b+1)*bs), f = |x| (kAbs) or x^2, in double (block_abs_sum's / block_sum_squares' lanes); four
// loads at a time, then their additions in element order
template <int kAbs>
__global__ void k_block_lanes(double *lanes, const float *__restrict__ x, size_t n, size_t bs, size_t nb) {
    GRID_STRIDE(t, nb * kLanes) {
        size_t b = t / kLanes, j = t % kLanes;
        size_t lo = b * bs, hi = n - lo < bs ? n : lo + bs;
        double acc = 0.0;
        size_t i = lo + j;
        for (; i + 3 * kLanes < hi; i += 4 * kLanes) {
            float a0 = x[i], a1 = x[i + kLanes], a2 = x[i + 2 * kLanes], a3 = x[i + 3 * kLanes];
            acc = __dadd_rn(acc, lane_term<kAbs>(a0));
            acc = __dadd_rn(acc, lane_term<kAbs>(a1));
            acc = __dadd_rn(acc, lane_term<kAbs>(a2));
            acc = __dadd_rn(acc, lane_term<kAbs>(a3));
        }
        for (; i < hi; i += kLanes) acc = __dadd_rn(acc, lane_term<kAbs>(x[i]));
        lanes[t] = acc;
    }
}

constexpr unsigned kTotalThreads = 256;  // threads of k_block_total

// total = the blocks' sums (each cpu_sum_lanes8 of its lanes (nb, 8)) added in block order from 0.0
// (cpu_sum_in_order); then *out = total / n (mean) or *out += total. One block: its threads make the
// sums of kTotalThreads blocks at a time, thread 0 adds them in order (the bits of one serial loop).
__global__ void __launch_bounds__(kTotalThreads) k_block_total(double *out, const double *lanes, size_t nb, size_t n,
                                                                int mean) {
    __shared__ double parts[kTotalThreads];  // (kTotalThreads,) the sums of blocks b0 ..
    double total = 0.0;                      // thread 0's
    for (size_t b0 = 0; b0 < nb; b0 += kTotalThreads) {
        const size_t b = b0 + threadIdx.x;
        if (b < nb) {
            const double *a = lanes + b * kLanes;  // (8,)
            parts[threadIdx.x] = __dadd_rn(__dadd_rn(__dadd_rn(a[0], a[4]), __dadd_rn(a[2], a[6])),
                                           __dadd_rn(__dadd_rn(a[1], a[5]), __dadd_rn(a[3], a[7])));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const size_t m = nb - b0 < kTotalThreads ? nb - b0 : kTotalThreads;
            for (size_t k = 0; k < m; k++) total = __dadd_rn(total, parts[k]);
        }
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    if (mean) *out = __ddiv_rn(total, (double)n);
    else *out = __dadd_rn(*out, total);
}

// dy (n,) = sign(y (n,)) * (dloss / n); sign(0) and sign(NaN) are 0 (abs_mean.c)
__global__ void k_abs_mean_backward(float *dy, const float *y, size_t n, float dloss) {
    const float g = __fdiv_rn(dloss, (float)n);
    GRID_STRIDE(i, n) {
        float v = y[i];
        dy[i] = v > 0.0f ? g : (v < 0.0f ? -g : 0.0f);
    }
}

// ---- optimizers ----

// adamw.c's adamw_range, operation by operation. param, grad, m, v: (n,)
__global__ void k_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, float step_size, float bias2_sqrt) {
    const float decay = __fsub_rn(1.0f, __fmul_rn(lr, weight_decay));
    const float c1 = __fsub_rn(1.0f, beta1), c2 = __fsub_rn(1.0f, beta2);
    GRID_STRIDE(i, n) {
        float g = grad[i];
        float p = __fmul_rn(param[i], decay);
        float mi = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(c1, g));
        float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(__fmul_rn(c2, g), g));
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bias2_sqrt), eps);
        param[i] = __fsub_rn(p, __fmul_rn(step_size, __fdiv_rn(mi, denom)));
    }
}

// sgd.c's loop, operation by operation. param, grad: (n,); buf: (n,) or NULL (no momentum)
__global__ void k_sgd(float *param, const float *grad, float *buf, size_t n, float lr, float momentum,
                      float dampening, float weight_decay, int nesterov, int first) {
    const float keep = __fsub_rn(1.0f, dampening);
    GRID_STRIDE(i, n) {
        float g = grad[i];
        if (weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(weight_decay, param[i]));
        if (buf) {
            float b = first ? g : __fadd_rn(__fmul_rn(momentum, buf[i]), __fmul_rn(keep, g));
            buf[i] = b;
            g = nesterov ? __fadd_rn(g, __fmul_rn(momentum, b)) : b;
        }
        param[i] = __fsub_rn(param[i], __fmul_rn(lr, g));
    }
}

// muon_elementwise.c's loops: y = a y + b x (two roundings, then the sum); x /= sqrt(sum_sq) + eps
__global__ void k_axpby(float *y, const float *x, float a, float b, size_t n) {
    GRID_STRIDE(i, n) y[i] = __fadd_rn(__fmul_rn(a, y[i]), __fmul_rn(b, x[i]));
}

__global__ void k_divide_by_norm(float *x, const double *sum_sq, float eps, size_t n) {
    const float d = (float)(sqrt(*sum_sq) + (double)eps);
    GRID_STRIDE(i, n) x[i] = __fdiv_rn(x[i], d);
}

// ---- fixed point (fixed_point.c) ----

// limbs: digit k of element i of g (n,) at limbs[((i / block) * K + k) * block + i % block]; x = g * 2^frac
// (to_fixed); !(|x| < bound) (NaN, Inf, out of range) makes digit 0 NaN and the others 0 (quantize_tile's
// poison pass, which tests x); else v = x rounded to nearest even and its balanced digits from the top down
__global__ void k_fixed_quantize(float *limbs, const float *g, size_t n, size_t block, int K, int B, double to_fixed,
                                 double bound) {
    GRID_STRIDE(i, n) {
        float *out = limbs + (i / block) * (size_t)K * block + i % block;  // digit k at out[k * block]
        double x = __dmul_rn((double)g[i], to_fixed);
        if (!(fabs(x) < bound)) {
            for (int k = 0; k < K; k++) out[(size_t)k * block] = k == 0 ? nan_float() : 0.0f;
            continue;
        }
        double v = fabs(x) < kRoundLimit ? __dsub_rn(__dadd_rn(x, kRoundMagic), kRoundMagic) : x;
        for (int k = K - 1; k >= 0; k--) {
            double place = ldexp(1.0, k * B), inv_place = ldexp(1.0, -k * B);  // exact powers of two
            double d = __dsub_rn(__dadd_rn(__dmul_rn(v, inv_place), kRoundMagic), kRoundMagic);
            v = __dsub_rn(v, __dmul_rn(d, place));
            out[(size_t)k * block] = __double2float_rn(d);
        }
    }
}

// out (n,) = (float)(unit * sum over k from K-1 down to 0 of acc[k*n + i] * 2^(k B)); acc: (K, n)
__global__ void k_fixed_finalize(float *out, const float *acc, size_t n, int K, int B, double unit) {
    GRID_STRIDE(i, n) {
        double v = 0.0;
        for (int k = K - 1; k >= 0; k--)
            v = __dadd_rn(v, __dmul_rn((double)acc[(size_t)k * n + i], ldexp(1.0, k * B)));
        out[i] = __double2float_rn(__dmul_rn(v, unit));
    }
}

// Exact sum of squares, step 1. part (gridDim.x, kXsumSlots): each block's sum of the squares of its
// elements of x (n,) as carried 32-bit words (word w: bits [32 w, 32 w + 32) counted from 2^FSDP_XSUM_LOW;
// the last word takes every higher bit), then a flag: 1 when one of its elements was NaN or Inf. Each
// thread adds its squares into private 64-bit words (every addend below 2^32), the threads' words go
// into the block's by integer atomics (exact, so the order does not matter), and thread 0 carries them.
__global__ void k_xsum_blocks(unsigned long long *part, const float *x, size_t n) {
    __shared__ unsigned long long block_words[kXsumSlots];
    if (threadIdx.x < (unsigned)kXsumSlots) block_words[threadIdx.x] = 0;
    __syncthreads();
    unsigned long long local[kXsumWords];
    for (int k = 0; k < kXsumWords; k++) local[k] = 0;
    int nonfinite = 0;
    GRID_STRIDE(i, n) {
        uint32_t bits = __float_as_uint(x[i]);
        uint32_t ex = (bits >> 23) & 0xffu, man = bits & 0x7fffffu;
        if (ex == 0xffu) {
            nonfinite = 1;
            continue;
        }
        if (ex == 0 && man == 0) continue;
        unsigned long long m = ex ? (man | 0x800000u) : man;  // x = m * 2^e
        int e = ex ? (int)ex - 150 : -149;
        unsigned long long sq = m * m;  // < 2^48, placed at bit 2e - FSDP_XSUM_LOW (>= 0) of the sum
        int pos = 2 * e - FSDP_XSUM_LOW, w = pos / 32, sh = pos % 32;  // w <= 15: w + 2 is a word
        unsigned long long lo = sq << sh, hi = sh ? sq >> (64 - sh) : 0;  // the 80-bit shifted square
        local[w] += lo & 0xffffffffull;
        local[w + 1] += lo >> 32;
        local[w + 2] += hi;
    }
    for (int k = 0; k < kXsumWords; k++)
        if (local[k]) atomicAdd(&block_words[k], local[k]);
    if (nonfinite) atomicOr(&block_words[kXsumWords], 1ull);
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 0; k + 1 < kXsumWords; k++) {
            block_words[k + 1] += block_words[k] >> 32;
            block_words[k] &= 0xffffffffull;
        }
        unsigned long long *dst = part + (size_t)blockIdx.x * kXsumSlots;  // (kXsumSlots,)
        for (int k = 0; k < kXsumSlots; k++) dst[k] = block_words[k];
    }
}

// Exact sum of squares, step 2 (one block of at least kXsumSlots threads): the blocks' partials part
// (nblocks, kXsumSlots) summed word by word, then cpu_sum_squares_exact's ending on words
// (FSDP_XSUM_WORDS,): a non-finite square marks the last word -1; a marked sum is left as it is; else the
// sums are added and the words carried (also when nblocks is 0).
__global__ void k_xsum_finish(int64_t *words, const unsigned long long *part, int nblocks) {
    __shared__ unsigned long long total[kXsumSlots];
    const int k = (int)threadIdx.x;
    if (k < kXsumSlots) {
        unsigned long long s = 0;  // each block's words are carried (< 2^32): no overflow over 1024 blocks
        for (int b = 0; b < nblocks; b++) s += part[(size_t)b * kXsumSlots + k];
        total[k] = s;
    }
    __syncthreads();
    if (k != 0) return;
    if (total[kXsumWords]) words[kXsumWords - 1] = -1;
    if (words[kXsumWords - 1] < 0) return;
    for (int w = 0; w < kXsumWords; w++) words[w] += (int64_t)total[w];
    for (int w = 0; w + 1 < kXsumWords; w++) {
        words[w + 1] += words[w] >> 32;
        words[w] &= 0xffffffff;
    }
}

// ---- table entries ----

void t_embedding_forward(fsdp_stream *st, float *out, const int32_t *idx, const float *table, int N, int C,
                         int accumulate) {
    if (N <= 0 || C <= 0) return;
    size_t total = (size_t)N * (size_t)C;
    k_embedding_forward<<<cu_blocks(total, kThreads), kThreads, 0, cu_stream(st)>>>(out, idx, table, total, C,
                                                                                  accumulate);
    CU_LAUNCHED(st, "embedding_forward");
}

void t_embedding_forward_b16(fsdp_stream *st, float *out, const int32_t *idx, const fsdp_bf16 *table, int N, int C,
                             int accumulate) {
    if (N <= 0 || C <= 0) return;
    size_t total = (size_t)N * (size_t)C;
    k_embedding_forward_b16<<<cu_blocks(total, kThreads), kThreads, 0, cu_stream(st)>>>(out, idx, table, total, C,
                                                                                      accumulate);
    CU_LAUNCHED(st, "embedding_forward_b16");
}

void t_embedding_backward(fsdp_stream *st, float *dtable, const float *dout, const int32_t *idx, int N, int C) {
    if (N <= 0 || C <= 0) return;
    k_embedding_backward<<<cu_blocks((size_t)C, kEmbedThreads), kEmbedThreads, 0, cu_stream(st)>>>(dtable, dout,
                                                                                                 idx, N, C);
    CU_LAUNCHED(st, "embedding_backward");
}

void t_cross_entropy_forward(fsdp_stream *st, double *loss, float *losses, float *stats, const float *logits,
                             const int32_t *targets, int N, int V) {
    int rows = N > 0 && V > 0 ? N : 0;  // V <= 0 (nothing to read): the 0 / 0 of no rows
    double *row_loss = NULL;  // (rows,) device: the rows' losses in double, in the stream's scratch
    if (rows) {
        row_loss = (double *)fsdp_cuda_scratch(st, sizeof(double) * (size_t)rows);
        if (!row_loss) return;  // the failure is noted on st
        k_cross_entropy_forward<<<(unsigned)rows, kRowThreads, 0, cu_stream(st)>>>(row_loss, losses, stats, logits,
                                                                                  targets, V);
        CU_LAUNCHED(st, "cross_entropy_forward");
    }
    k_mean_in_order<<<1, 1, 0, cu_stream(st)>>>(loss, row_loss, rows, (double)(rows ? N : 0));
    CU_LAUNCHED(st, "cross_entropy_forward (mean)");
}

void t_cross_entropy_backward(fsdp_stream *st, float *dlogits, const float *logits, const float *stats,
                              const int32_t *targets, float dloss, int N, int V) {
    if (N <= 0 || V <= 0) return;
    size_t total = (size_t)N * (size_t)V;
    k_cross_entropy_backward<<<cu_blocks(total, kThreads), kThreads, 0, cu_stream(st)>>>(dlogits, logits, stats,
                                                                                       targets, dloss, total, V);
    CU_LAUNCHED(st, "cross_entropy_backward");
}

// The block sums of f over x (n,) (block_sum.h's blocks of at least min_block values), then *out = total / n
// (mean) or *out += total. n = 0: no blocks (the mean is 0 / 0, NaN, as on the CPU).
void block_sum(fsdp_stream *st, double *out, const float *x, size_t n, size_t min_block, int absval, int mean,
               const char *what) {
    size_t bs = cpu_sum_block(n, min_block), nb = cpu_sum_nblocks(n, bs);
    double *lanes = NULL;  // (nb, 8) device, in the stream's scratch
    if (nb) {
        lanes = (double *)fsdp_cuda_scratch(st, sizeof(double) * kLanes * nb);
        if (!lanes) return;  // the failure is noted on st
        if (absval)
            k_block_lanes<1><<<cu_blocks(nb * kLanes, kThreads), kThreads, 0, cu_stream(st)>>>(lanes, x, n, bs, nb);
        else
            k_block_lanes<0><<<cu_blocks(nb * kLanes, kThreads), kThreads, 0, cu_stream(st)>>>(lanes, x, n, bs, nb);
        CU_LAUNCHED(st, what);
    }
    k_block_total<<<1, kTotalThreads, 0, cu_stream(st)>>>(out, lanes, nb, n, mean);
    CU_LAUNCHED(st, what);
}

void t_abs_mean_forward(fsdp_stream *st, double *loss, const float *y, size_t n) {
    block_sum(st, loss, y, n, kAbsMeanMinBlock, 1, 1, "abs_mean_forward");
}

void t_abs_mean_backward(fsdp_stream *st, float *dy, const float *y, size_t n, float dloss) {
    if (!n) return;
    k_abs_mean_backward<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(dy, y, n, dloss);
    CU_LAUNCHED(st, "abs_mean_backward");
}

void t_adamw_update(fsdp_stream *st, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float step_size, float bias2_sqrt) {
    if (!n) return;
    k_adamw<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(param, grad, m, v, n, lr, beta1, beta2, eps,
                                                                    weight_decay, step_size, bias2_sqrt);
    CU_LAUNCHED(st, "adamw_update");
}

void t_sgd_update(fsdp_stream *st, float *param, const float *grad, float *momentum_buf, size_t n, float lr,
                  float momentum, float dampening, float weight_decay, int nesterov, int first) {
    if (!n) return;
    k_sgd<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(param, grad, momentum_buf, n, lr, momentum,
                                                                  dampening, weight_decay, nesterov, first);
    CU_LAUNCHED(st, "sgd_update");
}

void t_axpby(fsdp_stream *st, float *y, const float *x, float a, float b, size_t n) {
    if (!n) return;
    k_axpby<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(y, x, a, b, n);
    CU_LAUNCHED(st, "axpby");
}

void t_divide_by_norm(fsdp_stream *st, float *x, const double *sum_sq, float eps, size_t n) {
    if (!n) return;
    k_divide_by_norm<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(x, sum_sq, eps, n);
    CU_LAUNCHED(st, "divide_by_norm");
}

void t_sum_squares(fsdp_stream *st, double *acc, const float *x, size_t n) {
    block_sum(st, acc, x, n, kSumSquaresMinBlock, 0, 0, "sum_squares");
}

void t_fixed_quantize(fsdp_stream *st, float *limbs, const float *g, size_t n, size_t block,
                      const fsdp_fixed_format *f) {
    if (!n || !block) return;  // block 0 describes no layout (the CPU would divide by it)
    const int K = f->limbs, B = f->limb_bits;
    const double to_fixed = ldexp(1.0, f->frac_bits), bound = ldexp(1.0, K * B - 1);
    k_fixed_quantize<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(limbs, g, n, block, K, B, to_fixed,
                                                                             bound);
    CU_LAUNCHED(st, "fixed_quantize");
}

void t_fixed_finalize(fsdp_stream *st, float *out, const float *acc, size_t n, const fsdp_fixed_format *f,
                      double scale) {
    if (!n) return;
    const double unit = ldexp(scale, -f->frac_bits);
    k_fixed_finalize<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(out, acc, n, f->limbs, f->limb_bits,
                                                                            unit);
    CU_LAUNCHED(st, "fixed_finalize");
}

void t_sum_squares_exact(fsdp_stream *st, int64_t *words, const float *x, size_t n) {
    unsigned nblocks = 0;
    unsigned long long *part = NULL;  // (nblocks, kXsumSlots) device, in the stream's scratch
    if (n) {
        nblocks = cu_blocks(n, kThreads);
        if (nblocks > kXsumMaxBlocks) nblocks = kXsumMaxBlocks;
        part = (unsigned long long *)fsdp_cuda_scratch(st, sizeof(unsigned long long) * kXsumSlots * nblocks);
        if (!part) return;  // the failure is noted on st
        k_xsum_blocks<<<nblocks, kThreads, 0, cu_stream(st)>>>(part, x, n);
        CU_LAUNCHED(st, "sum_squares_exact");
    }
    k_xsum_finish<<<1, 32, 0, cu_stream(st)>>>(words, part, (int)nblocks);
    CU_LAUNCHED(st, "sum_squares_exact (carry)");
}

#undef GRID_STRIDE

}  // namespace

// The same kernels in both tables: the CPU's bf16 table differs from its fp32 one only in the products.
extern "C" void fsdp_cuda_fill_model(struct fsdp_kernels *t, int bf16) {
    (void)bf16;
    t->embedding_forward = t_embedding_forward;
    t->embedding_forward_b16 = t_embedding_forward_b16;
    t->embedding_backward = t_embedding_backward;
    t->cross_entropy_forward = t_cross_entropy_forward;
    t->cross_entropy_backward = t_cross_entropy_backward;
    t->abs_mean_forward = t_abs_mean_forward;
    t->abs_mean_backward = t_abs_mean_backward;
    t->adamw_update = t_adamw_update;
    t->sgd_update = t_sgd_update;
    t->sum_squares = t_sum_squares;
    t->axpby = t_axpby;
    t->divide_by_norm = t_divide_by_norm;
    t->fixed_quantize = t_fixed_quantize;
    t->fixed_finalize = t_fixed_finalize;
    t->sum_squares_exact = t_sum_squares_exact;
}
