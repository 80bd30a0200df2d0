// test_hooks.h: fault injection for the test suite, read from FSDP_TEST_* environment variables, kept in
// one place so that none hides in a tool's logic. Never set them outside tests. fsdp-train's hooks:
//   FSDP_TEST_NAN_LOSS=K     step K's (all-reduced) loss reads as NaN: the loss check on its own
//   FSDP_TEST_NAN_GRAD=K:R   rank R runs step K's backward with a NaN loss scale, so every gradient it
//                            computes is NaN and the reduce-scatter spreads NaN into every rank's shard
//   FSDP_TEST_NAN_SHARD=K:R  after step K's reduction, one element of rank R's gradient shard becomes
//                            NaN: only that rank sees it, so the skip decision must be collective
// (":R" may be left out: every rank.) Hooks that act inside the library live where they act:
// FSDP_TEST_DESYNC (src/fsdp/engine.c) and FSDP_TEST_CRASH_IN_SAVE (src/fsdp/checkpoint.c).
#pragma once
#include <math.h>
#include <stdlib.h>

#include "fsdp/fsdp.h"

// 1 when the hook `var` is set to "step" or "step:rank" matching this step and rank.
static inline int test_hook_at(const char *var, int step, int rank) {
    const char *v = getenv(var);
    if (!v || !*v) return 0;
    char *end = NULL;
    long k = strtol(v, &end, 10);
    if (end == v || k != step) return 0;
    return *end != ':' || strtol(end + 1, NULL, 10) == rank;
}

// FSDP_TEST_NAN_SHARD: the first element of this rank's gradient shard becomes NaN.
static inline void test_hook_poison_grad_shard(fsdp_state *fs) {
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        if (p.shard_numel > 0) {
            p.shard_grad[0] = NAN;
            return;
        }
    }
}
