// table.cu: the CUDA device's kernel tables (fp32 and bf16 mixed precision), filled by the kernel files
// of this directory; every kernel of kernels/kernel_list.h must be set (checked once, at the first call).
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
    // every kernel of kernels/kernel_list.h has its entry
    int missing = 0;
#define FSDP_KERNEL(fn, ...)                                                                         \
    if (!t->fn) {                                                                                    \
        fprintf(stderr, "fsdp: the CUDA kernel table %s lacks the kernel %s (kernels/kernel_list.h)\n", \
                t->name, #fn);                                                                       \
        missing = 1;                                                                                 \
    }
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
    if (missing) abort();
    return t;
}

extern "C" const struct fsdp_kernels *fsdp_kernels_cuda(int bf16) {
    static const fsdp_kernels *f32 = build(0), *b16 = build(1);  // C++ statics: built once, thread-safe
    return bf16 ? b16 : f32;
}
