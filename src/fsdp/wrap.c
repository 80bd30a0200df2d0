// wrap.c: auto-wrap policies, units, flat-parameter layout and shard allocation.
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "fsdp/block_names.h"
#include "fsdp/fsdp_internal.h"

static int wrap_block(const fsdp_config *cfg, const fsdp_model_desc *m, int b, int64_t numel) {
    switch (cfg->wrap) {
    case FSDP_WRAP_TRANSFORMER: return 1;
    case FSDP_WRAP_SIZE: return numel >= cfg->min_num_params;
    case FSDP_WRAP_NONE: return 0;
    case FSDP_WRAP_CALLBACK: return cfg->wrap_fn ? cfg->wrap_fn(cfg->wrap_user, m->block_type, b, numel) : 0;
    }
    return 0;
}

// Ranks of c whose node holds no other rank of c (sizes of c's per-node pieces, summed over c): with
// count 1 for the node's first rank, the number of nodes c spans; *whole: whether every rank of c
// shares a node with all of c. Uncounted collectives (no statistics, no sequence number).
static fsdp_status group_nodes(fsdp_comm *c, int *nodes, int *whole) {
    fsdp_comm *node = NULL;
    FSDP_CHECK(fsdp_comm_split_node(c, &node));
    double v[2] = {fsdp_comm_rank(node) == 0, fsdp_comm_size(node) != fsdp_comm_size(c)};
    fsdp_comm_free(node);
    FSDP_CHECK(fsdp_all_reduce_double(c, &v[0]));
    FSDP_CHECK(fsdp_all_reduce_double(c, &v[1]));
    *nodes = (int)(v[0] + 0.5);
    *whole = v[1] < 0.5;
    return FSDP_OK;
}

// " (all-gathers and reduce-scatters hierarchical ...)" when a shard group's collectives run that way
// (comm_hier.c), else ""
static const char *hier_note(const fsdp_state *s, const fsdp_comm *shard) {
    if (s->replicated || strcmp(fsdp_comm_path(shard, 0, 1, s->cfg.reduce_dtype), "hier") != 0) return "";
    return " (all-gathers and reduce-scatters hierarchical: one exchange across nodes per rank's block, and shared "
           "memory within each node)";
}

// One line for the summary: how the groups lie over the nodes (hosts), e.g. "groups: world 4 ranks on
// 2 nodes; shard group of 2 ranks per node (node h0), replica group of 2 across nodes". Collective.
static fsdp_status describe_groups(fsdp_state *s) {
    int N = fsdp_comm_size(s->world);
    if (N == 1) return FSDP_OK;
    int nodes = 0, whole = 0, n = 0;
    FSDP_CHECK(group_nodes(s->world, &nodes, &whole));
    char *b = s->groups_line;
    size_t cap = sizeof s->groups_line;
    n = snprintf(b, cap, "groups: world %d ranks on %d node%s (rank 0 on %s); ", N, nodes, nodes == 1 ? "" : "s",
                 fsdp_comm_host(s->world));
    if (!s->replica_comm) {
        snprintf(b + n, cap - (size_t)n, "%s%s", s->replicated ? "every rank holds everything (one group: the world)"
                                                                : "one shard group: the world", hier_note(s, s->world));
        return FSDP_OK;
    }
    int snodes = 0, swhole = 0, rnodes = 0, rwhole = 0;
    FSDP_CHECK(group_nodes(s->shard_comm, &snodes, &swhole));
    FSDP_CHECK(group_nodes(s->replica_comm, &rnodes, &rwhole));
    // across nodes: every replica group's ranks on as many nodes as it has ranks (none shares a node);
    // reduced over the world, since rank 0 prints: 0 when any group differs
    double across = rnodes == fsdp_comm_size(s->replica_comm), inside = swhole;
    FSDP_CHECK(fsdp_all_reduce_double(s->world, &across));
    FSDP_CHECK(fsdp_all_reduce_double(s->world, &inside));
    int K = fsdp_comm_size(s->shard_comm), M = fsdp_comm_size(s->replica_comm);
    if (inside > N - 0.5)
        n += snprintf(b + n, cap - (size_t)n, "shard group of %d ranks within one node (node %s)", K,
                      fsdp_comm_host(s->shard_comm));
    else
        n += snprintf(b + n, cap - (size_t)n, "shard group of %d ranks spanning nodes%s", K, hier_note(s, s->shard_comm));
    if (across > N - 0.5)
        snprintf(b + n, cap - (size_t)n, ", replica group of %d across nodes", M);
    else
        snprintf(b + n, cap - (size_t)n, ", replica group of %d sharing nodes", M);
    return FSDP_OK;
}

