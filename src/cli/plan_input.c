// plan_input.c: fsdp-plan's input for the run a tool's options start (plan_input.h). fsdp-plan prints
// the prediction; fsdp-train and fsdp-minimal hold it against the memory their hosts have before they
// build anything (memory_check.c). One implementation, so the check and the planner cannot drift.
#include "cli/plan_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_arch.h"
#include "cli/train_lora.h"
#include "core/threads.h"
#include "fsdp/block_names.h"
#include "nn/encoder_stack.h"
#include "nn/causal_lm.h"

int cli_plan_fsdp(const char *prog, const cli_fsdp_options *f, int no_shm, fsdp_plan_input *in, fsdp_config *cfg) {
    if (cli_fsdp_config(prog, f, cfg)) return -1;
    in->strategy = cfg->strategy;
    in->shard_group = cfg->shard_group_size;
    in->wrap = cfg->wrap == FSDP_WRAP_TRANSFORMER ? 0 : cfg->wrap == FSDP_WRAP_SIZE ? 1 : 2;
    in->min_num_params = cfg->min_num_params;
    in->backward_prefetch = f->backward_prefetch;
    in->forward_prefetch = f->forward_prefetch;
    in->limit_all_gathers = f->limit_all_gathers;
    in->activation_checkpointing = f->activation_checkpointing;
    in->shared_memory = !no_shm;
    const char *algo = fsdp_comm_algo_setting();  // the run's FSDP_COMM_ALGO, read from this environment
    in->flat_reduce_scatter = strcmp(algo, "p2p") == 0 || strcmp(algo, "mpi") == 0;
    fsdp_dev_caps caps;
    fsdp_dev_capabilities(cfg->device, &caps);
    in->zero_copy = caps.zero_copy_shared;
    in->param_bf16 = cfg->param_dtype == FSDP_BF16;
    in->reduce_bf16 = cfg->reduce_dtype == FSDP_BF16;
    in->bf16_emulated = caps.gemm_bf16_emulated;  // this machine's bf16 GEMM
    in->gemm_pack_a_bytes = (double)caps.gemm_pack_a_bytes;
    in->gemm_pack_b_bytes = (double)caps.gemm_pack_b_bytes;
    return 0;
}

// Marks the parameters the globs of `list` match as frozen, as fsdp_wrap does (fsdp_freeze_matching);
// returns 0, or -1 (after an error naming the glob when `print`).
static int mark_frozen(const char *prog, nn_params *ps, const char *list, int print) {
    if (fsdp_freeze_matching(ps, list) == FSDP_OK) return 0;
    if (print) fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());
    return -1;
}

// The adapters fsdp-train attaches (train_lora_attach: every parameter but the adapters frozen), on the
// model built without data; lora NULL or rank 0: none. Returns 0, or -1 (after an error when `print`).
static int attach_lora(const char *prog, const train_lora_options *lora, nn_lm *m, fsdp_plan_input *in, int print) {
    if (!lora || lora->rank <= 0) return 0;
    unsigned targets = 0;
    if (train_lora_attach(prog, lora, m, &targets, print ? 0 : 1)) return -1;  // rank 1 prints nothing
    in->lora_rank = lora->rank;
    in->lora_targets = (int)targets;  // GPT2_LORA_*, LLAMA_LORA_*: bit i the block's linear layer i, as the plan numbers them
    in->lora_dropout = lora->dropout > 0.0f;
    return 0;
}

// The block's linear layer i in the plan's numbering (fsdp/plan.h: FSDP_PLAN_MAX_LINEAR), or NULL past
// the block's last
static const nn_linear *plan_linear(const nn_block *blk, int i) {
    const nn_linear *gpt2[] = {&blk->attn.in_proj, &blk->attn.out_proj, &blk->fc1, &blk->fc2};
    const nn_linear *llama[] = {&blk->attn.q_proj, &blk->attn.k_proj, &blk->attn.v_proj, &blk->attn.out_proj,
                                &blk->fc1, &blk->fc3, &blk->fc2};
    if (blk->cfg.llama) return i < 7 ? llama[i] : NULL;
    return i < 4 ? gpt2[i] : NULL;
}

