// kernel_list.h: every kernel of the table (struct fsdp_kernels, kernels.h), once. Each entry is
// FSDP_KERNEL(name, (type, parameter), ...): the parameters after the stream every kernel takes first.
// No include guard: a file that needs the list defines FSDP_KERNEL, includes this file, and undefines
// it; kernels.h makes the table's members from it, each backend its entries (device/cpu/table.c,
// device/device_kernels.c's wrappers, device/cuda/table.cu's completeness check), and
// kernels/kernel_params.h turns a parameter list into declarations or arguments. Adding a kernel:
// one entry here, then its implementation in each backend (cpu_<name> for the CPU, with these
// parameters; a t_<name> in the CUDA table).
//
// Conventions (llm.c's): outputs first, then saved buffers, inputs, parameters, sizes.
// Row-major everywhere. N = number of rows (tokens), C = channels. Parameter gradients are
// ACCUMULATED (+=); activation gradients named `dinp` are OVERWRITTEN (=) unless the name says
// `_acc`. Dropout masks are never stored: element i of a dropout call keeps its value iff
// uniform(rng, i) >= p, so backward recomputes the same mask from the same rng.

#ifndef FSDP_KERNEL
// included on its own (not to make something from the list): the table, which is made from it
#include "kernels/kernels.h"
#else

// Every kernel takes the stream it is enqueued on first (device/device.h): on the CPU device it
// runs at once, after whatever the stream still has in flight; its pointers are device memory.

// C[M,N] = alpha * op(A) @ op(B) + beta * C; op(X) = X or X^T; leading dims in elements.
FSDP_KERNEL(gemm, (int, trans_a), (int, trans_b), (int, M), (int, N), (int, K), (float, alpha), (const float *, A),
    (int, lda), (const float *, B), (int, ldb), (float, beta), (float *, C), (int, ldc))

// As gemm, with B stored as bf16 and A rounded to bf16, fp32 accumulation: how a layer multiplies
// by parameters that mixed precision gathered in bf16. Same in every CPU table.
FSDP_KERNEL(gemm_b16, (int, trans_a), (int, trans_b), (int, M), (int, N), (int, K), (float, alpha),
    (const float *, A), (int, lda), (const fsdp_bf16 *, B), (int, ldb), (float, beta), (float *, C), (int, ldc))

// As gemm with A stored in bf16 (an activation kept in bf16: the values the bf16 products round it
// to), B fp32 (gemm_a16) or bf16 (gemm_a16_b16); alpha must be 1. bf16 operands, fp32 accumulation
// in every table.
FSDP_KERNEL(gemm_a16, (int, trans_a), (int, trans_b), (int, M), (int, N), (int, K), (float, alpha),
    (const fsdp_bf16 *, A), (int, lda), (const float *, B), (int, ldb), (float, beta), (float *, C), (int, ldc))
FSDP_KERNEL(gemm_a16_b16, (int, trans_a), (int, trans_b), (int, M), (int, N), (int, K), (float, alpha),
    (const fsdp_bf16 *, A), (int, lda), (const fsdp_bf16 *, B), (int, ldb), (float, beta), (float *, C), (int, ldc))

// A Linear's forward with its bias under bf16 weights: C (M, N) = op(A) @ op(B) + bias, every row of C
// starting as bias (N,), B bf16 ((K, N), or (N, K) with trans_b, leading dimension ldb), A fp32
// (gemm_b16_bias: rounded to bf16 as gemm_b16 rounds it) or bf16 (gemm_a16_b16_bias), (M, K) with
// leading dimension lda. The bits of fill_rows(C, bias) followed by gemm_b16 / gemm_a16_b16 with beta
// 1 (the CPU adds the bias where the product's rows are stored: no pass over C before it).
FSDP_KERNEL(gemm_b16_bias, (int, trans_b), (int, M), (int, N), (int, K), (const float *, A), (int, lda),
    (const fsdp_bf16 *, B), (int, ldb), (const float *, bias), (float *, C), (int, ldc))