static fsdp_status make_groups(fsdp_state *s) {
    int N = fsdp_comm_size(s->world), R = fsdp_comm_rank(s->world);
    if (s->cfg.strategy != FSDP_HYBRID_SHARD) {
        s->shard_comm = s->world;
        return describe_groups(s);
    }
    int K = s->cfg.shard_group_size;
    if (K <= 0) {
        fsdp_comm *node = NULL;
        FSDP_CHECK(fsdp_comm_split_node(s->world, &node));
        K = fsdp_comm_size(node);
        fsdp_comm_free(node);
    }
    if (K > N || N % K)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "--shard-group-size %d must divide the world size %d", K, N);
    FSDP_CHECK(fsdp_comm_split(s->world, R / K, R, &s->shard_comm));
    s->owns_shard_comm = 1;
    FSDP_CHECK(fsdp_comm_split(s->world, R % K, R, &s->replica_comm));
    return describe_groups(s);
}

fsdp_status fsdp_freeze_matching(nn_params *ps, const char *list) {
    if (!list) return FSDP_OK;
    for (const char *at = list; *at;) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        char glob[NN_NAME_MAX + 64];
        if (len == 0 || len >= sizeof glob || (end && !end[1]))  // an empty glob, a trailing comma
            return fsdp_error(FSDP_ERR_INVALID_ARG, "--freeze '%s': expected comma-separated globs on parameter names "
                              "(e.g. 'h.0.*,wte.weight')", list);
        memcpy(glob, at, len);
        glob[len] = 0;
        int hits = 0;
        for (int i = 0; i < ps->count; i++)
            if (fnmatch(glob, ps->items[i].name, 0) == 0) ps->items[i].frozen = 1, hits++;
        if (!hits)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "--freeze '%s' matches no parameter (names are like '%s')", glob,
                              ps->count ? ps->items[ps->count > 1 ? ps->count - 1 : 0].name : "");
        at += len + (end != NULL);
    }
    return FSDP_OK;
}

