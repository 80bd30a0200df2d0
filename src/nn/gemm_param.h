// gemm_param.h: a GEMM whose B operand is a parameter bound in fp32 or bf16 (Linear, the LoRA adapter,
// GPT-2's tied lm_head).
#pragma once
#include "nn/nn_ctx.h"
#include "nn/param.h"

// C (M, N) = op(A) @ op(P) + beta * C with the parameter P as the B operand, through the table's
// gemm (P bound in fp32) or gemm_b16 (P bound in bf16 by mixed precision). A: (M, K) after op, row
// stride lda; P: (K, N) after op, row stride ldb; C: (M, N), row stride ldc; row-major, device memory.
void nn_gemm_param(const nn_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                   const nn_param *P, int ldb, float beta, float *C, int ldc);