FSDP_KERNEL(gemm_a16_b16_bias, (int, trans_b), (int, M), (int, N), (int, K), (const fsdp_bf16 *, A), (int, lda),
    (const fsdp_bf16 *, B), (int, ldb), (const float *, bias), (float *, C), (int, ldc))

// A weight gradient and its bias's gradient in one call, from an input kept in bf16 and the output's
// gradient dout in fp32 (dense: K rows, one per token). gemm_b16_dbias (Linear's layout):
// C (M, N) = dout^T @ B + beta * C with dout (K, M), B (K, N) bf16 with leading dimension ldb, and
// dbias (M,) += the column sums of dout. gemm_a16_dbias (Conv1D's layout): C (M, N) = A^T @ dout +
// beta * C with A (K, M) bf16 with leading dimension lda, dout (K, N), and dbias (N,) += the column
// sums of dout. The products are gemm_b16's and gemm_a16's; the sums are bias_backward's, bit for bit
// (the CPU sums while it packs dout).
FSDP_KERNEL(gemm_b16_dbias, (int, M), (int, N), (int, K), (const float *, dout), (const fsdp_bf16 *, B), (int, ldb),
    (float, beta), (float *, C), (int, ldc), (float *, dbias))
FSDP_KERNEL(gemm_a16_dbias, (int, M), (int, N), (int, K), (const fsdp_bf16 *, A), (int, lda), (const float *, dout),
    (float, beta), (float *, C), (int, ldc), (float *, dbias))

// out, inp: (N, C); mean, rstd: (N,); weight, bias: (C,). out_b16 (N, C): when not NULL the output
// goes there in bf16 (rounded to nearest even) and out is not written.
FSDP_KERNEL(layernorm_forward, (float *, out), (fsdp_bf16 *, out_b16), (float *, mean), (float *, rstd),
    (const float *, inp), (const float *, weight), (const float *, bias), (int, N), (int, C), (float, eps))
// Fused with the residual add before it: res = a + dropout(b), out = LayerNorm(res), one pass per row.
// res, out, a, b: (N, C) (res may be a or b); p, rng: the dropout on b (one call over N*C values)
// out_b16: as layernorm_forward's
FSDP_KERNEL(residual_layernorm_forward, (float *, res), (float *, out), (fsdp_bf16 *, out_b16), (float *, mean),
    (float *, rstd), (const float *, a), (const float *, b), (float, p), (fsdp_rng, rng), (const float *, weight),
    (const float *, bias), (int, N), (int, C), (float, eps))
// dinp: (N, C) overwritten with LayerNorm's input gradient plus dres (N, C), the gradient a residual
// branch adds (NULL: none); dweight, dbias: (C,) accumulated, each may be NULL (a frozen parameter)
FSDP_KERNEL(layernorm_backward, (float *, dinp), (float *, dweight), (float *, dbias), (const float *, dout),
    (const float *, dres), (const float *, inp), (const float *, weight), (const float *, mean),
    (const float *, rstd), (int, N), (int, C))

// RMSNorm over the last dimension (Llama's; Hugging Face's LlamaRMSNorm in fp32): out = inp * rstd *
// weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row. out, inp: (N, C); rstd: (N,) saved for backward;
// weight: (C,). out_b16 (N, C): when not NULL the output goes there in bf16 and out is not written.
FSDP_KERNEL(rmsnorm_forward, (float *, out), (fsdp_bf16 *, out_b16), (float *, rstd), (const float *, inp),
    (const float *, weight), (int, N), (int, C), (float, eps))
// dinp: (N, C) overwritten with RMSNorm's input gradient plus dres (N, C), the gradient a residual branch
// adds (NULL: none); dweight: (C,) accumulated, may be NULL (a frozen weight); rstd: as forward wrote it
FSDP_KERNEL(rmsnorm_backward, (float *, dinp), (float *, dweight), (const float *, dout), (const float *, dres),
    (const float *, inp), (const float *, weight), (const float *, rstd), (int, N), (int, C))