// Lays out one unit over the given parameters (trainable ones first, then the frozen ones: two
// segments, each padded and sharded on its own) and allocates this rank's shard.
static fsdp_status build_unit(fsdp_state *s, fsdp_unit *u, nn_param **params, int n) {
    u->n_params = n;
    u->params = malloc(sizeof(nn_param *) * (size_t)(n ? n : 1));
    u->offsets = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!u->params || !u->offsets) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    int G = s->replicated ? 1 : fsdp_comm_size(s->shard_comm);
    int64_t quantum = (int64_t)G * FSDP_PAD_ALIGN;
    int k = 0;
    u->numel = u->train_numel = 0;
    for (int pass = 0; pass < 2; pass++) {  // 0: trainable, 1: frozen
        int64_t seg = pass ? u->grad_padded : 0, at = 0;
        for (int i = 0; i < n; i++) {
            if (params[i]->frozen != pass) continue;
            u->params[k] = params[i];
            u->offsets[k++] = seg + at;
            at += params[i]->numel;
        }
        int64_t padded = (at + quantum - 1) / quantum * quantum;
        u->numel += at;
        if (pass == 0) u->train_numel = at, u->grad_padded = padded;
        else u->padded = u->grad_padded + padded;
    }
    u->shard_numel = u->padded / G;
    u->grad_shard = u->grad_padded / G;
    u->shard_rank = s->replicated ? 0 : fsdp_comm_rank(s->shard_comm);
    u->shard_begin = (int64_t)u->shard_rank * u->grad_shard;
    u->frozen_begin = (int64_t)u->shard_rank * (u->shard_numel - u->grad_shard);
    size_t shard_bytes = sizeof(float) * (size_t)u->shard_numel, grad_bytes = sizeof(float) * (size_t)u->grad_shard;
    FSDP_CHECK(fsdp_event_create(s->dev, &u->gathered));
    for (int i = 0; i < n; i++) {  // bound only while unsharded
        params[i]->data = params[i]->grad = NULL;
        params[i]->data_b16 = NULL;
    }
    if (s->cfg.offload_dir) {  // file-backed: the kernel may page it out
        int R = fsdp_comm_rank(s->world);
        u->storage = SHARD_OFFLOADED;  // unit_free unmaps (and untracks) these, also when a map failed
        u->shard = fsdp_offload_map(s->dev, s->cfg.offload_dir, R, "params", u->index, shard_bytes);
        u->shard_grad = u->shard && grad_bytes ? fsdp_offload_map(s->dev, s->cfg.offload_dir, R, "grads", u->index, grad_bytes) : NULL;
        fsdp_mem_track(FSDP_MEM_PARAMS, shard_bytes, +1);
        fsdp_mem_track(FSDP_MEM_GRADS, grad_bytes, +1);
        return u->shard && (u->shard_grad || !grad_bytes) ? FSDP_OK : FSDP_ERR_IO;
    }
    // zero-copy all-gathers from shared memory: only where the device can (its zero_copy_shared)
    u->shard = !s->replicated ? fsdp_dev_alloc_shared(s->dev, s->shard_comm, shard_bytes) : NULL;
    if (u->shard) {  // peers read it in place when gathering
        u->storage = SHARD_SHARED;
        fsdp_mem_track(FSDP_MEM_PARAMS, shard_bytes, +1);
    } else {
        u->shard = fsdp_dev_alloc(s->dev, shard_bytes, FSDP_MEM_PARAMS);
    }
    u->shard_grad = grad_bytes ? fsdp_dev_alloc(s->dev, grad_bytes, FSDP_MEM_GRADS) : NULL;
    if (!u->shard || (grad_bytes && !u->shard_grad)) return FSDP_ERR_NOMEM;
    u->lp_pass = -1;  // not rounded yet
    if (u->storage == SHARD_SHARED && s->cfg.param_dtype == FSDP_BF16) {  // the bf16 send buffer, shared too
        size_t lp_bytes = sizeof(uint16_t) * (size_t)u->shard_numel;
        u->shard_lp = fsdp_dev_alloc_shared(s->dev, s->shard_comm, lp_bytes);
        if (!u->shard_lp) return fsdp_error(FSDP_ERR_NOMEM, "out of shared memory for unit %s", u->name);
        fsdp_mem_track(FSDP_MEM_COMM, lp_bytes, +1);
    }
    return FSDP_OK;
}

// The one free path of a unit, whatever state and storage it is in.
static void unit_free(fsdp_state *s, fsdp_unit *u) {
    fsdp_reshard(s, u);
    if (u->full_grad && !u->grad_staged) fsdp_dev_free(s->dev, u->full_grad);
    u->full_grad = NULL;
    size_t shard_bytes = sizeof(float) * (size_t)u->shard_numel, grad_bytes = sizeof(float) * (size_t)u->grad_shard;
    switch (u->storage) {
    case SHARD_OFFLOADED:
        fsdp_mem_track(FSDP_MEM_PARAMS, shard_bytes, -1);
        fsdp_mem_track(FSDP_MEM_GRADS, grad_bytes, -1);
        fsdp_offload_unmap(s->dev, u->shard, shard_bytes);
        fsdp_offload_unmap(s->dev, u->shard_grad, grad_bytes);
        break;
    case SHARD_SHARED:
        if (u->shard_lp) {
            fsdp_mem_track(FSDP_MEM_COMM, sizeof(uint16_t) * (size_t)u->shard_numel, -1);
            fsdp_dev_free_shared(s->dev, s->shard_comm, u->shard_lp);
        }
        fsdp_mem_track(FSDP_MEM_PARAMS, shard_bytes, -1);
        fsdp_dev_free_shared(s->dev, s->shard_comm, u->shard);
        fsdp_dev_free(s->dev, u->shard_grad);
        break;
    case SHARD_DEVICE:
        fsdp_dev_free(s->dev, u->shard);
        fsdp_dev_free(s->dev, u->shard_grad);
        break;
    }
    u->shard = u->shard_grad = NULL;
    u->shard_lp = NULL;
    fsdp_event_destroy(u->gathered);
    u->gathered = NULL;
    free(u->params);
    free(u->offsets);
    u->params = NULL;
    u->offsets = NULL;
}


