// local_numel.c: this rank's shard sizes summed over its units (fsdp.h, "Layout and memory"). Apart
// from wrap.c, which builds the units, so that the engine (the optimizer's state size) and wrap.c
// both call it downward: no call cycle between engine.c and wrap.c (scripts/check-layers.sh).
#include "fsdp/fsdp_internal.h"

int64_t fsdp_local_grad_numel(const fsdp_state *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_units; i++) n += s->units[i].grad_shard;
    return n;
}

int64_t fsdp_local_numel(const fsdp_state *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_units; i++) n += s->units[i].shard_numel;
    return n;
}
