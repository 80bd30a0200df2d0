// comm_sum.c: the fp32-accumulated sum of bf16 payloads, shared by every transport that sums here
// (shared memory, point to point, MPI's bf16 exchanges), so they all give the same bits.
#include "comm/comm_sum.h"

void comm_sum_bf16(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int nsrc, size_t n, float scale) {
    // blocks of fp32 accumulators, each source added in turn: the inner loops vectorize
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i0 = 0; i0 < n; i0 += 2048) {
        size_t m = n - i0 < 2048 ? n - i0 : 2048;
        float acc[2048];
        for (size_t i = 0; i < m; i++) acc[i] = fsdp_bf16_to_f32(src[0][i0 + i]);
        for (int r = 1; r < nsrc; r++) {
            const fsdp_bf16 *s = src[r] + i0;
            for (size_t i = 0; i < m; i++) acc[i] += fsdp_bf16_to_f32(s[i]);
        }
        for (size_t i = 0; i < m; i++) dst[i0 + i] = fsdp_f32_to_bf16(acc[i] * scale);
    }
}
