// test_fsdp_api.c: the FSDP C API beyond the command line: a user wrap callback, the use_orig_params
// view (named parameters with this rank's piece of each), shard-local initialisation equal to a
// one-process init, zero-copy collectives on shared buffers, mixed precision (parameters gathered in
// bf16 compute exactly what their bf16-rounded fp32 values compute), and gradient buffers reused without
// clearing: a Linear weight no backward writes still gets zeros. Plain process and under mpirun.
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "fsdp/fsdp.h"
#include "nn/encoder_stack.h"
#include "nn/linear.h"
#include "test.h"

static int wrap_even_blocks(void *user, const char *type, int index, int64_t numel) {
    int *calls = user;
    (*calls)++;
    return strcmp(type, "TransformerEncoderLayer") == 0 && numel > 0 && index % 2 == 0;
}

// dst (n,) host = src (n,) device of the state's device
static fsdp_status read_dev(const fsdp_state *fs, float *dst, const float *src, int64_t n) {
    return fsdp_dev_read(fsdp_dev_stream(fsdp_state_device(fs), FSDP_STREAM_COMPUTE), dst, src, sizeof(float) * (size_t)n);
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
    // read in place: every rank's piece through fsdp_comm_shared_at, and only the listed ranges copied
    // (one across each boundary between two ranks' pieces, one inside the last piece); the rest untouched
    for (size_t i = 0; i < n; i++) shared[i] = (float)(R * 11 + (int)i);
    for (size_t i = 0; i < n * (size_t)N; i++) out[i] = -1.0f;
    size_t copy[8][2], n_copy = 0;
    for (int r = 1; r < N && n_copy < 7; r++, n_copy++) {
        copy[n_copy][0] = (size_t)r * n - 3;
        copy[n_copy][1] = (size_t)r * n + 5;
    }
    copy[n_copy][0] = (size_t)(N - 1) * n + 100;
    copy[n_copy][1] = (size_t)(N - 1) * n + 140;
    n_copy++;
    CHECK(fsdp_all_gather_shared(c, shared, out, n, FSDP_F32, (const size_t (*)[2])copy, n_copy) == FSDP_OK);
    for (int r = 0; r < N; r++) {
        const float *peer = fsdp_comm_shared_at(c, shared, r);
        CHECK(peer != NULL && (r != R || peer == shared));
        CHECK(peer == NULL || fsdp_comm_shared_at(c, peer + 5, R) == shared + 5);  // a peer's address maps back
        for (size_t i = 0; peer && i < n; i++) bad += peer[i] != (float)(r * 11 + (int)i);
    }
    for (size_t i = 0; i < n * (size_t)N; i++) {
        int listed = 0;
        for (size_t k = 0; k < n_copy; k++) listed |= i >= copy[k][0] && i < copy[k][1];
        bad += out[i] != (listed ? (float)((int)(i / n) * 11 + (int)(i % n)) : -1.0f);
    }
    // the ranks' whole buffers lie one after another (MPI windows are contiguous across ranks unless
    // told otherwise): their concatenation is read in place; pieces shorter than the buffer are not
    const float *whole = fsdp_comm_shared_concat(c, shared, sizeof(float) * n * (size_t)N);
    CHECK(whole != NULL);
    for (int r = 0; whole && r < N; r++)
        for (size_t i = 0; i < n; i++) bad += whole[(size_t)r * n * (size_t)N + i] != (float)(r * 11 + (int)i);
    CHECK(N == 1 || fsdp_comm_shared_concat(c, shared, sizeof(float) * n) == NULL);
    CHECK(fsdp_comm_shared_concat(c, out, sizeof(float) * n) == NULL);
    CHECK(bad == 0);
    CHECK(fsdp_comm_shared_at(c, out, 0) == NULL);  // ordinary memory
    CHECK(fsdp_all_gather_shared(c, out, out, n, FSDP_F32, NULL, 0) == FSDP_ERR_INVALID_ARG);
    CHECK(fsdp_barrier(c) == FSDP_OK);
    fsdp_comm_free_shared(c, shared);
    free(out);
}