// Builds s (zeroed) into a wrapped model; on failure s holds what was built so far, for fsdp_free_state.
static fsdp_status build_state(fsdp_state *s, fsdp_model_desc model, fsdp_config cfg, fsdp_comm *world) {
    s->cfg = cfg;
    s->model = model;
    s->world = world;
    s->dev = cfg.device ? cfg.device : fsdp_dev_default();
    s->cfg.device = s->dev;
    s->k = fsdp_dev_kernels(s->dev, 0);
    s->compute = fsdp_dev_stream(s->dev, FSDP_STREAM_COMPUTE);
    s->comm_stream = fsdp_dev_stream(s->dev, FSDP_STREAM_COMM);
    FSDP_CHECK(fsdp_event_create(s->dev, &s->compute_done));
    FSDP_CHECK(fsdp_event_create(s->dev, &s->comm_done));
    s->norm_acc = fsdp_dev_alloc(s->dev, sizeof(double), FSDP_MEM_OTHER);
    if (!s->norm_acc) return FSDP_ERR_NOMEM;
    s->replicated = cfg.strategy == FSDP_NO_SHARD || cfg.strategy == FSDP_DDP;
    FSDP_CHECK(fsdp_freeze_matching(model.params, cfg.freeze));
    FSDP_CHECK(make_groups(s));
    int nb = model.blocks->count, np = model.params->count;
    s->block_unit = malloc(sizeof(int) * (size_t)(nb ? nb : 1));
    s->units = calloc((size_t)nb + 1, sizeof(fsdp_unit));
    nn_param **scratch = malloc(sizeof(nn_param *) * (size_t)(np ? np : 1));
    int *owner = malloc(sizeof(int) * (size_t)(np ? np : 1));  // (np,) each parameter's block, or -1
    int *first = malloc(sizeof(int) * ((size_t)nb + 2));       // (nb + 2,) block b: order[first[b] .. first[b + 1])
    int *order = malloc(sizeof(int) * (size_t)(np ? np : 1));  // (np,) block parameters, by block, in model order
    if (!s->block_unit || !s->units || !scratch || !owner || !first || !order) {
        free(scratch);
        free(owner);
        free(first);
        free(order);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    fsdp_block_names names;
    fsdp_block_names_init(&names, model.block_prefix, nb);
    memset(first, 0, sizeof(int) * ((size_t)nb + 2));
    for (int i = 0; i < np; i++) {  // a counting sort by block, stable: O(parameters + blocks)
        owner[i] = fsdp_block_names_find(&names, model.params->items[i].name);
        if (owner[i] >= 0) first[owner[i] + 2]++;
    }
    for (int b = 0; b < nb; b++) first[b + 2] += first[b + 1];  // first[b + 1]: block b's start
    for (int i = 0; i < np; i++)  // after this, first[b + 1] is block b's end, first[b] its start
        if (owner[i] >= 0) order[first[owner[i] + 1]++] = i;
    fsdp_status st = FSDP_OK;
    for (int b = 0; b < nb && st == FSDP_OK; b++) {
        int n = 0;
        int64_t numel = 0;
        for (int j = first[b]; j < first[b + 1]; j++) {
            scratch[n++] = &model.params->items[order[j]];
            numel += model.params->items[order[j]].numel;
        }
        s->block_unit[b] = -1;
        if (n == 0 || !wrap_block(&cfg, &model, b, numel)) continue;
        fsdp_unit *u = &s->units[s->n_units];
        u->index = s->n_units;
        u->block = b;
        snprintf(u->name, sizeof u->name, model.block_prefix, b);
        size_t len = strlen(u->name);
        if (len && u->name[len - 1] == '.') u->name[len - 1] = 0;
        st = build_unit(s, u, scratch, n);
        s->block_unit[b] = s->n_units++;
    }
    int n_root = 0;
    for (int i = 0; i < np && st == FSDP_OK; i++)
        if (owner[i] < 0 || s->block_unit[owner[i]] < 0) scratch[n_root++] = &model.params->items[i];
    if (n_root > 0 && st == FSDP_OK) {
        fsdp_unit *u = &s->units[s->n_units];
        u->index = s->n_units;
        u->block = -1;
        snprintf(u->name, sizeof u->name, "(root)");
        st = build_unit(s, u, scratch, n_root);
        s->root = u;
        s->n_units++;
    }
    free(scratch);
    free(owner);
    free(first);
    free(order);
    if (st != FSDP_OK) return st;
    int64_t max_shard = 0, off = 0;
    for (int i = 0; i < s->n_units; i++) {  // the optimizer holds the trainable segments' shards only
        s->units[i].opt_offset = off;
        off += s->units[i].grad_shard;
        if (s->units[i].grad_shard > max_shard) max_shard = s->units[i].grad_shard;
    }
    s->reduce_buf = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)(max_shard ? max_shard : 1), FSDP_MEM_COMM);
    if (!s->reduce_buf) return FSDP_ERR_NOMEM;
    int64_t max_block = 0, max_block_grad = 0;
    for (int i = 0; i < s->n_units; i++)
        if (s->units[i].block >= 0) {
            if (s->units[i].padded > max_block) max_block = s->units[i].padded;
            if (s->units[i].grad_padded > max_block_grad) max_block_grad = s->units[i].grad_padded;
        }
    // unshard buffers, preallocated: the peak is the same every step. Replicated strategies need them
    // only under param_dtype bf16 (a bf16-rounded copy of every unit from forward to backward).
    if (!s->replicated || cfg.param_dtype == FSDP_BF16) {
        int prefetch = cfg.backward_prefetch != FSDP_PREFETCH_NONE || cfg.forward_prefetch;
        int n_block_units = s->n_units - (s->root ? 1 : 0);
        int keeps_all = cfg.strategy == FSDP_SHARD_GRAD_OP || s->replicated;
        int want = keeps_all ? n_block_units : (prefetch && cfg.limit_all_gathers != 1 ? 2 : 1);
        if (want > 64) want = 64;
        s->pool_floats = max_block;
        for (int i = 0; max_block > 0 && i < want; i++) {
            s->pool[i] = fsdp_dev_alloc(s->dev, fsdp_dtype_size(cfg.param_dtype) * (size_t)max_block, FSDP_MEM_UNSHARDED);
            if (!s->pool[i]) return FSDP_ERR_NOMEM;
            s->pool_n++;
        }
        if (s->root) {
            s->root_pool = fsdp_dev_alloc(s->dev, fsdp_dtype_size(cfg.param_dtype) * (size_t)s->root->padded,
                                          FSDP_MEM_UNSHARDED);
            if (!s->root_pool) return FSDP_ERR_NOMEM;
        }
    }
    if (!s->replicated && max_block_grad > 0 && !cfg.deterministic) {
        // two alternating shared buffers for block units' gradients (zero-copy reduce-scatter), where the
        // device can (NULL otherwise)
        size_t bytes = sizeof(float) * (size_t)max_block_grad;
        s->staging[0] = fsdp_dev_alloc_shared(s->dev, s->shard_comm, bytes);
        s->staging[1] = s->staging[0] ? fsdp_dev_alloc_shared(s->dev, s->shard_comm, bytes) : NULL;
        if (s->staging[1]) {
            s->staging_numel = max_block_grad;
            fsdp_mem_track(FSDP_MEM_UNSHARDED, 2 * bytes, +1);
        } else if (s->staging[0]) {
            fsdp_dev_free_shared(s->dev, s->shard_comm, s->staging[0]);
            s->staging[0] = NULL;
        }
    }
    FSDP_CHECK(det_setup(s));
    FSDP_CHECK(engine_install_hooks(s));
    if (s->debug >= 1 && fsdp_comm_rank(s->world) == 0) fsdp_print_summary(s, stderr);
    return FSDP_OK;
}

