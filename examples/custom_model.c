// custom_model.c: an application's own model trained with FSDP through the installed library.
//
// The model: in_proj = Linear(8, 32) -> 2 x TransformerEncoderLayer(32, 4 heads, ffn 64) -> head =
// Linear(32, 1), one output per token, mean-squared error against a synthetic target that needs
// attention: y[b, t] = tanh(x[b, t, 0] - x[b, t, 1]) + mean over t' of x[b, t', 2].
// The application owns the parameter list (PyTorch-style names) and writes forward and backward
// itself; fsdp_wrap's transformer auto-wrap policy makes each encoder layer a unit and the root unit
// takes in_proj and head. AdamW, a fresh global batch of 16 sequences each step, split over ranks:
// N ranks print the losses one process prints. Rank 0 prints "step K loss L".
//
//   cc custom_model.c $(pkg-config --cflags --libs fsdp) -o custom_model
//   mpirun -np 2 ./custom_model [steps]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <fsdp/fsdp.h>
#include <fsdp/nn/linear.h>

enum { IN = 8, D = 32, HEADS = 4, FFN = 64, LAYERS = 2, SEQ = 6, BATCH = 16 };

typedef struct {
    nn_params params;     // every parameter, in registration order
    nn_linear in_proj;    // (IN -> D)
    nn_sequential blocks; // LAYERS encoder layers, "blocks.%d."
    nn_linear head;       // (D -> 1)
} token_regressor;

static fsdp_status model_create(token_regressor *m) {
    FSDP_CHECK(nn_params_create(&m->params, 4 + 12 * LAYERS));  // 12 per encoder layer
    nn_linear_init(&m->in_proj, &m->params, "in_proj.", "weight", "bias", IN, D, 0);
    FSDP_CHECK(nn_sequential_create(&m->blocks, LAYERS));
    nn_block_config layer = nn_encoder_layer_defaults(D, HEADS);
    layer.d_ff = FFN;
    layer.dropout = layer.attn_dropout = 0.0f;
    layer.batch_first = 1;  // rows are (b, t): a rank's samples are contiguous
    for (int i = 0; i < LAYERS; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blocks.%d.", i);
        nn_block_init_encoder(&m->blocks.blocks[i], &m->params, prefix, layer, i);
    }
    nn_linear_init(&m->head, &m->params, "head.", "weight", "bias", D, 1, 0);
    return FSDP_OK;
}

static void model_free(token_regressor *m) {
    nn_sequential_free(&m->blocks);
    nn_params_destroy(&m->params);
}

// One local batch of B sequences (N = B * SEQ rows). The application makes inputs and computes its loss
// on the host; the model's activations live on the FSDP state's device and move by explicit copies.
typedef struct {
    int B, N;
    float *x, *target;  // host: (N, IN), (N,)
    float *y, *dy;      // host: (N,) predictions and d loss / d y
    float *x_dev;       // device: (N, IN)
    float *h0, *dh0;    // device: (N, D) in_proj output and its gradient
    float *y_dev, *dy_dev;  // device: (N,)
    float *dh;          // device: (N, D) gradient at the blocks' output
} batch;

// Samples [first, first + B) of step `step`'s global batch: a counter-based stream, so a rank draws
// exactly the values one process would draw for the same samples.
static void make_batch(batch *b, int first, int step) {
    fsdp_rng rng = {1234, (uint64_t)step};
    fsdp_rng_normal(rng, (uint64_t)first * SEQ * IN, b->x, (size_t)b->N * IN, 0.0f, 1.0f);
    for (int s = 0; s < b->B; s++) {
        const float *xs = b->x + (size_t)s * SEQ * IN;  // (SEQ, IN)
        float mean2 = 0.0f;
        for (int t = 0; t < SEQ; t++) mean2 += xs[t * IN + 2] / SEQ;
        for (int t = 0; t < SEQ; t++) b->target[s * SEQ + t] = tanhf(xs[t * IN] - xs[t * IN + 1]) + mean2;
    }
}

// One forward and backward on this rank's batch; returns the local mean squared error.
static fsdp_status train_micro_step(fsdp_state *fs, token_regressor *m, batch *b, int step, double *loss) {
    nn_ctx ctx = fsdp_model_ctx(fs, 1, 1234, (uint64_t)step);
    FSDP_CHECK(fsdp_copy_h2d(ctx.stream, b->x_dev, b->x, sizeof(float) * (size_t)b->N * IN));
    FSDP_CHECK(fsdp_begin_forward(fs, 1));  // gathers the root unit (in_proj, head)
    nn_linear_forward(&ctx, &m->in_proj, b->h0, b->x_dev, b->N);
    const float *h = NULL;  // (N, D) the last block's output
    FSDP_CHECK(nn_sequential_forward(&ctx, &m->blocks, b->h0, b->B, SEQ, &h));  // gathers each layer in turn
    nn_linear_forward(&ctx, &m->head, b->y_dev, h, b->N);
    FSDP_CHECK(fsdp_dev_read(ctx.stream, b->y, b->y_dev, sizeof(float) * (size_t)b->N));
    double sum = 0.0;
    for (int i = 0; i < b->N; i++) {
        float err = b->y[i] - b->target[i];
        sum += (double)err * err;
        b->dy[i] = 2.0f * err / (float)b->N;
    }
    *loss = sum / b->N;
    FSDP_CHECK(fsdp_copy_h2d(ctx.stream, b->dy_dev, b->dy, sizeof(float) * (size_t)b->N));
    nn_linear_backward(&ctx, &m->head, b->dh, 0, b->dy_dev, h, b->N);
    FSDP_CHECK(nn_sequential_backward(&ctx, &m->blocks, b->dh, b->h0, b->dh0));  // reduce-scatters per layer
    nn_linear_backward(&ctx, &m->in_proj, NULL, 0, b->dh0, b->x_dev, b->N);
    return fsdp_end_backward(fs);  // reduce-scatters the root unit's gradients (averaged over ranks)
}

