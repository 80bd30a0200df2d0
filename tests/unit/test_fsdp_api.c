// test_fsdp_api.c: the FSDP C API beyond the command line: a user wrap callback, the use_orig_params
// view (named parameters with this rank's piece of each), shard-local initialisation equal to a
// one-process init, and zero-copy collectives on shared buffers. Plain process and under mpirun.
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "fsdp/fsdp.h"
#include "nn/encoder_stack.h"
#include "test.h"

static int wrap_even_blocks(void *user, const char *type, int index, int64_t numel) {
    int *calls = user;
    (*calls)++;
    return strcmp(type, "TransformerEncoderLayer") == 0 && numel > 0 && index % 2 == 0;
}

static void check_shared_collectives(fsdp_comm *c) {
    int R = fsdp_comm_rank(c), N = fsdp_comm_size(c);
    size_t n = 1000;
    float *shared = fsdp_comm_alloc_shared(c, sizeof(float) * n * (size_t)N);
    if (!shared) return;  // no shared memory in this group (plain process, or MPI without it)
    float *out = malloc(sizeof(float) * n * (size_t)N);
    for (size_t i = 0; i < n * (size_t)N; i++) shared[i] = (float)(R * 1000000 + (int)i);
    CHECK(fsdp_reduce_scatter(c, shared, out, n, FSDP_F32, FSDP_SUM) == FSDP_OK);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < N; r++) want += r * 1000000.0 + (double)((size_t)R * n + i);
        bad += out[i] != (float)want;
    }
    CHECK(fsdp_barrier(c) == FSDP_OK);  // the contract: one more collective before rewriting `shared`
    for (size_t i = 0; i < n; i++) shared[i] = (float)(R * 7 + (int)i);
    CHECK(fsdp_all_gather(c, shared, out, n, FSDP_F32) == FSDP_OK);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += out[(size_t)r * n + i] != (float)(r * 7 + (int)i);
    CHECK(bad == 0);
    CHECK(fsdp_barrier(c) == FSDP_OK);
    fsdp_comm_free_shared(c, shared);
    free(out);
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return 1;
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    check_shared_collectives(world);

    nn_block_config layer = nn_encoder_layer_defaults(24, 4);
    layer.d_ff = 40;
    nn_encoder_stack model;
    CHECK(nn_encoder_stack_create(&model, layer, 3) == FSDP_OK);
    fsdp_config cfg = fsdp_config_default();
    int calls = 0;
    cfg.wrap = FSDP_WRAP_CALLBACK;
    cfg.wrap_fn = wrap_even_blocks;
    cfg.wrap_user = &calls;
    fsdp_model_desc desc = {&model.params, &model.seq, "TransformerEncoderLayer", "%d."};
    fsdp_state *fs = NULL;
    CHECK(fsdp_wrap(&fs, desc, cfg, world) == FSDP_OK);
    CHECK_EQ_INT(calls, 3);
    CHECK_EQ_INT(fsdp_unit_count(fs), 3);  // blocks 0 and 2, and the root holding block 1
    CHECK(fsdp_init_params(fs, 42) == FSDP_OK);

    // every element of every parameter is held by exactly one rank, with the one-process init value
    int bad = 0;
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        const nn_param *orig = &model.params.items[i];
        CHECK(strcmp(p.name, orig->name) == 0);
        CHECK_EQ_INT(p.numel, orig->numel);
        float *want = malloc(sizeof(float) * (size_t)(p.shard_numel ? p.shard_numel : 1));
        nn_param_init_slice(orig, 42, p.shard_offset, p.shard_numel, want);
        for (int64_t j = 0; j < p.shard_numel; j++) bad += p.shard_data[j] != want[j];
        free(want);
        double held = (double)p.shard_numel;
        CHECK(fsdp_all_reduce_double(world, &held) == FSDP_OK);
        CHECK_EQ_INT((int64_t)held, p.numel);
        if (N == 1) CHECK_EQ_INT(p.shard_numel, p.numel);
    }
    CHECK(bad == 0);
    // the local shard shrinks as 1/N: total held equals the padded model size
    double local = (double)fsdp_local_numel(fs);
    CHECK(fsdp_all_reduce_double(world, &local) == FSDP_OK);
    int64_t numel = nn_params_numel(&model.params);
    CHECK(local >= (double)numel && local < (double)numel + 3.0 * 16 * N);
    if (R == 0) fsdp_print_summary(fs, stdout);
    fsdp_free_state(fs);

    // sync_module_states under NO_SHARD: replicas that drifted take rank 0's values again
    fsdp_config rep = fsdp_config_default();
    rep.strategy = FSDP_NO_SHARD;
    CHECK(fsdp_wrap(&fs, desc, rep, world) == FSDP_OK);
    CHECK(fsdp_init_params(fs, 7) == FSDP_OK);
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        CHECK_EQ_INT(p.shard_numel, p.numel);  // replicated: every rank holds all of it
        for (int64_t j = 0; j < p.shard_numel; j++) p.shard_data[j] += (float)R;
    }
    CHECK(fsdp_sync_module_states(fs) == FSDP_OK);
    bad = 0;
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        float *want = malloc(sizeof(float) * (size_t)p.numel);
        nn_param_init_slice(&model.params.items[i], 7, 0, p.numel, want);
        for (int64_t j = 0; j < p.numel; j++) bad += p.shard_data[j] != want[j];
        free(want);
    }
    CHECK(bad == 0);
    fsdp_free_state(fs);
    nn_encoder_stack_free(&model);
    int failures = test_failures;
    fsdp_comm_free(world);
    if (failures) return 1;
    if (R == 0) printf("all checks passed\n");
    return 0;
}
