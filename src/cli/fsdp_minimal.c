// fsdp_minimal.c: the seed's "Minimal FSDP Setup" in C:
//   model = nn.Sequential(*[nn.TransformerEncoderLayer(d, h, ffn, dropout) for _ in range(L)])
//   opt = AdamW(model.parameters(), lr); x = randn(seq, batch, d)
//   for step in range(steps): zero_grad; loss = model(x).abs().mean(); loss.backward(); opt.step()
// One process for now. Prints "step K loss L" per step.
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "ckpt/state_dict.h"
#include "cli/cli_args.h"
#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "nn/encoder_stack.h"
#include "nn/loss.h"
#include "optim/optim.h"

typedef struct {
    int layers, d_model, heads, ffn, seq, batch, steps, seed, threads;
    float dropout, lr, weight_decay;
    const char *init_path, *input_path, *save_path, *dump_grads_path, *dump_output_path;
    int norm_first, activation, batch_first, causal;
} minimal_options;

static int fail(const char *msg) {
    fprintf(stderr, "fsdp-minimal: %s\n", msg);
    return 1;
}

// x: (seq, batch, d) or (batch, seq, d) when batch_first
static fsdp_status load_input(const minimal_options *o, float *x) {
    int64_t shape[3] = {o->batch_first ? o->batch : o->seq, o->batch_first ? o->seq : o->batch, o->d_model};
    if (!o->input_path) {
        fsdp_rng rng = {(uint64_t)o->seed, fsdp_hash_name("input.x")};
        fsdp_rng_normal(rng, 0, x, (size_t)(shape[0] * shape[1] * shape[2]), 0.0f, 1.0f);
        return FSDP_OK;
    }
    st_file *f = NULL;
    FSDP_CHECK(st_open(o->input_path, &f));
    fsdp_status s = st_read_f32(f, "x", x, 3, shape);
    st_close(f);
    return s;
}

