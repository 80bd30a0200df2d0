// test_wrap_size.c: the size auto-wrap policy (FSDP_WRAP_SIZE, --wrap size:N) on a model whose blocks
// differ in size (TransformerEncoderLayers with d_ff 8, 96, 8): a threshold between the two sizes wraps
// the large block alone and leaves the small ones to the root unit; a threshold equal to the small
// blocks' count wraps all three (>=). The mixed layout trains to the same losses and parameters on the
// world as on one rank: the same losses and first-step gradients (each rank also runs the one-rank
// reference on a group of its own). Plain
// process and under mpirun.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "fsdp/fsdp.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "test.h"

enum { LAYERS = 3, D_MODEL = 16, HEADS = 2, SEQ = 4, GLOBAL_BATCH = 6, STEPS = 3 };
static const int D_FF[LAYERS] = {8, 96, 8};

typedef struct {
    nn_params params;
    nn_sequential seq;
} mixed_model;

static void model_create(mixed_model *m) {
    CHECK(nn_params_create(&m->params, 12 * LAYERS) == FSDP_OK);
    CHECK(nn_sequential_create(&m->seq, LAYERS) == FSDP_OK);
    for (int b = 0; b < LAYERS; b++) {
        nn_block_config layer = nn_encoder_layer_defaults(D_MODEL, HEADS);
        layer.d_ff = D_FF[b];
        layer.dropout = layer.attn_dropout = 0.0f;
        layer.batch_first = 1;
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%d.", b);
        nn_block_init_encoder(&m->seq.blocks[b], &m->params, prefix, layer, b);
    }
}

static int64_t block_numel(const mixed_model *m, int b) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%d.", b);
    int64_t n = 0;
    for (int i = 0; i < m->params.count; i++)
        if (strncmp(m->params.items[i].name, prefix, strlen(prefix)) == 0) n += m->params.items[i].numel;
    return n;
}

static fsdp_config size_policy(int64_t min_num_params) {
    fsdp_config cfg = fsdp_config_default();
    cfg.wrap = FSDP_WRAP_SIZE;
    cfg.min_num_params = min_num_params;
    return cfg;
}

// Whether the summary's unit rows are exactly names[i] with numel[i] (n rows).
static int layout_is(const fsdp_state *fs, const char *const *names, const int64_t *numel, int n) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fsdp_print_summary(fs, f);
    fclose(f);
    int rows = 0, ok = 1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        int n_params;
        long long count, pad, shard, bytes;
        if (sscanf(line, "%63s %d %lld %lld %lld %lld", name, &n_params, &count, &pad, &shard, &bytes) != 6) continue;
        ok &= rows < n && strcmp(name, names[rows]) == 0 && count == numel[rows];
        rows++;
    }
    if (!ok || rows != n) fprintf(stderr, "unexpected layout:\n%s", text);
    free(text);
    return ok && rows == n;
}