// Parameters of shards in shared memory (the plain CPU device) are read in place: in fp32, a parameter
// inside this rank's shard is bound to the shard itself; under param_dtype bf16 every parameter is bound
// to shared memory (the shards' rounded copies). And the peers' reads are fenced: with rank 0 lagging
// after each binding (FSDP_TEST_SLOW_VIEWS), rank 1 re-initialises its shards right after fsdp_end_eval
// and runs the next pass (which rounds the bf16 copies again); rank 0's forward must still see the old
// values (fsdp_end_eval waits for every reader), so all ranks' outputs equal the first, unhurried
// forward's, bit for bit.
static void check_views_in_place(fsdp_comm *world, fsdp_model_desc desc, int C, fsdp_dtype param_dtype) {
    int N = fsdp_comm_size(world), bf16 = param_dtype == FSDP_BF16;
    float *probe = fsdp_comm_alloc_shared(world, 64);
    int shared = probe != NULL, contiguous = probe && fsdp_comm_shared_concat(world, probe, 64) != NULL;
    if (probe) fsdp_comm_free_shared(world, probe);
    fsdp_state *fs = NULL;
    fsdp_config cfg = fsdp_config_default();
    cfg.strategy = FSDP_SHARD_GRAD_OP;  // every unit stays bound until fsdp_end_eval
    cfg.param_dtype = param_dtype;
    CHECK(fsdp_wrap(&fs, desc, cfg, world) == FSDP_OK);
    CHECK(fsdp_init_params(fs, 5) == FSDP_OK);
    fsdp_dev *dev = fsdp_state_device(fs);
    int B = 2, T = 4;
    size_t xn = (size_t)B * T * C;
    float *x = malloc(sizeof(float) * xn), *y0 = malloc(sizeof(float) * xn), *y1 = malloc(sizeof(float) * xn);
    float *y2 = malloc(sizeof(float) * xn);
    for (size_t i = 0; i < xn; i++) x[i] = (float)((i * 29) % 97) / 48.0f - 1.0f;
    float *x_dev = fsdp_dev_alloc(dev, sizeof(float) * xn, FSDP_MEM_ACTIVATIONS);  // (B*T, C) device
    nn_ctx ctx = fsdp_model_ctx(fs, 0, 5, 0);
    CHECK(fsdp_copy_h2d(ctx.stream, x_dev, x, sizeof(float) * xn) == FSDP_OK);
    const float *y = NULL;
    CHECK(fsdp_begin_eval(fs) == FSDP_OK);
    CHECK(nn_sequential_forward(&ctx, desc.blocks, x_dev, B, T, &y) == FSDP_OK);
    CHECK(fsdp_dev_read(ctx.stream, y0, y, sizeof(float) * xn) == FSDP_OK);
    // parameters (all bound now) inside this rank's shard; and those straddling two ranks' shards, read
    // in place too where the shards lie one after another (the piece this rank holds is the shard's)
    int in_place = 0, whole = 0, straddling = 0, straddling_in_place = 0, bound = 0, bound_shared = 0;
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        const nn_param *orig = &desc.params->items[i];
        if (p.numel > 0 && bf16) {
            bound++;
            bound_shared += orig->data == NULL && fsdp_comm_shared_at(world, orig->data_b16, 0) != NULL;
        }
        if (p.numel == 0 || p.shard_numel == 0 || bf16) continue;
        if (p.shard_numel == p.numel) {
            whole++;
            in_place += orig->data == p.shard_data;
        } else {
            straddling++;
            straddling_in_place += orig->data + p.shard_offset == p.shard_data;
        }
    }
    double whole_all = whole, straddling_all = straddling;
    CHECK(fsdp_all_reduce_double(world, &whole_all) == FSDP_OK);
    CHECK(fsdp_all_reduce_double(world, &straddling_all) == FSDP_OK);
    if (shared && N > 1 && fsdp_dev_host_addressable(dev) && !bf16) CHECK(whole_all > 0 && in_place == whole);
    if (contiguous && N > 1 && fsdp_dev_host_addressable(dev)) {
        CHECK(bf16 || (straddling_all > 0 && straddling_in_place == straddling));
        CHECK(!bf16 || (bound > 0 && bound_shared == bound));
    }
    CHECK(fsdp_end_eval(fs) == FSDP_OK);
    CHECK(setenv("FSDP_TEST_SLOW_VIEWS", "0:300", 1) == 0);
    CHECK(fsdp_begin_eval(fs) == FSDP_OK);
    CHECK(nn_sequential_forward(&ctx, desc.blocks, x_dev, B, T, &y) == FSDP_OK);
    CHECK(fsdp_dev_read(ctx.stream, y1, y, sizeof(float) * xn) == FSDP_OK);
    CHECK(fsdp_end_eval(fs) == FSDP_OK);
    CHECK(unsetenv("FSDP_TEST_SLOW_VIEWS") == 0);
    CHECK(fsdp_init_params(fs, 6) == FSDP_OK);  // rank 1 at once, rank 0 after its lagging reads
    CHECK(fsdp_begin_eval(fs) == FSDP_OK);      // rank 1 rounds its bf16 copies again at once
    CHECK(nn_sequential_forward(&ctx, desc.blocks, x_dev, B, T, &y) == FSDP_OK);
    CHECK(fsdp_dev_read(ctx.stream, y2, y, sizeof(float) * xn) == FSDP_OK);
    CHECK(fsdp_end_eval(fs) == FSDP_OK);
    CHECK(memcmp(y0, y1, sizeof(float) * xn) == 0);
    CHECK(memcmp(y0, y2, sizeof(float) * xn) != 0);  // the new pass reads the new weights (rounded again)
    CHECK(fsdp_barrier(world) == FSDP_OK);
    fsdp_dev_free(dev, x_dev);
    fsdp_free_state(fs);
    free(x);
    free(y0);
    free(y1);
    free(y2);
}

