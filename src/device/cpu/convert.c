// convert.c: fp32 <-> bf16 over arrays, split over threads in chunks for large ones (each element is
// converted on its own, so the split cannot change a bit). tensor.h's array functions do the work.
#include "device/cpu/cpu_kernels.h"

#define CONVERT_CHUNK ((size_t)16384)

void cpu_f32_to_bf16(fsdp_bf16 *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i += CONVERT_CHUNK)
        fsdp_f32_to_bf16_array(dst + i, src + i, n - i < CONVERT_CHUNK ? n - i : CONVERT_CHUNK);
}

void cpu_bf16_to_f32(float *dst, const fsdp_bf16 *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i += CONVERT_CHUNK)
        fsdp_bf16_to_f32_array(dst + i, src + i, n - i < CONVERT_CHUNK ? n - i : CONVERT_CHUNK);
}

// serial: each chunk of bf16 values overwrites bytes of fp32 values an earlier chunk has read
void cpu_f32_to_bf16_in_place(void *buf, size_t n) { fsdp_f32_to_bf16_in_place(buf, n); }