// Trains STEPS AdamW steps on the global batch x (GLOBAL_BATCH, SEQ, D_MODEL), this rank of `comm`
// taking its rows. losses (STEPS,) = global mean losses; grads[i] (numel,) = the first step's (reduced)
// gradient of parameter i, filled in elements [first[i], first[i] + count[i]), the piece this rank holds.
// (Gradients, not trained parameters: AdamW turns the rounding noise of a near-zero gradient, here the
// key bias and LayerNorm biases under mean|y|, into whole lr steps of either sign.)
static void train(mixed_model *m, fsdp_config cfg, fsdp_comm *comm, const float *x, double *losses, float **grads,
                  int64_t *first, int64_t *count) {
    int R = fsdp_comm_rank(comm), N = fsdp_comm_size(comm), b = GLOBAL_BATCH / N;
    fsdp_model_desc desc = {&m->params, &m->seq, "TransformerEncoderLayer", "%d.", 0};
    fsdp_state *fs = NULL;
    CHECK(fsdp_wrap(&fs, desc, cfg, comm) == FSDP_OK);
    CHECK(fsdp_init_params(fs, 5) == FSDP_OK);
    fsdp_adamw_config ac = fsdp_adamw_defaults();
    ac.lr = 1e-4f;
    CHECK(fsdp_optimizer_create(fs, fsdp_optimizer_adamw(ac)) == FSDP_OK);
    size_t local = (size_t)b * SEQ * D_MODEL;
    fsdp_dev *dev = fsdp_state_device(fs);
    fsdp_stream *st = fsdp_dev_stream(dev, FSDP_STREAM_COMPUTE);
    float *xin = fsdp_dev_alloc(dev, sizeof(float) * local, FSDP_MEM_ACTIVATIONS);  // (local,) device
    float *dy = fsdp_dev_alloc(dev, sizeof(float) * local, FSDP_MEM_ACTIVATIONS);   // (local,) device
    double *loss_dev = fsdp_dev_alloc(dev, sizeof(double), FSDP_MEM_OTHER);        // (1,) device
    CHECK(fsdp_copy_h2d(st, xin, x + (size_t)R * local, sizeof(float) * local) == FSDP_OK);
    for (int step = 0; step < STEPS; step++) {
        nn_ctx ctx = fsdp_model_ctx(fs, 1, 5, (uint64_t)step);
        const float *y = NULL;
        fsdp_zero_grad(fs);
        CHECK(fsdp_begin_forward(fs, 1) == FSDP_OK);
        CHECK(nn_sequential_forward(&ctx, &m->seq, xin, b, SEQ, &y) == FSDP_OK);
        double loss = 0.0;
        nn_abs_mean_forward(&ctx, loss_dev, y, local);
        CHECK(fsdp_dev_read(st, &loss, loss_dev, sizeof loss) == FSDP_OK);
        nn_abs_mean_backward(&ctx, dy, y, local, 1.0f);
        CHECK(nn_sequential_backward(&ctx, &m->seq, dy, xin, NULL) == FSDP_OK);
        CHECK(fsdp_end_backward(fs) == FSDP_OK);
        CHECK(fsdp_all_reduce_double(comm, &loss) == FSDP_OK);
        losses[step] = loss / N;
        for (int i = 0; step == 0 && i < fsdp_named_param_count(fs); i++) {
            fsdp_named_param p = fsdp_named_param_at(fs, i);
            CHECK(fsdp_dev_read(st, grads[i] + p.shard_offset, p.shard_grad, sizeof(float) * (size_t)p.shard_numel) ==
                  FSDP_OK);
            first[i] = p.shard_offset;
            count[i] = p.shard_numel;
        }
        CHECK(fsdp_optimizer_step(fs, ac.lr) == FSDP_OK);
    }
    fsdp_dev_free(dev, xin);
    fsdp_dev_free(dev, dy);
    fsdp_dev_free(dev, loss_dev);
    fsdp_free_state(fs);
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL, *solo = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return 1;
    int R = fsdp_comm_rank(world);
    CHECK(fsdp_comm_split(world, R, 0, &solo) == FSDP_OK);  // this rank alone: the one-rank reference
    mixed_model m;
    model_create(&m);
    int64_t small = block_numel(&m, 0), large = block_numel(&m, 1);
    CHECK(small == block_numel(&m, 2) && large > small);
    fsdp_model_desc desc = {&m.params, &m.seq, "TransformerEncoderLayer", "%d.", 0};

    // layouts: between the sizes, the large block alone (the small ones go to the root); at the small
    // size, every block
    fsdp_state *fs = NULL;
    CHECK(fsdp_wrap(&fs, desc, size_policy(small + 1), world) == FSDP_OK);
    const char *mixed_names[] = {"1", "(root)"};
    int64_t mixed_numel[] = {large, 2 * small};
    CHECK(layout_is(fs, mixed_names, mixed_numel, 2));
    fsdp_free_state(fs);
    CHECK(fsdp_wrap(&fs, desc, size_policy(small), world) == FSDP_OK);
    const char *all_names[] = {"0", "1", "2"};
    int64_t all_numel[] = {small, large, small};
    CHECK(layout_is(fs, all_names, all_numel, 3));
    fsdp_free_state(fs);

    // the mixed layout on the world equals one rank
    float *x = malloc(sizeof(float) * GLOBAL_BATCH * SEQ * D_MODEL);
    for (int i = 0; i < GLOBAL_BATCH * SEQ * D_MODEL; i++) x[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
    int np = m.params.count;
    float **ref = malloc(sizeof(float *) * (size_t)np), **got = malloc(sizeof(float *) * (size_t)np);
    for (int i = 0; i < np; i++) {
        ref[i] = calloc((size_t)m.params.items[i].numel, sizeof(float));
        got[i] = calloc((size_t)m.params.items[i].numel, sizeof(float));
    }
    double ref_loss[STEPS], loss[STEPS];
    int64_t *first = calloc((size_t)np, sizeof(int64_t)), *count = calloc((size_t)np, sizeof(int64_t));
    train(&m, size_policy(small + 1), solo, x, ref_loss, ref, first, count);
    for (int i = 0; i < np; i++) CHECK_EQ_INT(count[i], m.params.items[i].numel);  // one rank holds everything
    train(&m, size_policy(small + 1), world, x, loss, got, first, count);
    for (int s = 0; s < STEPS; s++) CHECK_NEAR(loss[s], ref_loss[s], 1e-5 * ref_loss[s]);
    CHECK(ref_loss[STEPS - 1] != ref_loss[0]);  // it trained
    double worst = 0.0, held = 0.0, scale = 0.0;
    for (int i = 0; i < np; i++)
        for (int64_t j = 0; j < m.params.items[i].numel; j++) scale = fabs(ref[i][j]) > scale ? fabs(ref[i][j]) : scale;
    for (int i = 0; i < np; i++) {
        held += (double)count[i];
        for (int64_t j = first[i]; j < first[i] + count[i]; j++) {
            double d = fabs((double)got[i][j] - (double)ref[i][j]);
            worst = d > worst || d != d ? d : worst;  // NaN sticks
        }
    }
    CHECK(fsdp_all_reduce_double(world, &held) == FSDP_OK);
    CHECK_EQ_INT((int64_t)held, nn_params_numel(&m.params));  // every element compared on some rank
    CHECK(scale > 0.0);
    CHECK(worst <= 1e-5 * scale);  // reduction order only; a wrong shard or offset is off by O(scale)
    if (R == 0) printf("size policy, mixed layout: losses %.9g .. %.9g, worst gradient difference %.3g of %.3g\n",
                       loss[0], loss[STEPS - 1], worst, scale);
    for (int i = 0; i < np; i++) {
        free(ref[i]);
        free(got[i]);
    }
    free(ref);
    free(got);
    free(first);
    free(count);
    free(x);
    nn_sequential_free(&m.seq);
    nn_params_destroy(&m.params);
    fsdp_comm_free(solo);
    fsdp_comm_free(world);
    if (test_failures) fprintf(stderr, "test_wrap_size: %d failure(s)\n", test_failures);
    return test_failures ? 1 : 0;
}