// --freeze and LoRA: the trainable elements of each block (block_train (layers,)) and of the rest
// (root_train), and which weight-gradient products no layer runs (skip_dw, lora_skip), from the tool's
// model built without data (nn_lm_create_gpt2 / _llama with fsdp-train's shape t, nn_encoder_stack_create
// register names and shapes only) with fsdp-train's adapters attached (lora: NULL or rank 0 for none;
// they freeze the base) and then the globs applied (list: NULL for none), in fsdp-train's order. A
// parameter belongs to block b when its name starts with the tool's block prefix ("h.%d." for GPT-2,
// "model.layers.%d." for Llama, "%d." for the encoder stack; fsdp/block_names.h, as fsdp_wrap decides);
// the plan folds unwrapped blocks into the root. Returns 0, or -1 (after an error when `print`).
static int plan_trainable(const char *prog, const train_options *t, const char *list, const train_lora_options *lora,
                          fsdp_plan_input *in, int64_t *block_train, int print) {
    nn_lm lm;
    nn_encoder_stack enc;
    nn_params *ps = NULL;  // the model's parameter list
    nn_block *blocks = NULL;  // (layers,)
    fsdp_status st;
    int is_lm = t != NULL;
    if (in->llama) {
        nn_llama_config cfg;
        if (train_arch_llama_config(prog, t, &cfg)) return -1;
        st = nn_lm_create_llama(&lm, cfg);
    } else if (in->gpt2) {
        nn_gpt2_config cfg = {in->vocab, in->max_seq ? in->max_seq : in->seq, in->layers, in->heads, in->d_model, 0.0f,
                              1e-5f};
        st = nn_lm_create_gpt2(&lm, cfg);
    } else {
        nn_block_config layer = nn_encoder_layer_defaults(in->d_model, in->heads);
        layer.d_ff = in->ffn;
        st = nn_encoder_stack_create(&enc, layer, in->layers);
        ps = &enc.params, blocks = enc.seq.blocks;
    }
    if (is_lm && st == FSDP_OK) ps = nn_lm_params(&lm), blocks = nn_lm_blocks(&lm)->blocks;
    int rc = 0;
    if (st != FSDP_OK) {
        if (print) fprintf(stderr, "%s: the model's parameter list: %s\n", prog, fsdp_last_error());
        rc = -1;
    }
    if (rc == 0 && is_lm) rc = attach_lora(prog, lora, &lm, in, print);
    if (rc == 0 && list) rc = mark_frozen(prog, ps, list, print);
    if (rc == 0) {
        fsdp_block_names names;  // fsdp-train's and fsdp-minimal's block_prefix
        fsdp_block_names_init(&names, is_lm ? nn_lm_block_prefix(&lm) : "%d.", in->layers);
        for (int b = 0; b < in->layers; b++) block_train[b] = 0;
        in->root_train = 0;
        for (int i = 0; i < ps->count; i++) {
            const nn_param *p = &ps->items[i];
            if (p->frozen) continue;
            int owner = fsdp_block_names_find(&names, p->name);
            if (owner >= 0) block_train[owner] += p->numel;
            else in->root_train += p->numel;
        }
        in->skip_dw = 0;
        int n_linear = in->llama ? 7 : 4;
        for (int k = 0; k < n_linear; k++) {  // a linear layer's weight frozen in every block: its product never runs
            int all = in->layers > 0;
            for (int b = 0; b < in->layers; b++) all &= plan_linear(&blocks[b], k)->weight->frozen;
            if (all) in->skip_dw |= 1 << k;
        }
        const nn_param *head = is_lm ? nn_lm_head(&lm) : NULL;  // the LM head's weight (none in the encoder stack)
        if (head && head->frozen) in->skip_dw |= FSDP_PLAN_SKIP_HEAD;
        in->lora_skip = 0;
        for (int k = 0; k < n_linear && in->lora_rank > 0; k++) {  // an adapter's A (B) frozen in every block: no dA (dB)
            int all_a = in->layers > 0, all_b = in->layers > 0, any = 0;
            for (int b = 0; b < in->layers; b++) {
                const nn_lora *a = plan_linear(&blocks[b], k)->lora;  // layer k's adapter in block b, or NULL
                if (!a) continue;
                any = 1;
                all_a &= a->A->frozen;
                all_b &= a->B->frozen;
            }
            if (any && all_a) in->lora_skip |= 1 << k;
            if (any && all_b) in->lora_skip |= 1 << (FSDP_PLAN_SKIP_DB + k);
        }
        in->block_train = block_train;
    }
    if (st == FSDP_OK) {
        if (is_lm) nn_lm_free(&lm);
        else nn_encoder_stack_free(&enc);
    }
    return rc;
}