static fsdp_status train(fsdp_comm *world, int steps) {
    int R = fsdp_comm_rank(world), W = fsdp_comm_size(world);
    if (BATCH % W) return fsdp_error(FSDP_ERR_INVALID_ARG, "the batch of %d does not split over %d ranks", BATCH, W);
    token_regressor m;
    FSDP_CHECK(model_create(&m));
    fsdp_config cfg = fsdp_config_default();  // FULL_SHARD, transformer auto-wrap
    fsdp_model_desc desc = {&m.params, &m.blocks, "TransformerEncoderLayer", "blocks.%d.", 0};
    fsdp_state *fs = NULL;
    FSDP_CHECK(fsdp_wrap(&fs, desc, cfg, world));
    FSDP_CHECK(fsdp_init_params(fs, 42));
    fsdp_adamw_config opt = fsdp_adamw_defaults();
    opt.lr = 3e-3f;
    FSDP_CHECK(fsdp_optimizer_create(fs, fsdp_optimizer_adamw(opt)));
    if (R == 0) printf("%d ranks, %d FSDP units, %lld parameters on this rank\n", W, fsdp_unit_count(fs),
                       (long long)fsdp_local_numel(fs));

    batch b = {.B = BATCH / W, .N = BATCH / W * SEQ};
    size_t n = (size_t)b.N;
    fsdp_dev *dev = fsdp_state_device(fs);
    b.x = malloc(sizeof(float) * n * IN);
    b.target = malloc(sizeof(float) * n);
    b.y = malloc(sizeof(float) * n);
    b.dy = malloc(sizeof(float) * n);
    b.x_dev = fsdp_dev_alloc(dev, sizeof(float) * n * IN, FSDP_MEM_ACTIVATIONS);
    b.h0 = fsdp_dev_alloc(dev, sizeof(float) * n * D, FSDP_MEM_ACTIVATIONS);
    b.dh0 = fsdp_dev_alloc(dev, sizeof(float) * n * D, FSDP_MEM_ACTIVATIONS);
    b.y_dev = fsdp_dev_alloc(dev, sizeof(float) * n, FSDP_MEM_ACTIVATIONS);
    b.dy_dev = fsdp_dev_alloc(dev, sizeof(float) * n, FSDP_MEM_ACTIVATIONS);
    b.dh = fsdp_dev_alloc(dev, sizeof(float) * n * D, FSDP_MEM_ACTIVATIONS);
    fsdp_status st = b.x && b.target && b.y && b.dy && b.x_dev && b.h0 && b.dh0 && b.y_dev && b.dy_dev && b.dh
                         ? FSDP_OK
                         : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    for (int step = 0; step < steps && st == FSDP_OK; step++) {
        make_batch(&b, R * b.B, step);
        fsdp_zero_grad(fs);
        double loss = 0.0;
        st = train_micro_step(fs, &m, &b, step, &loss);
        if (st == FSDP_OK) st = fsdp_all_reduce_double(world, &loss);
        if (st != FSDP_OK) break;
        st = fsdp_optimizer_step(fs, opt.lr);
        if (st != FSDP_OK) break;
        if (R == 0) printf("step %d loss %.9g\n", step, loss / W);
    }
    free(b.x);
    free(b.target);
    free(b.y);
    free(b.dy);
    void *dev_bufs[] = {b.x_dev, b.h0, b.dh0, b.y_dev, b.dy_dev, b.dh};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++) fsdp_dev_free(dev, dev_bufs[i]);
    fsdp_free_state(fs);
    model_free(&m);
    return st;
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "custom_model: %s\n", fsdp_last_error());
        return 1;
    }
    char *end = NULL;
    long steps = argc > 1 ? strtol(argv[1], &end, 10) : 40;
    fsdp_status st = (argc > 1 && *end) || steps < 1 || steps > 1000000
                         ? fsdp_error(FSDP_ERR_INVALID_ARG, "steps: expected a whole number in [1, 1000000], got '%s'", argv[1])
                         : train(world, (int)steps);
    if (st != FSDP_OK) fprintf(stderr, "custom_model: rank %d: %s\n", fsdp_comm_rank(world), fsdp_last_error());
    fsdp_comm_free(world);
    return st == FSDP_OK ? 0 : 1;
}
