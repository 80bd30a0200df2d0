// llama_block.c: Hugging Face's LlamaDecoderLayer (pre-RMSNorm, grouped-query attention with rotary
// embeddings, SwiGLU MLP), forward and backward, on the buffers transformer_block.c manages.
#include "nn/llama_block.h"

#include <stdio.h>
#include <string.h>

void nn_block_init_llama(nn_block *blk, nn_params *ps, const char *prefix, nn_block_config cfg, int index,
                         float init_std) {
    memset(blk, 0, sizeof *blk);
    cfg.llama = 1;
    cfg.norm_first = cfg.causal = cfg.batch_first = 1;
    cfg.dropout = 0.0f;  // LlamaDecoderLayer has no residual dropout; attention_dropout stays
    cfg.ffn_dropout = 0;
    blk->cfg = cfg;
    blk->index = index;
    char p[NN_NAME_MAX + 32];
    int C = cfg.d_model, F = cfg.d_ff;
    snprintf(p, sizeof p, "%sinput_layernorm.", prefix);
    nn_rmsnorm_init(&blk->rms1, ps, p, C, cfg.ln_eps);
    snprintf(p, sizeof p, "%sself_attn.", prefix);
    nn_mha_init_llama(&blk->attn, ps, p, C, cfg.n_heads, cfg.kv_heads, cfg.head_dim, cfg.qkv_bias, cfg.o_bias,
                      cfg.attn_dropout, init_std);
    snprintf(p, sizeof p, "%spost_attention_layernorm.", prefix);
    nn_rmsnorm_init(&blk->rms2, ps, p, C, cfg.ln_eps);
    nn_linear *mlp[3] = {&blk->fc1, &blk->fc3, &blk->fc2};
    const char *names[3] = {"gate_proj", "up_proj", "down_proj"};
    int ins[3] = {C, C, F}, outs[3] = {F, F, C};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%smlp.%s.", prefix, names[i]);
        nn_linear_init(mlp[i], ps, p, "weight", cfg.mlp_bias ? "bias" : NULL, ins[i], outs[i], 0);
        mlp[i]->weight->init = (nn_init){NN_INIT_NORMAL, init_std};
        if (mlp[i]->bias) mlp[i]->bias->init = (nn_init){NN_INIT_ZEROS, 0};
    }
}

fsdp_status nn_block_forward_llama(const nn_ctx *ctx, nn_block *blk, const fsdp_attention_dims *dims,
                                   const float *inp) {
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    int N = blk->B * blk->T;
    size_t NC = (size_t)N * blk->cfg.d_model, NF = (size_t)N * blk->cfg.d_ff;
    nn_rmsnorm_forward(ctx, &blk->rms1, blk->ln1_out, blk->ln1_b16, blk->ln1_rstd, inp, N);
    // o_proj's output goes to out (free until the block's last step), then r1 = x + it, h = norm(r1)
    FSDP_CHECK(nn_mha_forward_llama(ctx, &blk->attn, dims, blk->rope_cos, blk->rope_sin, blk->out, blk->qkv, blk->att,
                                    blk->attn_ctx, nn_block_ln1_in(blk)));
    nn_residual_rmsnorm_forward(ctx, &blk->rms2, blk->r1, blk->ln2_out, blk->ln2_b16, blk->ln2_rstd, inp, blk->out, N);
    FSDP_CHECK(nn_linear_forward_in(ctx, &blk->fc1, blk->f1, nn_block_ln2_in(blk), N));
    FSDP_CHECK(nn_linear_forward_in(ctx, &blk->fc3, blk->f3, nn_block_ln2_in(blk), N));
    k->swiglu_forward(st, blk->act, blk->act_b16, blk->f1, blk->f3, NF);
    FSDP_CHECK(nn_linear_forward_in(ctx, &blk->fc2, blk->out, nn_block_act_in(blk), N));
    k->add(st, blk->out, blk->r1, blk->out, NC);
    return FSDP_OK;
}

void nn_block_backward_llama(const nn_ctx *ctx, nn_block *blk, const fsdp_attention_dims *dims, float *dinp,
                             const float *dout, const float *inp, float *scratch) {
    int N = blk->B * blk->T;
    size_t NC = (size_t)N * blk->cfg.d_model, NF = (size_t)N * blk->cfg.d_ff;
    size_t hd = (size_t)blk->cfg.head_dim, H = (size_t)blk->cfg.n_heads, KV = (size_t)blk->cfg.kv_heads;
    float *d1 = scratch, *s2 = d1 + NC, *s4 = s2 + NC;  // (N, C) each
    float *sa = s4 + NC;                                 // (N, H hd): the attention context's gradient
    float *sqkv = sa + (size_t)N * H * hd;               // (N, (H + 2 KV) hd): the planes' gradients
    float *sf = sqkv + (size_t)N * (H + 2 * KV) * hd;    // (N, F)
    // out = r1 + down(act): d act = dout W_down; d gate, d up in place of gate and up
    nn_linear_backward_in(ctx, &blk->fc2, sf, 0, dout, nn_block_act_in(blk), N);
    ctx->k->swiglu_backward(ctx->stream, blk->f1, blk->f3, sf, blk->f1, blk->f3, NF);
    nn_linear_backward_in(ctx, &blk->fc1, s2, 0, blk->f1, nn_block_ln2_in(blk), N);
    nn_linear_backward_in(ctx, &blk->fc3, s2, 1, blk->f3, nn_block_ln2_in(blk), N);  // s2 = d h
    nn_rmsnorm_backward(ctx, &blk->rms2, d1, s2, dout, blk->r1, blk->ln2_rstd, N);   // d1 = d r1
    nn_mha_backward_llama(ctx, &blk->attn, dims, blk->rope_cos, blk->rope_sin, s4, d1, nn_block_ln1_in(blk), blk->qkv,
                          blk->att, blk->attn_ctx, sa, sqkv);                         // s4 = d ln1_out
    nn_rmsnorm_backward(ctx, &blk->rms1, dinp, s4, d1, inp, blk->ln1_rstd, N);
}
