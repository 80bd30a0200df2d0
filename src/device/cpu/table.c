// table.c: the CPU kernel tables, made from kernels/kernel_list.h. Each entry is a thin wrapper that
// drops the stream (on a host-memory device a kernel runs when it is called) and calls the plain
// cpu_<name> kernel (cpu_kernels.h).
#include <pthread.h>

#include "device/cpu/cpu_fixed.h"
#include "device/cpu/cpu_kernels.h"

// t_<name> for every kernel of the list: drops the stream and calls cpu_<name> with the same arguments
#define FSDP_KERNEL(fn, ...)                                           \
    static void t_##fn(fsdp_stream *st, FSDP_KPARAMS(__VA_ARGS__)) {   \
        (void)st;                                                      \
        cpu_##fn(FSDP_KARGS(__VA_ARGS__));                             \
    }
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL

static const fsdp_kernels cpu_table = {
    .name = "cpu",
    .device = FSDP_DEV_CPU,
#define FSDP_KERNEL(fn, ...) .fn = t_##fn,
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
};

// bf16 mixed precision: every matrix product takes bf16 operands and accumulates in fp32; LayerNorm,
// softmax, the loss and every elementwise kernel stay fp32 (autocast's split). The fp32 table with its
// three products replaced.
static void t_gemm_bf16(fsdp_stream *st, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    (void)st;
    cpu_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void t_attention_forward_bf16(fsdp_stream *st, float *out, float *stats, const float *qkv,
                                     const fsdp_attention_dims *d) {
    (void)st;
    cpu_attention_forward_bf16(out, stats, qkv, d);
}

static void t_attention_backward_bf16(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv,
                                      const float *out, const float *stats, const fsdp_attention_dims *d) {
    (void)st;
    cpu_attention_backward_bf16(dqkv, dout, qkv, out, stats, d);
}

static fsdp_kernels cpu_bf16_table;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static void build_bf16_table(void) {
    cpu_bf16_table = cpu_table;
    cpu_bf16_table.name = "cpu-bf16";
    cpu_bf16_table.gemm = t_gemm_bf16;
    cpu_bf16_table.attention_forward = t_attention_forward_bf16;
    cpu_bf16_table.attention_backward = t_attention_backward_bf16;
}

const fsdp_kernels *fsdp_kernels_cpu(void) { return &cpu_table; }

const fsdp_kernels *fsdp_kernels_cpu_bf16(void) {
    pthread_once(&bf16_once, build_bf16_table);
    return &cpu_bf16_table;
}