int main(int argc, char **argv) {
    minimal_options o = {.layers = 4, .d_model = 128, .heads = 4, .ffn = 2048, .seq = 8, .batch = 16,
                         .steps = 5, .seed = 0, .threads = 0, .dropout = 0.1f, .lr = 1e-4f,
                         .weight_decay = 0.01f};
    cli_arg args[] = {
        {"--layers", ARG_INT, &o.layers, "number of TransformerEncoderLayers", 1, 1e6, NULL},
        {"--d-model", ARG_INT, &o.d_model, "model width (d_model)", 1, 1e6, NULL},
        {"--heads", ARG_INT, &o.heads, "attention heads (must divide d_model)", 1, 1e6, NULL},
        {"--ffn", ARG_INT, &o.ffn, "feed-forward width (dim_feedforward)", 1, 1e7, NULL},
        {"--dropout", ARG_FLOAT, &o.dropout, "dropout probability", 0, 0.999, NULL},
        {"--seq", ARG_INT, &o.seq, "sequence length", 1, 1e6, NULL},
        {"--batch", ARG_INT, &o.batch, "global batch size", 1, 1e6, NULL},
        {"--steps", ARG_INT, &o.steps, "optimizer steps", 0, 1e9, NULL},
        {"--lr", ARG_FLOAT, &o.lr, "AdamW learning rate", 0, 1e3, NULL},
        {"--weight-decay", ARG_FLOAT, &o.weight_decay, "AdamW weight decay", 0, 1e3, NULL},
        {"--seed", ARG_INT, &o.seed, "seed for init, input and dropout", 0, 2147483647, NULL},
        {"--init", ARG_STRING, &o.init_path, "initial weights (safetensors, PyTorch names)", 1, 0, NULL},
        {"--input", ARG_STRING, &o.input_path, "input (safetensors with tensor x [seq, batch, d_model])", 1, 0, NULL},
        {"--save", ARG_STRING, &o.save_path, "write the full state dict here after the last step", 1, 0, NULL},
        {"--norm-first", ARG_BOOL, &o.norm_first, "pre-LN layers (norm_first=True)", 1, 0, NULL},
        {"--activation", ARG_CHOICE, &o.activation, "FFN activation", 1, 0, "relu|gelu"},
        {"--batch-first", ARG_BOOL, &o.batch_first, "x is [batch, seq, d_model] (batch_first=True)", 1, 0, NULL},
        {"--causal", ARG_BOOL, &o.causal, "causal attention mask", 1, 0, NULL},
        {"--dump-grads", ARG_STRING, &o.dump_grads_path, "write the first step's parameter gradients here", 1, 0, NULL},
        {"--dump-output", ARG_STRING, &o.dump_output_path, "write the first step's model output (tensor y) here", 1, 0, NULL},
        {"--threads", ARG_INT, &o.threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", 0, 1024, NULL},
    };
    int parsed = cli_parse("fsdp-minimal",
                           "Trains nn.Sequential(TransformerEncoderLayer x L) on loss mean(|model(x)|) with AdamW.",
                           args, (int)(sizeof args / sizeof args[0]), argc, argv);
    if (parsed) return parsed > 0 ? 0 : 2;
    if (o.d_model % o.heads) {
        fprintf(stderr, "fsdp-minimal: --heads %d must divide --d-model %d\n", o.heads, o.d_model);
        return 2;
    }
    if (o.threads > 0) omp_set_num_threads(o.threads);
    fsdp_mem_init();
    const fsdp_kernels *k = fsdp_kernels_cpu();

    nn_block_config layer = nn_encoder_layer_defaults(o.d_model, o.heads);
    layer.d_ff = o.ffn;
    layer.dropout = layer.attn_dropout = o.dropout;
    layer.activation = o.activation ? NN_ACT_GELU : NN_ACT_RELU;
    layer.norm_first = o.norm_first;
    layer.batch_first = o.batch_first;
    layer.causal = o.causal;
    nn_encoder_stack model;
    if (nn_encoder_stack_create(&model, layer, o.layers) != FSDP_OK) return fail(fsdp_last_error());

    int64_t numel = nn_params_numel(&model.params);
    float *params = fsdp_alloc((size_t)numel * sizeof(float), FSDP_MEM_PARAMS);
    float *grads = fsdp_alloc((size_t)numel * sizeof(float), FSDP_MEM_GRADS);
    size_t N = (size_t)o.seq * o.batch, NC = N * (size_t)o.d_model;
    float *x = fsdp_alloc(NC * sizeof(float), FSDP_MEM_ACTIVATIONS);
    float *dy = fsdp_alloc(NC * sizeof(float), FSDP_MEM_ACTIVATIONS);
    if (!params || !grads || !x || !dy) return fail(fsdp_last_error());
    nn_params_bind_flat(&model.params, params, grads);
    if (o.init_path) {
        if (fsdp_load_params(o.init_path, &model.params, NULL) != FSDP_OK) return fail(fsdp_last_error());
    } else {
        for (int i = 0; i < model.params.count; i++) {
            nn_param *p = &model.params.items[i];
            nn_param_init_slice(p, (uint64_t)o.seed, 0, p->numel, p->data);
        }
    }
    if (load_input(&o, x) != FSDP_OK) return fail(fsdp_last_error());

    fsdp_adamw_config ac = fsdp_adamw_defaults();
    ac.lr = o.lr;
    ac.weight_decay = o.weight_decay;
    fsdp_adamw opt;
    if (fsdp_adamw_create(&opt, ac, numel) != FSDP_OK) return fail(fsdp_last_error());

    int B = o.batch, T = o.seq;
    for (int step = 0; step < o.steps; step++) {
        nn_ctx ctx = {.k = k, .training = 1, .seed = (uint64_t)o.seed, .step = (uint64_t)step};
        memset(grads, 0, (size_t)numel * sizeof(float));  // opt.zero_grad()
        const float *y = NULL;
        if (nn_sequential_forward(&ctx, &model.seq, x, B, T, &y) != FSDP_OK) return fail(fsdp_last_error());
        double loss = nn_abs_mean_forward(y, NC);
        if (step == 0 && o.dump_output_path) {
            int64_t shape[3] = {o.batch_first ? B : T, o.batch_first ? T : B, o.d_model};
            st_writer *w = st_writer_new(o.dump_output_path);
            if (!w || st_writer_add(w, "y", ST_F32, 3, shape, y) != FSDP_OK || st_writer_commit(w) != FSDP_OK)
                return fail(fsdp_last_error());
        }
        nn_abs_mean_backward(dy, y, NC, 1.0f);
        if (nn_sequential_backward(&ctx, &model.seq, dy, x, NULL) != FSDP_OK) return fail(fsdp_last_error());
        if (step == 0 && o.dump_grads_path &&
            fsdp_save_params(o.dump_grads_path, &model.params, FSDP_SAVE_GRADS) != FSDP_OK)
            return fail(fsdp_last_error());
        fsdp_adamw_begin_step(&opt);
        fsdp_adamw_update(k, &opt, o.lr, params, grads, 0, numel);
        printf("step %d loss %.9g\n", step, loss);
        fflush(stdout);
    }
    if (o.save_path && fsdp_save_params(o.save_path, &model.params, FSDP_SAVE_VALUES) != FSDP_OK)
        return fail(fsdp_last_error());
    fsdp_adamw_free(&opt);
    nn_encoder_stack_free(&model);
    fsdp_free(params);
    fsdp_free(grads);
    fsdp_free(x);
    fsdp_free(dy);
    return 0;
}
