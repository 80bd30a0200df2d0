// plan.c: the memory and communication model of the engine (see plan.h). Every term mirrors an
// allocation the engine, the nn modules or the tools make; tests hold it to the measured numbers.
#include "fsdp/plan.h"

#include <string.h>

#include "fsdp/fsdp.h"

#define ALIGN 16  // FSDP_PAD_ALIGN

static int64_t round_up(int64_t x, int64_t q) { return (x + q - 1) / q * q; }

fsdp_plan fsdp_plan_compute(const fsdp_plan_input *in) {
    fsdp_plan p;
    memset(&p, 0, sizeof p);
    int64_t C = in->d_model, F = in->gpt2 ? 4 * C : in->ffn, L = in->layers, H = in->heads;
    int64_t V = in->vocab, T = in->seq, maxT = in->max_seq ? in->max_seq : in->seq;
    int64_t block = 3 * C * C + 3 * C + C * C + C + C * F + F + F * C + C + 4 * C;
    int64_t root = in->gpt2 ? V * C + maxT * C + 2 * C : 0;
    p.numel = L * block + root;
    int replicated = in->strategy == FSDP_NO_SHARD || in->strategy == FSDP_DDP;
    int G = replicated ? 1 : (in->strategy == FSDP_HYBRID_SHARD && in->shard_group > 0 ? in->shard_group : in->world);
    int wrapped = in->wrap == 0 || (in->wrap == 1 && block >= in->min_num_params);
    int64_t n_block_units = wrapped ? L : 0;
    int64_t root_numel = root + (wrapped ? 0 : L * block);
    int64_t q = (int64_t)G * ALIGN;
    int64_t block_padded = round_up(block, q), root_padded = root_numel ? round_up(root_numel, q) : 0;
    int64_t local = n_block_units * (block_padded / G) + root_padded / G;
    p.units = (int)n_block_units + (root_numel > 0);
    p.params = 4.0 * local;
    p.grads = 4.0 * local;
    p.optimizer = 8.0 * local;
    int64_t max_shard = n_block_units ? block_padded / G : 0;
    if (root_padded / G > max_shard) max_shard = root_padded / G;
    p.communication = 4.0 * (max_shard ? max_shard : 1);
    int shared_shards = !replicated && in->shared_memory && G > 1;  // a one-rank shard group has no shared memory
    if (in->param_bf16 && shared_shards) p.communication += 2.0 * local;  // each unit's bf16 send copy

    // gathered parameters and unsharded gradients at their peak (backward)
    double unit_bytes = 4.0 * (double)(n_block_units ? block_padded : 0);
    double root_bytes = 4.0 * (double)root_padded;
    int staging = !replicated && in->shared_memory && G > 1 && n_block_units > 0;
    double grads_unsharded = staging ? 2 * unit_bytes : unit_bytes;  // two shared buffers, or one private
    if (replicated) {  // parameters are the shards; one unit's gradients at a time, the root's throughout
        p.unsharded = unit_bytes + root_bytes;
        // param_dtype bf16: a bf16 copy of every unit, kept from forward to backward
        if (in->param_bf16) p.unsharded += 0.5 * (n_block_units * unit_bytes + root_bytes);
    } else {
        int prefetch = (in->backward_prefetch != 2 || in->forward_prefetch) && in->limit_all_gathers != 1;
        double params_gathered = in->strategy == FSDP_SHARD_GRAD_OP ? n_block_units * unit_bytes
                                                                    : (prefetch ? 2 : 1) * unit_bytes;
        double param_scale = in->param_bf16 ? 0.5 : 1.0;  // gathered parameters in param_dtype
        p.unsharded = param_scale * (root_bytes + params_gathered) + root_bytes + grads_unsharded;
    }

    // activations (fp32): each block's buffers (nn/transformer_block.c), the Sequential's backward
    // buffers (nn/sequential.c) and the model's own (nn/gpt2.c), or the tool's input (fsdp-minimal)
    int64_t B = in->batch, N = B * T;
    double per_block = 4.0 * (double)(N * (11 * C + 2 * F + 4) + B * H * T * T);
    double blocks = in->activation_checkpointing ? per_block + 4.0 * (double)(N * C) * (double)(L - 1)
                                                 : per_block * (double)L;
    double sequential = 4.0 * (double)(2 * N * C + N * (7 * C + F));
    double model = in->gpt2 ? 4.0 * (double)(N * (4 * C + 2 * V + 3) + 2 * N)
                            : 4.0 * (double)(N * C * (in->grad_accum + 1));
    p.activations = blocks + sequential + model;
    p.total = p.params + p.grads + p.optimizer + p.unsharded + p.activations + p.communication;

    // bytes each rank sends per optimizer step (as fsdp_comm_stats counts them)
    double frac = G > 1 ? (double)(G - 1) / G : 0.0;
    int gathers = in->strategy == FSDP_SHARD_GRAD_OP ? 1 : 2;
    double pe = in->param_bf16 ? 2.0 : 4.0, ge = in->reduce_bf16 ? 2.0 : 4.0;  // bytes per element on the wire
    double block_n = (double)block_padded, root_n = (double)root_padded;
    double per_micro;
    if (replicated) {
        // bf16 all-reduce without shared memory is an all-gather of every rank's buffer (MPI has no bf16 sum)
        double ar = in->world <= 1 ? 0.0 : in->reduce_bf16 && !in->shared_memory ? (double)(in->world - 1)
                                                                               : 2.0 * (in->world - 1) / in->world;
        per_micro = ar * ge * ((double)n_block_units * block_n + root_n);
        p.bytes_sent = per_micro * in->grad_accum;
    } else {
        double ag = frac * pe * ((double)n_block_units * block_n * gathers + root_n);
        double rs = frac * ge * ((double)n_block_units * block_n + root_n);
        int R = in->world / G;
        double rf = in->reduce_bf16 && !in->shared_memory ? (double)(R - 1) : 2.0 * (R - 1) / R;
        double replica = R > 1 ? rf * ge * ((double)n_block_units * block_n + root_n) / G : 0.0;
        p.bytes_sent = (ag + rs + replica) * in->grad_accum;
    }
    return p;
}