// RMSNorm fused with the residual add before it: res = a + b, out = RMSNorm(res) (rmsnorm_forward's
// contract), one pass per row; res may be a or b. The bits of add followed by rmsnorm_forward.
FSDP_KERNEL(residual_rmsnorm_forward, (float *, res), (float *, out), (fsdp_bf16 *, out_b16), (float *, rstd),
    (const float *, a), (const float *, b), (const float *, weight), (int, N), (int, C), (float, eps))

// Rotary position embedding in Hugging Face's Llama layout (rotate_half over the two halves of each head),
// in place. x: (B*T, heads*D) rows (b, t) (batch-first), each row `heads` heads of D values (D even);
// cos, sin: (T, D/2), the angles of positions 0..T-1. For each head of row (b, t) and i < D/2, with
// x1 = x[i], x2 = x[i + D/2]: x[i] = x1*cos[t][i] - x2*sin[t][i], x[i + D/2] = x2*cos[t][i] + x1*sin[t][i]
// (each product rounded, then the sum: no fused multiply-add, so every backend gives the same bits).
FSDP_KERNEL(rope_forward, (float *, x), (const float *, cos), (const float *, sin), (int, B), (int, T), (int, heads),
    (int, D))
// Its backward, in place on the gradient: dx = R^T dx (rope_forward with -sin).
FSDP_KERNEL(rope_backward, (float *, dx), (const float *, cos), (const float *, sin), (int, B), (int, T),
    (int, heads), (int, D))

// SwiGLU (Llama's MLP): out = silu(gate) * up over n values, silu(g) = g / (1 + exp(-g)); out_b16 (n,):
// when not NULL the output goes there in bf16 (rounded to nearest even) and out is not written.
FSDP_KERNEL(swiglu_forward, (float *, out), (fsdp_bf16 *, out_b16), (const float *, gate), (const float *, up),
    (size_t, n))
// dgate = dout * up * silu'(gate), dup = dout * silu(gate) over n values; dgate may be gate and dup may be up
// (each element read before it is written); dout is neither.
FSDP_KERNEL(swiglu_backward, (float *, dgate), (float *, dup), (const float *, dout), (const float *, gate),
    (const float *, up), (size_t, n))

// Fused (FlashAttention-2 style: no T x T matrix is stored). qkv: the queries of H heads and the keys and
// values of d->kv_heads heads (grouped-query: query head h reads key/value head h / (H / kv_heads), never
// repeated in memory), as rows of (H + 2 kv_heads) hd floats (q | k | v; 3C when kv_heads = H) or as three
// planes (d->planar; kernels.h's fsdp_attention_layout says where each head is); out: rows of C = H hd;
// stats: (B, H, T) saved for backward, each query row's log-sum-exp of its scaled scores.
FSDP_KERNEL(attention_forward, (float *, out), (float *, stats), (const float *, qkv),
    (const fsdp_attention_dims *, d))
// dqkv: qkv's layout, overwritten (dk and dv of a key/value head: the sums over the query heads that read
// it); dout, out (forward's output): rows of C; stats: as forward wrote it
FSDP_KERNEL(attention_backward, (float *, dqkv), (const float *, dout), (const float *, qkv), (const float *, out),
    (const float *, stats), (const fsdp_attention_dims *, d))

// elementwise over n values; gelu: tanh_approx selects PyTorch's approximate='tanh'
FSDP_KERNEL(relu_forward, (float *, out), (const float *, inp), (size_t, n))
FSDP_KERNEL(relu_backward, (float *, dinp), (const float *, dout), (const float *, out), (size_t, n))
FSDP_KERNEL(gelu_forward, (float *, out), (const float *, inp), (size_t, n), (int, tanh_approx))
FSDP_KERNEL(gelu_backward, (float *, dinp), (const float *, dout), (const float *, inp), (size_t, n),
    (int, tanh_approx))
