// fsdp_config.c: the configuration's defaults and names (a leaf: no other engine file is called).
#include <string.h>

#include "fsdp/fsdp.h"

fsdp_config fsdp_config_default(void) {
    fsdp_config c;
    memset(&c, 0, sizeof c);
    c.strategy = FSDP_FULL_SHARD;
    c.wrap = FSDP_WRAP_TRANSFORMER;
    c.backward_prefetch = FSDP_PREFETCH_BACKWARD_PRE;
    c.limit_all_gathers = 2;
    return c;
}

const char *fsdp_strategy_name(fsdp_strategy s) {
    switch (s) {
    case FSDP_FULL_SHARD: return "FULL_SHARD";
    case FSDP_SHARD_GRAD_OP: return "SHARD_GRAD_OP";
    case FSDP_NO_SHARD: return "NO_SHARD";
    case FSDP_HYBRID_SHARD: return "HYBRID_SHARD";
    case FSDP_DDP: return "DDP";
    }
    return "?";
}
