// gemm_param.c: a GEMM with a parameter as its B operand, in whichever dtype the parameter is bound
// (gemm_param.h). Apart from linear.c so that linear.c and lora.c (the adapter linear.c calls) both
// call it downward: no call cycle between them (scripts/check-layers.sh).
#include "nn/gemm_param.h"

void nn_gemm_param(const nn_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                   const nn_param *P, int ldb, float beta, float *C, int ldc) {
    const fsdp_kernels *k = ctx->k;
    if (P->data_b16) k->gemm_b16(ctx->stream, trans_a, trans_b, M, N, K, 1.0f, A, lda, P->data_b16, ldb, beta, C, ldc);
    else k->gemm(ctx->stream, trans_a, trans_b, M, N, K, 1.0f, A, lda, P->data, ldb, beta, C, ldc);
}