// Reused gradient buffers are not cleared where the backward stores anyway (a Linear's weight: its dW
// product stores the first time, nn_grad_beta); a weight whose backward does not run in a step must still
// end with zero gradients, not the buffer's old values. Deterministic mode reuses the root unit's buffer.
// Linears a and b (8 -> 8) in the root unit: step 0 runs both backwards, step 1 only a's.
static void check_unwritten_gradients(fsdp_comm *world) {
    nn_params ps;
    nn_linear a, b;
    nn_sequential none;  // one block that never runs: the wrap needs a Sequential, and everything is root
    CHECK(nn_params_create(&ps, 4) == FSDP_OK && nn_sequential_create(&none, 1) == FSDP_OK);
    nn_linear_init(&a, &ps, "a.", "weight", "bias", 8, 8, 0);
    nn_linear_init(&b, &ps, "b.", "weight", "bias", 8, 8, 0);
    fsdp_config cfg = fsdp_config_default();
    cfg.wrap = FSDP_WRAP_NONE;
    cfg.deterministic = 1;
    cfg.det_chunks = fsdp_comm_size(world);  // one micro-step per rank
    fsdp_model_desc desc = {&ps, &none, "Linear", "%d.", 0};
    fsdp_state *fs = NULL;
    CHECK(fsdp_wrap(&fs, desc, cfg, world) == FSDP_OK);
    CHECK(fsdp_init_params(fs, 5) == FSDP_OK);
    fsdp_dev *dev = fsdp_state_device(fs);
    enum { ROWS = 4 };
    float host[ROWS * 8];
    for (int i = 0; i < ROWS * 8; i++) host[i] = (float)(i % 7) - 3.0f;
    float *x = fsdp_dev_alloc(dev, sizeof host, FSDP_MEM_ACTIVATIONS);  // (ROWS, 8) device
    for (int step = 0; step < 2; step++) {
        nn_ctx ctx = fsdp_model_ctx(fs, 1, 5, (uint64_t)step);
        CHECK(fsdp_copy_h2d(ctx.stream, x, host, sizeof host) == FSDP_OK);
        fsdp_zero_grad(fs);
        CHECK(fsdp_begin_forward(fs, 1) == FSDP_OK);
        nn_linear_backward(&ctx, &a, NULL, 0, x, x, ROWS);  // dout = x: any values
        if (step == 0) nn_linear_backward(&ctx, &b, NULL, 0, x, x, ROWS);
        CHECK(fsdp_end_backward(fs) == FSDP_OK);
        double sums[2] = {0, 0};  // |gradient| summed over a.weight, b.weight
        for (int i = 0; i < fsdp_named_param_count(fs); i++) {
            fsdp_named_param p = fsdp_named_param_at(fs, i);
            int which = strcmp(p.name, "a.weight") == 0 ? 0 : strcmp(p.name, "b.weight") == 0 ? 1 : -1;
            float g[64];
            if (which < 0 || p.shard_numel == 0) continue;
            CHECK(read_dev(fs, g, p.shard_grad, p.shard_numel) == FSDP_OK);
            for (int64_t j = 0; j < p.shard_numel; j++) sums[which] += g[j] < 0 ? -g[j] : g[j];
        }
        CHECK(fsdp_all_reduce_double(world, &sums[0]) == FSDP_OK && fsdp_all_reduce_double(world, &sums[1]) == FSDP_OK);
        CHECK(sums[0] > 0.0);
        CHECK(step == 0 ? sums[1] > 0.0 : sums[1] == 0.0);
    }
    fsdp_dev_free(dev, x);
    fsdp_free_state(fs);
    nn_sequential_free(&none);
    nn_params_destroy(&ps);
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return 1;
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    check_shared_collectives(world);
    check_unwritten_gradients(world);

    nn_block_config layer = nn_encoder_layer_defaults(24, 4);
    layer.d_ff = 40;
    nn_encoder_stack model;
    CHECK(nn_encoder_stack_create(&model, layer, 3) == FSDP_OK);
    fsdp_config cfg = fsdp_config_default();
    int calls = 0;
    cfg.wrap = FSDP_WRAP_CALLBACK;
    cfg.wrap_fn = wrap_even_blocks;
    cfg.wrap_user = &calls;
    fsdp_model_desc desc = {&model.params, &model.seq, "TransformerEncoderLayer", "%d.", 0};
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
        float *have = malloc(sizeof(float) * (size_t)(p.shard_numel ? p.shard_numel : 1));
        nn_param_init_slice(orig, 42, p.shard_offset, p.shard_numel, want);
        CHECK(read_dev(fs, have, p.shard_data, p.shard_numel) == FSDP_OK);
        for (int64_t j = 0; j < p.shard_numel; j++) bad += have[j] != want[j];
        free(want);
        free(have);
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
    check_views_in_place(world, desc, layer.d_model, FSDP_F32);
    check_views_in_place(world, desc, layer.d_model, FSDP_BF16);

    // sync_module_states under NO_SHARD: replicas that drifted take rank 0's values again
    fsdp_config rep = fsdp_config_default();
    rep.strategy = FSDP_NO_SHARD;
    CHECK(fsdp_wrap(&fs, desc, rep, world) == FSDP_OK);
    CHECK(fsdp_init_params(fs, 7) == FSDP_OK);
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        CHECK_EQ_INT(p.shard_numel, p.numel);  // replicated: every rank holds all of it
        float *v = malloc(sizeof(float) * (size_t)p.numel);
        CHECK(read_dev(fs, v, p.shard_data, p.shard_numel) == FSDP_OK);
        for (int64_t j = 0; j < p.shard_numel; j++) v[j] += (float)R;
        CHECK(fsdp_copy_h2d(fsdp_dev_stream(fsdp_state_device(fs), FSDP_STREAM_COMPUTE), p.shard_data, v,
                            sizeof(float) * (size_t)p.numel) == FSDP_OK);
        free(v);
    }
    CHECK(fsdp_sync_module_states(fs) == FSDP_OK);
    bad = 0;
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        float *want = malloc(sizeof(float) * (size_t)p.numel), *have = malloc(sizeof(float) * (size_t)p.numel);
        nn_param_init_slice(&model.params.items[i], 7, 0, p.numel, want);
        CHECK(read_dev(fs, have, p.shard_data, p.numel) == FSDP_OK);
        for (int64_t j = 0; j < p.numel; j++) bad += have[j] != want[j];
        free(want);
        free(have);
    }
    CHECK(bad == 0);
    fsdp_free_state(fs);

    // param_dtype bf16: a forward through FSDP (parameters gathered in bf16, bound as bf16 views) equals
    // the plain model holding the bf16-rounded values in fp32, on the same bf16 kernel table, bit for bit
    fsdp_config mp = fsdp_config_default();
    mp.param_dtype = mp.reduce_dtype = FSDP_BF16;
    CHECK(fsdp_wrap(&fs, desc, mp, world) == FSDP_OK);
    CHECK(fsdp_init_params(fs, 11) == FSDP_OK);
    fsdp_dev *dev = fsdp_state_device(fs);
    const char *bf16_table = fsdp_dev_kind(dev) == FSDP_DEVICE_GUARD ? "guard-bf16" : "cpu-bf16";
    CHECK(strcmp(fsdp_compute_kernels(fs)->name, bf16_table) == 0);
    int B = 2, T = 5, C = layer.d_model;
    size_t xn = (size_t)B * T * C;
    float *x = malloc(sizeof(float) * xn), *y_fsdp = malloc(sizeof(float) * xn), *y_plain = malloc(sizeof(float) * xn);
    for (int i = 0; i < B * T * C; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    float *x_dev = fsdp_dev_alloc(dev, sizeof(float) * xn, FSDP_MEM_ACTIVATIONS);  // (B*T, C) device
    nn_ctx ctx = fsdp_model_ctx(fs, 0, 11, 0);
    CHECK(fsdp_copy_h2d(ctx.stream, x_dev, x, sizeof(float) * xn) == FSDP_OK);
    const float *y = NULL;
    CHECK(fsdp_begin_eval(fs) == FSDP_OK);
    CHECK(nn_sequential_forward(&ctx, &model.seq, x_dev, B, T, &y) == FSDP_OK);
    CHECK(fsdp_dev_read(ctx.stream, y_fsdp, y, sizeof(float) * xn) == FSDP_OK);
    CHECK(fsdp_end_eval(fs) == FSDP_OK);
    fsdp_free_state(fs);
    // the plain model: parameters bound to one device buffer holding the bf16-rounded initial values
    float *host = malloc(sizeof(float) * (size_t)numel);
    float *flat = fsdp_dev_alloc(dev, sizeof(float) * (size_t)numel, FSDP_MEM_PARAMS);  // (numel,) device
    float *gflat = fsdp_dev_alloc(dev, sizeof(float) * (size_t)numel, FSDP_MEM_GRADS);  // (numel,) device
    int64_t off = 0;
    for (int i = 0; i < model.params.count; i++) {
        nn_param *p = &model.params.items[i];
        nn_param_init_slice(p, 11, 0, p->numel, host + off);
        for (int64_t j = 0; j < p->numel; j++) host[off + j] = fsdp_bf16_to_f32(fsdp_f32_to_bf16(host[off + j]));
        off += p->numel;
    }
    CHECK(fsdp_copy_h2d(ctx.stream, flat, host, sizeof(float) * (size_t)numel) == FSDP_OK);
    nn_params_bind_flat(&model.params, flat, gflat);
    CHECK(nn_sequential_forward(&ctx, &model.seq, x_dev, B, T, &y) == FSDP_OK);
    CHECK(fsdp_dev_read(ctx.stream, y_plain, y, sizeof(float) * xn) == FSDP_OK);
    CHECK(memcmp(y_plain, y_fsdp, sizeof(float) * xn) == 0);
    nn_params_bind_flat(&model.params, NULL, NULL);
    fsdp_dev_free(dev, flat);
    fsdp_dev_free(dev, gflat);
    fsdp_dev_free(dev, x_dev);
    free(host);
    free(x);
    free(y_fsdp);
    free(y_plain);
    nn_encoder_stack_free(&model);
    int failures = test_failures;
    fsdp_comm_free(world);
    if (failures) return 1;
    if (R == 0) printf("all checks passed\n");
    return 0;
}