fsdp_status fsdp_wrap(fsdp_state **out, fsdp_model_desc model, fsdp_config cfg, fsdp_comm *world) {
    *out = NULL;
    fsdp_state *s = calloc(1, sizeof *s);
    if (!s) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    fsdp_status st = build_state(s, model, cfg, world);
    if (st != FSDP_OK) {
        fsdp_free_state(s);
        return st;
    }
    *out = s;
    return FSDP_OK;
}

void fsdp_free_state(fsdp_state *s) {
    if (!s) return;
    if (s->compute) fsdp_stream_synchronize(s->compute);  // nothing may still use what is freed below
    if (s->comm_stream) fsdp_stream_synchronize(s->comm_stream);
    det_free(s);
    for (int i = 0; i < s->n_units; i++) unit_free(s, &s->units[i]);
    if (s->model.blocks) s->model.blocks->hooks = NULL;
    for (int i = 0; i < s->pool_n; i++) fsdp_dev_free(s->dev, s->pool[i]);
    fsdp_dev_free(s->dev, s->root_pool);
    if (s->have_opt && s->opt_map[0]) {  // mapped moments: not from the device allocator
        size_t bytes = sizeof(float) * (size_t)s->opt.n;
        fsdp_mem_track(FSDP_MEM_OPTIM, 2 * bytes, -1);
        fsdp_offload_unmap(s->dev, s->opt_map[0], bytes);
        fsdp_offload_unmap(s->dev, s->opt_map[1], bytes);
    } else if (s->have_opt) {
        fsdp_adamw_free(&s->opt);
    }
    muon_free(s);
    if (s->staging[0]) {
        fsdp_mem_track(FSDP_MEM_UNSHARDED, 2 * sizeof(float) * (size_t)s->staging_numel, -1);
        fsdp_dev_free_shared(s->dev, s->shard_comm, s->staging[1]);
        fsdp_dev_free_shared(s->dev, s->shard_comm, s->staging[0]);
    }
    if (s->dev) {
        fsdp_dev_free(s->dev, s->reduce_buf);
        fsdp_dev_free(s->dev, s->norm_acc);
    }
    fsdp_event_destroy(s->compute_done);
    fsdp_event_destroy(s->comm_done);
    if (s->owns_shard_comm) fsdp_comm_free(s->shard_comm);
    fsdp_comm_free(s->replica_comm);
    free(s->units);
    free(s->block_unit);
    free(s->order);
    for (int i = 0; i < 2 * s->n_file_meta; i++) free(s->file_meta[i]);
    free(s->file_meta);
    free(s);
}

