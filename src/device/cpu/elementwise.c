// elementwise.c: residual adds (fp32 and bf16 addends), scaling (whole arrays, and the GEMMs' C rows),
// bias broadcast and its gradient, row fill, sum of squares. The two reductions (bias gradient, sum of
// squares) give the same bits on any thread count.
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/block_sum.h"
#include "device/cpu/cpu_kernels.h"

#define SUM_SQUARES_MIN_BLOCK 4096  // values per block at least (one block, no threads, up to this many)

void cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_add_inplace(float *acc, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) acc[i] += b[i];
}

// the loop engine.c's add_bf16 ran (gradient shards += bf16 reduce-scatter results)
void cpu_add_inplace_b16(float *acc, const fsdp_bf16 *b, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) acc[i] += fsdp_bf16_to_f32(b[i]);
}

void cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_scale_rows(float *C, long ldc, int i0, int i1, int N, float beta) {
    for (int i = i0; i < i1; i++) {
        float *row = C + (long)i * ldc;
        if (beta == 0.0f) memset(row, 0, sizeof(float) * (size_t)N);
        else for (int j = 0; j < N; j++) row[j] *= beta;
    }
}

void cpu_bias_add(float *out, const float *bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) row[c] += bias[c];
    }
}

// the bias copy nn_linear_forward did before its GEMM (torch.addmm starts from the bias)
void cpu_fill_rows(float *out, const float *row, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C > 65536)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, row, sizeof(float) * (size_t)C);
}

// Columns are split over threads, so each dbias element has one writer, and each column is summed over
// n in order: the same bits for any split. A chunk of at most BIAS_CHUNK columns (its accumulators stay
// in L1) is swept row by row, each row read as one contiguous run: 2-2.7x the rate of 64-column strips,
// whose rows lie a whole row apart (one 4 KiB page each at C = 1024).
#define BIAS_CHUNK 1024

void cpu_bias_backward(float *dbias, const float *dout, int N, int C) {
    int nthreads = omp_in_parallel() ? 1 : omp_get_max_threads();
    int chunk = ((C + nthreads - 1) / nthreads + 15) / 16 * 16;
    chunk = chunk > BIAS_CHUNK ? BIAS_CHUNK : chunk < 64 ? 64 : chunk;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += chunk) {
        int width = C - c0 < chunk ? C - c0 : chunk;
        float acc[BIAS_CHUNK];
        memset(acc, 0, sizeof(float) * (size_t)width);
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * C + c0;
#pragma omp simd
            for (int c = 0; c < width; c++) acc[c] += row[c];
        }
        for (int c = 0; c < width; c++) dbias[c0 + c] += acc[c];
    }
}

// sum of squares of x (n,) in double (each square exact), element i into lane i % 8
static double block_sum_squares(const float *x, size_t n) {
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) acc[i % 8] += (double)x[i] * x[i];
    return cpu_sum_lanes8(acc);
}

// over fixed blocks (block_sum.h): the same bits on any thread count
void cpu_sum_squares(double *acc, const float *x, size_t n) {
    double part[CPU_SUM_MAX_BLOCKS];  // (nb,) block sums
    size_t bs = cpu_sum_block(n, SUM_SQUARES_MIN_BLOCK), nb = cpu_sum_nblocks(n, bs);
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t b = 0; b < nb; b++) part[b] = block_sum_squares(x + b * bs, n - b * bs < bs ? n - b * bs : bs);
    *acc += cpu_sum_in_order(part, nb);
}
