// table.cu: the CUDA device's kernel tables (fp32 and bf16 mixed precision), filled by the kernel files
// of this directory; every entry must be set (checked once, at the first call).
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

extern "C" void fsdp_cuda_fill_gemm(struct fsdp_kernels *t, int bf16);       // gemm_cuda.cu
extern "C" void fsdp_cuda_fill_attention(struct fsdp_kernels *t, int bf16);  // attention_cuda.cu
extern "C" void fsdp_cuda_fill_pointwise(struct fsdp_kernels *t, int bf16);  // pointwise_cuda.cu
extern "C" void fsdp_cuda_fill_model(struct fsdp_kernels *t, int bf16);      // model_cuda.cu

static fsdp_kernels *build(int bf16) {
    static fsdp_kernels tables[2];
    fsdp_kernels *t = &tables[bf16];
    t->name = bf16 ? "cuda-bf16" : "cuda";
    t->device = FSDP_DEV_CUDA;
    fsdp_cuda_fill_gemm(t, bf16);
    fsdp_cuda_fill_attention(t, bf16);
    fsdp_cuda_fill_pointwise(t, bf16);
    fsdp_cuda_fill_model(t, bf16);
    // every member after `device` is a kernel pointer
    const size_t first = offsetof(fsdp_kernels, gemm), n = (sizeof(fsdp_kernels) - first) / sizeof(void (*)(void));
    for (size_t i = 0; i < n; i++) {
        void (*fn)(void);
        memcpy(&fn, (const char *)t + first + i * sizeof fn, sizeof fn);
        if (!fn) {
            fprintf(stderr, "fsdp: the CUDA kernel table %s lacks entry %zu of struct fsdp_kernels\n", t->name, i);
            abort();
        }
    }
    return t;
}

extern "C" const struct fsdp_kernels *fsdp_kernels_cuda(int bf16) {
    static const fsdp_kernels *f32 = build(0), *b16 = build(1);  // C++ statics: built once, thread-safe
    return bf16 ? b16 : f32;
}