FSDP_KERNEL(dropout_forward, (float *, out), (const float *, inp), (size_t, n), (float, p), (fsdp_rng, rng))
FSDP_KERNEL(dropout_backward, (float *, dinp), (const float *, dout), (size_t, n), (float, p), (fsdp_rng, rng))
// Fused: pre (N, F) += bias (F,) (a GEMM's product becomes the layer's output), then act (N, F) =
// dropout(activation(pre)) (the dropout of one call over N*F values; p = 0: none); act_b16 (N, F):
// when not NULL, act goes there in bf16 instead. bias NULL: pre already holds the layer's output (its
// product added the bias) and is only read.
FSDP_KERNEL(bias_act_dropout_forward, (float *, pre), (float *, act), (fsdp_bf16 *, act_b16), (const float *, bias),
    (int, N), (int, F), (fsdp_activation, a), (float, p), (fsdp_rng, rng))
// dpre (n,) = activation'(pre) * the dropout's backward of dact (n,); dpre may be dact
FSDP_KERNEL(act_dropout_backward, (float *, dpre), (const float *, dact), (const float *, pre), (size_t, n),
    (fsdp_activation, a), (float, p), (fsdp_rng, rng))
// The same for ReLU, read from that forward's fp32 output act (n,) instead of pre: act is nonzero
// exactly where the element was kept and pre > 0, so the mask is not drawn again (bit-identical to
// act_dropout_backward with FSDP_ACT_RELU); dpre may be dact
FSDP_KERNEL(relu_dropout_backward, (float *, dpre), (const float *, dact), (const float *, act), (size_t, n),
    (float, p))

FSDP_KERNEL(add, (float *, out), (const float *, a), (const float *, b), (size_t, n))     // out = a + b
FSDP_KERNEL(add_inplace, (float *, acc), (const float *, b), (size_t, n))            // acc += b
FSDP_KERNEL(add_inplace_b16, (float *, acc), (const fsdp_bf16 *, b), (size_t, n))  // acc += widen(b)
FSDP_KERNEL(scale, (float *, x), (float, s), (size_t, n))                           // x *= s
// out: (N, C) += bias (C,) broadcast over rows
FSDP_KERNEL(bias_add, (float *, out), (const float *, bias), (int, N), (int, C))
// out: (N, C) = row (C,) in every row (torch.addmm's starting value)
FSDP_KERNEL(fill_rows, (float *, out), (const float *, row), (int, N), (int, C))
// dbias: (C,) += column sums of dout (N, C)
FSDP_KERNEL(bias_backward, (float *, dbias), (const float *, dout), (int, N), (int, C))

// Conversions. dst, src: (n,). f32_to_bf16 rounds to nearest even (NaN stays NaN).
FSDP_KERNEL(f32_to_bf16, (fsdp_bf16 *, dst), (const float *, src), (size_t, n))
FSDP_KERNEL(bf16_to_f32, (float *, dst), (const fsdp_bf16 *, src), (size_t, n))
// In place, in a buffer of 4n bytes: n fp32 values become n bf16 values in its first 2n bytes.
FSDP_KERNEL(f32_to_bf16_in_place, (void *, buf), (size_t, n))

// out: (N, C) = table[idx[n]] (+= if accumulate); table: (V, C); idx: (N,) device memory
FSDP_KERNEL(embedding_forward, (float *, out), (const int32_t *, idx), (const float *, table), (int, N), (int, C),
    (int, accumulate))
// the same lookup from a bf16 table (V, C)
FSDP_KERNEL(embedding_forward_b16, (float *, out), (const int32_t *, idx), (const fsdp_bf16 *, table), (int, N),
    (int, C), (int, accumulate))
// dtable: (V, C) += scattered dout (N, C)
FSDP_KERNEL(embedding_backward, (float *, dtable), (const float *, dout), (const int32_t *, idx), (int, N), (int, C))

// Fused with the softmax: the probabilities are never stored. logits: (N, V); losses: (N,); loss: (1,)
// device, the mean loss over N rows; stats: (N, 2) saved for backward, each row's maximum logit and
// the reciprocal of its sum of exp(logit - maximum)
FSDP_KERNEL(cross_entropy_forward, (double *, loss), (float *, losses), (float *, stats), (const float *, logits),
    (const int32_t *, targets), (int, N), (int, V))
