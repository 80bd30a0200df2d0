// muon_step.c: Muon on sharded parameters (issue 47; fsdp.h's fsdp_optimizer_config, docs/muon.md).
//
// FSDP's flat shards cut matrices at arbitrary points; Muon needs each matrix whole. Every trainable
// 2-D weight of the blocks is one matrix with one owner rank in the shard group (FLOPs balanced,
// largest first). Per unit that holds matrices, a step:
//   1. all-gathers the unit's gradient shards (fp32) into `staging` (the unit's trainable segment,
//      grad_padded): every rank now has every gradient piece of the unit (the simple exchange; a
//      point-to-point one would send each owner only its matrices' pieces);
//   2. each owner runs muon_update on its matrices in place there (momentum whole on the owner,
//      Newton-Schulz once) and zeroes everything else in staging;
//   3. a sum reduce-scatter of staging hands every rank its shard of the updates (exact: one
//      rank's value plus zeros);
//   4. every rank applies the updates to its pieces of the matrices and AdamW to its other pieces.
// AdamW's moments cover only what Muon does not take: unit by unit (adamw_at), a unit without matrices
// as its whole shard, a unit with matrices as its AdamW pieces one after another.
// Bytes each rank sends per such unit and step: 2 x (N - 1) / N x 4 x grad_padded (ring all-gather and
// reduce-scatter). Under HYBRID_SHARD each shard group does the same on the same (all-reduced) gradients.
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "fsdp/block_names.h"
#include "fsdp/fsdp_internal.h"

typedef struct {
    int unit, param;            // s->units[unit].params[param]
    int rows, cols;             // as stored
    float scale;                // fsdp_muon_shape_scale of its [out, in] view
    int owner;                  // the shard-group rank that orthogonalizes it
    double flops;               // one Newton-Schulz pass (fsdp_muon_ns_flops)
    float *momentum;            // (rows * cols,) device on the owner, NULL elsewhere  FSDP_MEM_OPTIM
} muon_matrix;

struct muon_state {
    fsdp_muon_config cfg;
    float adamw_lr;             // AdamW's configured lr: the schedule's factor is lr / adamw_lr
    int n;
    muon_matrix *m;             // (n,) by unit, then in flat order
    int *unit_first;            // (n_units + 1,) unit u's matrices: m[unit_first[u] .. unit_first[u + 1])
    int64_t *adamw_at;          // (n_units,) where unit u's AdamW elements start in AdamW's (compact) state
    int64_t adamw_numel;        // AdamW's state size: the trainable shard elements that are not Muon's
    fsdp_muon_workspace ws;     // Newton-Schulz scratch for this rank's largest owned matrix
    float *staging;             // (max grad_padded of a unit with matrices,) gradients, then updates  FSDP_MEM_COMM
    float *update_shard;        // (max grad_shard of such a unit,) this rank's updates  FSDP_MEM_COMM
    int64_t staging_numel, update_numel;
    fsdp_muon_stats stats;
};

// Larger FLOPs first; ties by position (deterministic on every rank)
static const muon_matrix *sort_base;
static int by_flops_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    double fi = sort_base[i].flops, fj = sort_base[j].flops;
    if (fi != fj) return fi > fj ? -1 : 1;
    return i - j;
}

// Owners: largest first, each to the least loaded rank (ties to the lower rank)
static fsdp_status assign_owners(muon_matrix *m, int n, int ranks) {
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));  // (n,) matrix indices by FLOPs
    double *load = calloc((size_t)ranks, sizeof(double));     // (ranks,) FLOPs assigned so far
    if (!order || !load) {
        free(order), free(load);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) order[i] = i;
    sort_base = m;
    qsort(order, (size_t)n, sizeof(int), by_flops_desc);
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int r = 1; r < ranks; r++)
            if (load[r] < load[best]) best = r;
        m[order[k]].owner = best;
        load[best] += m[order[k]].flops;
    }
    free(order), free(load);
    return FSDP_OK;
}

// Whether parameter p (in unit u) is one of Muon's matrices: trainable, 2-D, in a block, no adapter
static int takes_muon(const fsdp_block_names *bn, const fsdp_unit *u, const nn_param *p) {
    if (p->frozen || p->adapter || p->ndim != 2 || p->numel == 0) return 0;
    return u->block >= 0 || fsdp_block_names_find(bn, p->name) >= 0;
}

