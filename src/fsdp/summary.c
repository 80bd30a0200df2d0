// summary.c: the sharding layout, like torch's fsdp.summarize().print_summary(). Printed by fsdp_wrap
// (FSDP_DEBUG=INFO) and the tools; reads the state only.
#include <stdio.h>

#include "fsdp/fsdp_internal.h"

void fsdp_print_summary(const fsdp_state *s, FILE *f) {
    fsdp_dev_caps caps;
    fsdp_dev_capabilities(s->dev, &caps);
    int G = s->replicated ? 1 : fsdp_comm_size(s->shard_comm);
    fprintf(f, "FSDP summary: strategy %s, world %d, shard group %d%s, %d units, backend %s, device %s\n",
            fsdp_strategy_name(s->cfg.strategy), fsdp_comm_size(s->world), G,
            s->replica_comm ? " (replicated across groups)" : "", s->n_units, fsdp_comm_backend(s->world),
            fsdp_dev_name(s->dev));
    if (s->groups_line[0]) fprintf(f, "%s\n", s->groups_line);
    fprintf(f, "mixed precision: param_dtype %s, reduce_dtype %s, master shards and optimizer fp32, compute %s%s%s\n",
            fsdp_dtype_name(s->cfg.param_dtype), fsdp_dtype_name(s->cfg.reduce_dtype),
            fsdp_dev_kernels(s->dev, s->cfg.param_dtype == FSDP_BF16)->name, s->cfg.param_dtype == FSDP_BF16 ? " with the GEMM on " : "",
            s->cfg.param_dtype == FSDP_BF16 ? caps.gemm_bf16 : "");
    fprintf(f, "%-10s %7s %12s %9s %12s %14s\n", "unit", "params", "numel", "padding", "shard numel",
            "bytes/rank");
    int64_t tot_numel = 0, tot_train = 0, tot_shard = 0, tot_bytes = 0;
    for (int i = 0; i < s->n_units; i++) {
        const fsdp_unit *u = &s->units[i];
        // per rank: the fp32 shard (4 bytes per element), and for its trainable part a gradient shard and
        // AdamW m and v (12 more): frozen parameters have neither
        int64_t bytes = 4 * u->shard_numel + 12 * u->grad_shard;
        fprintf(f, "%-10s %7d %12lld %9lld %12lld %14lld\n", u->name, u->n_params, (long long)u->numel,
                (long long)(u->padded - u->numel), (long long)u->shard_numel, (long long)bytes);
        for (int j = 0; j < u->n_params; j++) {
            char shape[64];
            fprintf(f, "    %-44s %s%s\n", u->params[j]->name,
                    fsdp_shape_str(u->params[j]->ndim, u->params[j]->shape, shape, sizeof shape),
                    u->params[j]->frozen ? " (frozen)" : "");
        }
        tot_numel += u->numel;
        tot_train += u->train_numel;
        tot_shard += u->shard_numel;
        tot_bytes += bytes;
    }
    fprintf(f, "total: %lld parameters, %lld per rank (params + grads + AdamW state: %lld bytes per rank)",
            (long long)tot_numel, (long long)tot_shard, (long long)tot_bytes);
    if (tot_train < tot_numel)
        fprintf(f, "; %lld trainable, %lld frozen (no gradient, no reduction, no optimizer state)",
                (long long)tot_train, (long long)(tot_numel - tot_train));
    fprintf(f, "\n");
}