int cli_plan_finish(const char *prog, const train_options *t, const minimal_options *m, const cli_plan_ranks *r,
                    int print, fsdp_plan_input *in, int64_t **block_train) {
    *block_train = NULL;
    const cli_fsdp_options *f = t ? &t->fsdp : &m->fsdp;
    if (t) {
        in->gpt2 = t->arch == 0;
        in->llama = t->arch == 1;  // its shape resolved (train_arch_resolve: kv_heads, head_dim, d_ff set)
        in->layers = t->layers, in->d_model = t->d_model, in->heads = t->heads, in->vocab = t->vocab;
        in->kv_heads = t->kv_heads, in->head_dim = t->head_dim, in->ffn = in->llama ? t->d_ff : 0;
        in->tie_embeddings = t->tie_embeddings;
        in->qkv_bias = t->attention_bias || t->qkv_bias, in->o_bias = t->attention_bias, in->mlp_bias = t->mlp_bias;
        in->seq = t->seq, in->max_seq = t->max_seq, in->batch = t->training.batch;
        in->grad_accum = t->training.grad_accum;
        in->threads = t->training.threads;
    } else {
        in->gpt2 = 0;
        in->layers = m->layers, in->d_model = m->d_model, in->heads = m->heads, in->ffn = m->ffn;
        in->seq = m->seq, in->batch = m->training.batch, in->grad_accum = m->training.grad_accum;
        in->threads = m->training.threads;
    }
    if (r->threads > 0) in->threads = r->threads;
    if (f->deterministic) in->det_limbs = fsdp_det_format(f->det_chunks).limbs;  // det_chunks resolved by the caller
    int world = r->world;
    in->world = world;
    int per_host = r->no_shm ? 1 : r->ranks_per_host > 0 && r->ranks_per_host < world ? r->ranks_per_host : world;
    if (world % per_host) {
        if (print) fprintf(stderr, "%s: --ranks-per-host %d must divide --world-size %d\n", prog, per_host, world);
        return -1;
    }
    in->ranks_per_host = per_host;
    in->intra_host_gbps = r->intra_host_gbps, in->inter_host_gbps = r->inter_host_gbps;
    if (in->threads == 0) {  // the tools' default: this machine's cores shared by the node's ranks (unbound)
        int on_node = per_host;
        in->threads = fsdp_threads_choose(0, fsdp_affinity_cores(), on_node, on_node).threads;
    }
    if (!in->llama && in->d_model % in->heads) {  // Llama's heads have their own width (--head-dim)
        if (print) fprintf(stderr, "%s: --heads %d must divide --d-model %d\n", prog, in->heads, in->d_model);
        return -1;
    }
    if (in->strategy == FSDP_HYBRID_SHARD && in->shard_group > 0 && in->world % in->shard_group) {
        if (print)
            fprintf(stderr, "%s: --shard-group-size %d must divide --world-size %d\n", prog, in->shard_group, in->world);
        return -1;
    }
    if (t) {
        const cli_model_config *c = &t->config;
        if (train_lora_check(prog, &t->lora, cli_given(c->args, c->nargs, c->argc, c->argv, "--lora-alpha"),
                             cli_given(c->args, c->nargs, c->argc, c->argv, "--lora-dropout"),
                             cli_given(c->args, c->nargs, c->argc, c->argv, "--lora-targets"), t->training.save_path,
                             print ? 0 : 1))
            return -1;
    }
    const train_lora_options *lora = t && t->lora.rank > 0 ? &t->lora : NULL;  // fsdp-train's adapters, or none
    if (!f->freeze && !lora) return 0;
    int64_t *bt = malloc(sizeof(int64_t) * (size_t)(in->layers > 0 ? in->layers : 1));  // (layers,)
    if (!bt) {
        if (print) fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    if (plan_trainable(prog, t, f->freeze, lora, in, bt, print)) {
        free(bt);
        in->block_train = NULL;
        return -1;
    }
    *block_train = bt;
    return 0;
}