fsdp_status muon_setup(fsdp_state *s, const fsdp_optimizer_config *cfg) {
    const char *why = s->replicated ? "--strategy no_shard / ddp (every rank would orthogonalize every matrix)"
                      : s->cfg.deterministic ? "--deterministic"
                      : s->cfg.offload_dir   ? "--offload-dir"
                      : s->cfg.cpu_offload   ? "--cpu-offload"
                                             : NULL;
    if (why) return fsdp_error(FSDP_ERR_INVALID_ARG, "--optimizer muon: not implemented yet with %s", why);
    if (cfg->muon.ns_steps < 0 || !(cfg->muon.momentum >= 0.0f && cfg->muon.momentum < 1.0f))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "--optimizer muon: expected --muon-ns-steps >= 0 and --muon-momentum "
                          "in [0, 1), got %d and %g", cfg->muon.ns_steps, (double)cfg->muon.momentum);
    struct muon_state *ms = calloc(1, sizeof *ms);
    if (!ms) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    s->muon = ms;
    ms->cfg = cfg->muon;
    ms->adamw_lr = cfg->adamw.lr;
    fsdp_block_names bn;
    fsdp_block_names_init(&bn, s->model.block_prefix, s->model.blocks->count);
    int total = 0;
    for (int i = 0; i < s->n_units; i++)
        for (int j = 0; j < s->units[i].n_params; j++) total += takes_muon(&bn, &s->units[i], s->units[i].params[j]);
    if (total == 0)  // Muon would take nothing: not a silent AdamW run
        return fsdp_error(FSDP_ERR_INVALID_ARG, "--optimizer muon: the model has no trainable 2-D weight in its "
                          "blocks (all frozen, e.g. under --freeze or LoRA); use --optimizer adamw");
    ms->m = calloc((size_t)total, sizeof(muon_matrix));
    ms->unit_first = calloc((size_t)s->n_units + 1, sizeof(int));
    ms->adamw_at = calloc((size_t)s->n_units + 1, sizeof(int64_t));
    if (!ms->m || !ms->unit_first || !ms->adamw_at) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    int steps = ms->cfg.ns_steps;
    for (int i = 0; i < s->n_units; i++) {
        fsdp_unit *u = &s->units[i];
        ms->unit_first[i] = ms->n;
        ms->adamw_at[i] = ms->adamw_numel;
        int64_t muon_here = 0;  // this rank's elements of u's matrices
        for (int j = 0; j < u->n_params; j++) {
            const nn_param *p = u->params[j];
            if (!takes_muon(&bn, u, p)) continue;
            muon_here += fsdp_piece_at(u, j).count;
            muon_matrix *mx = &ms->m[ms->n++];
            mx->unit = i, mx->param = j;
            mx->rows = (int)p->shape[0], mx->cols = (int)p->shape[1];
            int64_t out = s->model.weights_in_out ? p->shape[1] : p->shape[0];
            int64_t in = s->model.weights_in_out ? p->shape[0] : p->shape[1];
            mx->scale = fsdp_muon_shape_scale(out, in);
            mx->flops = fsdp_muon_ns_flops(p->shape[0], p->shape[1], steps);
        }
        ms->adamw_numel += u->grad_shard - muon_here;  // its padding counted too (used only without matrices)
        if (ms->n > ms->unit_first[i]) {
            if (u->grad_padded > ms->staging_numel) ms->staging_numel = u->grad_padded;
            if (u->grad_shard > ms->update_numel) ms->update_numel = u->grad_shard;
        }
    }
    ms->unit_first[s->n_units] = ms->n;
    int me = fsdp_comm_rank(s->shard_comm);
    FSDP_CHECK(assign_owners(ms->m, ms->n, fsdp_comm_size(s->shard_comm)));
    int64_t max_numel = 0, max_side = 0;
    ms->stats.matrices = ms->n;
    for (int k = 0; k < ms->n; k++) {
        muon_matrix *mx = &ms->m[k];
        if (mx->owner != me) continue;
        int64_t numel = (int64_t)mx->rows * mx->cols, side = mx->rows < mx->cols ? mx->rows : mx->cols;
        mx->momentum = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)numel, FSDP_MEM_OPTIM);
        if (!mx->momentum) return fsdp_error(FSDP_ERR_NOMEM, "--optimizer muon: out of memory for the momentum");
        FSDP_CHECK(fsdp_dev_memset(s->compute, mx->momentum, 0, sizeof(float) * (size_t)numel));
        if (numel > max_numel) max_numel = numel;
        if (side > max_side) max_side = side;
        ms->stats.owned++;
        ms->stats.momentum_numel += numel;
    }
    FSDP_CHECK(fsdp_muon_workspace_create(&ms->ws, s->dev, max_numel, max_side));
    if (ms->staging_numel) {
        ms->staging = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)ms->staging_numel, FSDP_MEM_COMM);
        ms->update_shard = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)ms->update_numel, FSDP_MEM_COMM);
        if (!ms->staging || !ms->update_shard)
            return fsdp_error(FSDP_ERR_NOMEM, "--optimizer muon: out of memory for the exchange buffers");
    }
    return FSDP_OK;
}

