// gemm_bench.c: GFLOP/s of the GEMM paths (our AVX-512 kernel, OpenBLAS) on the shapes the GPT
// benchmark model runs, on the OpenMP threads given by OMP_NUM_THREADS, and on one product whose
// operands stay in L2 (256 x 256 x 256: 768 KiB in all), which shows what the micro-kernel and packing
// reach when memory does not get in the way.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"

// n floats, 64-byte aligned, zeroed
static float *aligned_floats(size_t n) {
    size_t bytes = (sizeof(float) * n + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (!p) {
        fprintf(stderr, "gemm-bench: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

int main(void) {
    struct { int ta, tb, M, N, K; const char *what; } shapes[] = {
        {0, 0, 2048, 1536, 512, "qkv fwd (x @ W)"},
        {0, 1, 2048, 2048, 512, "fc fwd (x @ W^T)"},
        {0, 1, 2048, 512, 2048, "proj bwd dX"},
        {1, 0, 512, 2048, 2048, "weight grad (X^T dY)"},
        {0, 1, 256, 256, 64, "attention QK^T"},
        {0, 1, 256, 256, 256, "in cache (L2)"},
    };
    // fp32: our kernel, OpenBLAS; bf16 operands with fp32 accumulation: AMX (where present), emulated
    const char *paths[] = {"avx512", "openblas", "amx", "avx512bf16", "emulate"};
    for (size_t p = 0; p < 5; p++) {
        int bf16 = p >= 2;
        if (bf16) cpu_gemm_bf16_select(paths[p]);
        if (bf16 && strcmp(cpu_gemm_bf16_name(), paths[p]) != 0) continue;  // the CPU lacks this path
        else cpu_gemm_select(paths[p]);
        cpu_gemm_select(p == 1 ? "openblas" : "avx512");
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
            // 64-byte aligned, as the library's buffers are (fsdp_alloc): C from malloc sits 16 bytes past
            // a line, splits every 64-byte row store in two and costs the bf16 products 8-10%
            float *A = aligned_floats((size_t)M * K), *B = aligned_floats((size_t)K * N);
            float *C = aligned_floats((size_t)M * N);
            for (long i = 0; i < (long)M * K; i++) A[i] = (float)(i % 13) * 0.01f;
            for (long i = 0; i < (long)K * N; i++) B[i] = (float)(i % 7) * 0.01f;
            int lda = shapes[s].ta ? M : K, ldb = shapes[s].tb ? K : N;
            double best = 1e9;
            int reps = M * N * (double)K > 1e8 ? 5 : 200;
            for (int r = 0; r < 3; r++) {
                double t0 = fsdp_now_sec();
                for (int i = 0; i < reps; i++)
                    (bf16 ? cpu_gemm_bf16 : cpu_gemm)(shapes[s].ta, shapes[s].tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                double dt = (fsdp_now_sec() - t0) / reps;
                best = dt < best ? dt : best;
            }
            char name[32];
            snprintf(name, sizeof name, "%s%s", bf16 ? "bf16/" : "", bf16 ? cpu_gemm_bf16_name() : cpu_gemm_name());
            printf("%-13s %-22s M %4d N %4d K %4d  %7.1f GFLOP/s\n", name, shapes[s].what, M, N, K,
                   2.0 * M * N * K / best / 1e9);
            free(A);
            free(B);
            free(C);
        }
    }
    return 0;
}