// dlogits: (N, V) overwritten with (softmax(logits) - onehot) * dloss, the softmax recomputed from
// stats; dlogits may be logits (in place)
FSDP_KERNEL(cross_entropy_backward, (float *, dlogits), (const float *, logits), (const float *, stats),
    (const int32_t *, targets), (float, dloss), (int, N), (int, V))
// The seed's model(x).abs().mean(): loss (1,) device = mean |y| over y (n,), accumulated in double;
// dy (n,) overwritten with sign(y) * dloss / n.
FSDP_KERNEL(abs_mean_forward, (double *, loss), (const float *, y), (size_t, n))
FSDP_KERNEL(abs_mean_backward, (float *, dy), (const float *, y), (size_t, n), (float, dloss))

// One torch.optim.AdamW step on n contiguous values. param, grad, m, v: (n,).
// step_size = lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t) (computed by the caller in double).
FSDP_KERNEL(adamw_update, (float *, param), (const float *, grad), (float *, m), (float *, v), (size_t, n),
    (float, lr), (float, beta1), (float, beta2), (float, eps), (float, weight_decay), (float, step_size),
    (float, bias2_sqrt))
// One torch.optim.SGD step on n contiguous values. param, grad: (n,); momentum_buf: (n,) or NULL
// (momentum 0); first: the buffer starts as the gradient (step 1).
FSDP_KERNEL(sgd_update, (float *, param), (const float *, grad), (float *, momentum_buf), (size_t, n), (float, lr),
    (float, momentum), (float, dampening), (float, weight_decay), (int, nesterov), (int, first))
// Muon's elementwise steps (optim/muon.c) on n contiguous values. axpby: y (n,) = a * y + b * x (x (n,)),
// each product rounded, then the sum (no fused multiply-add): the momentum's lerp, Nesterov's, and the
// decoupled update p * (1 - lr wd) - lr u.
FSDP_KERNEL(axpby, (float *, y), (const float *, x), (float, a), (float, b), (size_t, n))
// x (n,) /= (float)(sqrt(*sum_sq) + eps), sum_sq (1,) device (sum_squares's accumulator): x divided by its
// Frobenius norm + eps without the norm leaving the device.
FSDP_KERNEL(divide_by_norm, (float *, x), (const double *, sum_sq), (float, eps), (size_t, n))
// acc (1,) device += sum of squares of x (n,), accumulated in double (the partial sums in the
// order the host-returning form used, so norms stay bit-identical)
FSDP_KERNEL(sum_squares, (double *, acc), (const float *, x), (size_t, n))

// Fixed point (fsdp_fixed_format above). fixed_quantize: limbs gets the digits of g (n,), laid out
// in blocks of `block` elements: digit k of element i at limbs[((i / block) * limbs + k) * block +
// i % block] (so a reduce-scatter of block*limbs per rank hands each rank its elements' digits);
// NaN, Inf or |g| >= 2^(limbs*limb_bits - 1 - frac_bits) makes digit 0 NaN. limbs: (limbs * n,)
FSDP_KERNEL(fixed_quantize, (float *, limbs), (const float *, g), (size_t, n), (size_t, block),
    (const fsdp_fixed_format *, f))
// out (n,) = scale * the value of the digit sums acc (limbs, n) (digit k of element i at acc[k*n+i]),
// each element computed in double from the top digit down, rounded once to fp32. Overwrites out.
FSDP_KERNEL(fixed_finalize, (float *, out), (const float *, acc), (size_t, n), (const fsdp_fixed_format *, f),
    (double, scale))
// words (FSDP_XSUM_WORDS,) device += the exact sum of squares of x (n,), carried.
FSDP_KERNEL(sum_squares_exact, (int64_t *, words), (const float *, x), (size_t, n))

#endif  // FSDP_KERNEL