int fsdp_unit_count(const fsdp_state *s) { return s->n_units; }
fsdp_comm *fsdp_shard_comm(const fsdp_state *s) { return s->shard_comm; }
fsdp_comm *fsdp_world_comm(const fsdp_state *s) { return s->world; }
fsdp_comm *fsdp_replica_comm(const fsdp_state *s) { return s->replica_comm; }

void fsdp_comm_bytes_by_group(const fsdp_state *s, double *shard, double *replica) {
    *shard = (double)fsdp_comm_get_stats(s->shard_comm).bytes_sent;
    if (s->shard_comm != s->world) *shard += (double)fsdp_comm_get_stats(s->world).bytes_sent;
    *replica = s->replica_comm ? (double)fsdp_comm_get_stats(s->replica_comm).bytes_sent : 0.0;
}

double fsdp_comm_bytes_sent(const fsdp_state *s) {
    double b = (double)fsdp_comm_get_stats(s->world).bytes_sent;
    if (s->shard_comm != s->world) b += (double)fsdp_comm_get_stats(s->shard_comm).bytes_sent;
    if (s->replica_comm) b += (double)fsdp_comm_get_stats(s->replica_comm).bytes_sent;
    return b;
}

double fsdp_exposed_comm_seconds(const fsdp_state *s) {
    double t = fsdp_comm_get_stats(s->world).seconds;
    if (s->shard_comm != s->world) t += fsdp_comm_get_stats(s->shard_comm).seconds;
    if (s->replica_comm) t += fsdp_comm_get_stats(s->replica_comm).seconds;
    return t;
}