void muon_free(fsdp_state *s) {
    struct muon_state *ms = s->muon;
    if (!ms) return;
    for (int k = 0; ms->m && k < ms->n; k++)
        if (ms->m[k].momentum) fsdp_dev_free(s->dev, ms->m[k].momentum);
    fsdp_muon_workspace_free(&ms->ws);
    if (ms->staging) fsdp_dev_free(s->dev, ms->staging);
    if (ms->update_shard) fsdp_dev_free(s->dev, ms->update_shard);
    free(ms->m);
    free(ms->unit_first);
    free(ms->adamw_at);
    free(ms);
    s->muon = NULL;
}

fsdp_muon_stats fsdp_muon_get_stats(const fsdp_state *s) {
    fsdp_muon_stats none = {0};
    return s->muon ? s->muon->stats : none;
}

int64_t muon_adamw_numel(const fsdp_state *s) { return s->muon->adamw_numel; }

fsdp_status muon_step_unit(fsdp_state *s, fsdp_unit *u, float lr, int *done) {
    struct muon_state *ms = s->muon;
    int first = ms->unit_first[u->index], last = ms->unit_first[u->index + 1];
    *done = 1;
    if (first == last) {  // AdamW alone, on the whole shard
        fsdp_adamw_update(s->k, s->compute, &s->opt, lr, u->shard, u->shard_grad, ms->adamw_at[u->index], u->grad_shard);
        return FSDP_OK;
    }
    fsdp_stream *st = s->compute;
    const fsdp_kernels *k = s->k;
    int me = fsdp_comm_rank(s->shard_comm), N = fsdp_comm_size(s->shard_comm);
    size_t gs = (size_t)u->grad_shard;
    // 1. every rank's gradient shard of u, in flat order (in place: this rank's at its position)
    float *mine = ms->staging + (size_t)me * gs;
    FSDP_CHECK(fsdp_copy_d2d(st, mine, u->shard_grad, sizeof(float) * gs));
    FSDP_CHECK(fsdp_dev_all_gather(st, s->shard_comm, mine, ms->staging, gs, FSDP_F32));
    // 2. this rank's matrices become updates; everything else in staging becomes zero
    int64_t from = 0;  // staging[from ..) not yet kept or zeroed
    for (int j = first; j < last; j++) {
        muon_matrix *mx = &ms->m[j];
        if (mx->owner != me) continue;
        int64_t at = u->offsets[mx->param], numel = (int64_t)mx->rows * mx->cols;
        FSDP_CHECK(fsdp_muon_update(k, st, &ms->ws, &ms->cfg, mx->momentum, ms->staging + at, mx->rows, mx->cols,
                                    mx->scale));
        ms->stats.ns_calls++;
        ms->stats.ns_flops += mx->flops;
        if (at > from) FSDP_CHECK(fsdp_dev_memset(st, ms->staging + from, 0, sizeof(float) * (size_t)(at - from)));
        from = at + numel;
    }
    if (u->grad_padded > from)
        FSDP_CHECK(fsdp_dev_memset(st, ms->staging + from, 0, sizeof(float) * (size_t)(u->grad_padded - from)));
    // 3. this rank's shard of the updates: the owner's values plus zeros
    FSDP_CHECK(fsdp_dev_reduce_scatter(st, s->shard_comm, ms->staging, ms->update_shard, gs, FSDP_F32, FSDP_SUM));
    ms->stats.exchange_bytes += 2.0 * (double)(N - 1) * (double)gs * sizeof(float);
    // 4. the updates on this rank's pieces of the matrices, AdamW on its other pieces
    float muon_lr = ms->adamw_lr > 0.0f ? ms->cfg.lr * (lr / ms->adamw_lr) : ms->cfg.lr;
    int j = first;
    int64_t adamw_at = ms->adamw_at[u->index];  // the next AdamW piece's place in AdamW's state
    for (int i = 0; i < u->n_params; i++) {
        const nn_param *p = u->params[i];
        int is_matrix = j < last && ms->m[j].param == i;
        if (is_matrix) j++;
        if (p->frozen) continue;
        fsdp_piece pc = fsdp_piece_at(u, i);
        if (!pc.count) continue;
        if (is_matrix)
            fsdp_muon_apply(k, st, &ms->cfg, muon_lr, u->shard + pc.shard_pos, ms->update_shard + pc.shard_pos,
                            pc.count);
        else {
            fsdp_adamw_update(k, st, &s->opt, lr, u->shard + pc.shard_pos, u->shard_grad + pc.shard_pos, adamw_at,
                              pc.count);
            adamw_at += pc.count;
        }
    }
    return FSDP_OK;
}
