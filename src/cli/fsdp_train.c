// fsdp_train.c: trains the GPT-2 model (Hugging Face names and layouts) on byte-level text, on
// fixed token tensors (--input), or on a built-in synthetic corpus. One process for now; the FSDP
// issue adds ranks. Prints "step K loss L lr X ms T tok/s S" per step.
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "ckpt/state_dict.h"
#include "cli/cli_args.h"
#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "nn/gpt2.h"
#include "optim/optim.h"

typedef struct {
    int layers, d_model, heads, vocab, seq, max_seq, batch, steps, seed, threads, warmup;
    float lr, min_lr, weight_decay, dropout, clip;
    const char *data_path, *input_path, *init_path, *save_path, *dump_grads_path;
} train_options;

typedef struct {
    unsigned char *bytes;  // (len,) the whole text file
    size_t len;
} text_data;

static int fail(const char *msg) {
    fprintf(stderr, "fsdp-train: %s\n", msg);
    return 1;
}

static fsdp_status load_text(const char *path, text_data *d, int T) {
    FILE *f = fopen(path, "rb");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot open data file: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < (long)T + 2) {
        fclose(f);
        return fsdp_error(FSDP_ERR_FORMAT, "%s: %ld bytes is too short for --seq %d", path, len, T);
    }
    d->bytes = malloc((size_t)len);
    d->len = (size_t)len;
    size_t got = d->bytes ? fread(d->bytes, 1, (size_t)len, f) : 0;
    fclose(f);
    return got == (size_t)len ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: read failed", path);
}

// idx, targets: (B, T) for `step`: consecutive windows through the text, wrapping around
static void text_batch(const text_data *d, int step, int B, int T, int32_t *idx, int32_t *targets) {
    size_t span = d->len - (size_t)T - 1;
    for (int b = 0; b < B; b++) {
        size_t start = ((size_t)step * B + b) * (size_t)T % span;
        for (int t = 0; t < T; t++) {
            idx[b * T + t] = d->bytes[start + t];
            targets[b * T + t] = d->bytes[start + t + 1];
        }
    }
}

// A learnable synthetic corpus: token t+1 = (a * token t + c) mod V with per-sequence (a, c).
static void synthetic_batch(int seed, int step, int B, int T, int V, int32_t *idx, int32_t *targets) {
    for (int b = 0; b < B; b++) {
        fsdp_rng rng = {(uint64_t)seed, (uint64_t)step * 1000003u + (uint64_t)b};
        int tok = (int)(fsdp_rng_uniform_at(rng, 0) * V), c = 1 + (int)(fsdp_rng_uniform_at(rng, 1) * 7);
        for (int t = 0; t <= T; t++) {
            if (t < T) idx[b * T + t] = tok;
            if (t > 0) targets[b * T + t - 1] = tok;
            tok = (tok * 5 + c) % V;
        }
    }
}

int main(int argc, char **argv) {
    train_options o = {.layers = 6, .d_model = 512, .heads = 8, .vocab = 256, .seq = 256, .max_seq = 0,
                       .batch = 8, .steps = 20, .seed = 0, .threads = 0, .warmup = 0, .lr = 3e-4f,
                       .min_lr = 0.0f, .weight_decay = 0.01f, .dropout = 0.0f, .clip = 0.0f};
    cli_arg args[] = {
        {"--layers", ARG_INT, &o.layers, "transformer blocks", 1, 1e5, NULL},
        {"--d-model", ARG_INT, &o.d_model, "model width", 1, 1e6, NULL},
        {"--heads", ARG_INT, &o.heads, "attention heads (must divide d_model)", 1, 1e5, NULL},
        {"--vocab", ARG_INT, &o.vocab, "vocabulary size (>= 256 for byte-level --data)", 2, 1e7, NULL},
        {"--seq", ARG_INT, &o.seq, "sequence length", 1, 1e6, NULL},
        {"--max-seq", ARG_INT, &o.max_seq, "position table size (0: --seq)", 0, 1e6, NULL},
        {"--batch", ARG_INT, &o.batch, "batch size (sequences per step)", 1, 1e6, NULL},
        {"--steps", ARG_INT, &o.steps, "optimizer steps", 0, 1e9, NULL},
        {"--lr", ARG_FLOAT, &o.lr, "peak AdamW learning rate", 0, 1e3, NULL},
        {"--min-lr", ARG_FLOAT, &o.min_lr, "final learning rate of the cosine schedule", 0, 1e3, NULL},
        {"--warmup", ARG_INT, &o.warmup, "linear warmup steps (cosine decay to --min-lr after; 0 = constant lr)", 0, 1e9, NULL},
        {"--weight-decay", ARG_FLOAT, &o.weight_decay, "AdamW weight decay", 0, 1e3, NULL},
        {"--dropout", ARG_FLOAT, &o.dropout, "embedding/residual/attention dropout", 0, 0.999, NULL},
        {"--clip", ARG_FLOAT, &o.clip, "clip gradients to this global L2 norm (0: off)", 0, 1e9, NULL},
        {"--seed", ARG_INT, &o.seed, "seed for init, synthetic data and dropout", 0, 2147483647, NULL},
        {"--data", ARG_STRING, &o.data_path, "byte-level text file to train on", 1, 0, NULL},
        {"--input", ARG_STRING, &o.input_path, "fixed batch: safetensors with idx and targets [batch, seq]", 1, 0, NULL},
        {"--init", ARG_STRING, &o.init_path, "initial weights (safetensors, Hugging Face GPT-2 names)", 1, 0, NULL},
        {"--save", ARG_STRING, &o.save_path, "write the weights here after the last step", 1, 0, NULL},
        {"--dump-grads", ARG_STRING, &o.dump_grads_path, "write the first step's gradients here", 1, 0, NULL},
        {"--threads", ARG_INT, &o.threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", 0, 1024, NULL},
    };
    int parsed = cli_parse("fsdp-train", "Trains a GPT-2 model with AdamW (one process).", args,
                           (int)(sizeof args / sizeof args[0]), argc, argv);
    if (parsed) return parsed > 0 ? 0 : 2;
    if (o.d_model % o.heads) {
        fprintf(stderr, "fsdp-train: --heads %d must divide --d-model %d\n", o.heads, o.d_model);
        return 2;
    }
    if (o.data_path && o.vocab < 256) {
        fprintf(stderr, "fsdp-train: --vocab %d: byte-level --data needs at least 256\n", o.vocab);
        return 2;
    }
    if (o.max_seq == 0) o.max_seq = o.seq;
    if (o.max_seq < o.seq) {
        fprintf(stderr, "fsdp-train: --max-seq %d is smaller than --seq %d\n", o.max_seq, o.seq);
        return 2;
    }
    if (o.threads > 0) omp_set_num_threads(o.threads);
    fsdp_mem_init();
    const fsdp_kernels *k = fsdp_kernels_cpu();

    nn_gpt2_config cfg = {o.vocab, o.max_seq, o.layers, o.heads, o.d_model, o.dropout, 1e-5f};
    nn_gpt2 model;
    if (nn_gpt2_create(&model, cfg) != FSDP_OK) return fail(fsdp_last_error());
    int64_t numel = nn_params_numel(&model.params);
    float *params = fsdp_alloc((size_t)numel * sizeof(float), FSDP_MEM_PARAMS);
    float *grads = fsdp_alloc((size_t)numel * sizeof(float), FSDP_MEM_GRADS);
    int B = o.batch, T = o.seq;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)B * T), *targets = malloc(sizeof(int32_t) * (size_t)B * T);
    if (!params || !grads || !idx || !targets) return fail("out of memory");
    nn_params_bind_flat(&model.params, params, grads);
    if (o.init_path) {
        if (nn_params_load(o.init_path, &model.params, "transformer.") != FSDP_OK) return fail(fsdp_last_error());
    } else {
        for (int i = 0; i < model.params.count; i++) {
            nn_param *p = &model.params.items[i];
            nn_param_init_slice(p, (uint64_t)o.seed, 0, p->numel, p->data);
        }
    }
    text_data text = {0};
    if (o.input_path) {
        st_file *f = NULL;
        int64_t shape[2] = {B, T};
        if (st_open(o.input_path, &f) != FSDP_OK) return fail(fsdp_last_error());
        fsdp_status s = st_read_i32(f, "idx", idx, 2, shape);
        if (s == FSDP_OK) s = st_read_i32(f, "targets", targets, 2, shape);
        st_close(f);
        if (s != FSDP_OK) return fail(fsdp_last_error());
    } else if (o.data_path && load_text(o.data_path, &text, T) != FSDP_OK) {
        return fail(fsdp_last_error());
    }

    fsdp_adamw_config ac = fsdp_adamw_defaults();
    ac.lr = o.lr;
    ac.weight_decay = o.weight_decay;
    fsdp_adamw opt;
    if (fsdp_adamw_create(&opt, ac, numel) != FSDP_OK) return fail(fsdp_last_error());
    printf("gpt2: %d layers, d_model %d, %d heads, vocab %d, seq %d, batch %d, %lld parameters, %d threads\n",
           o.layers, o.d_model, o.heads, o.vocab, T, B, (long long)numel, omp_get_max_threads());
    double total_time = 0.0;
    for (int step = 0; step < o.steps; step++) {
        double t0 = fsdp_now_sec();
        if (!o.input_path) {
            if (text.bytes) text_batch(&text, step, B, T, idx, targets);
            else synthetic_batch(o.seed, step, B, T, o.vocab, idx, targets);
        }
        nn_ctx ctx = {.k = k, .training = 1, .seed = (uint64_t)o.seed, .step = (uint64_t)step};
        memset(grads, 0, (size_t)numel * sizeof(float));
        if (nn_gpt2_forward(&ctx, &model, idx, targets, B, T) != FSDP_OK) return fail(fsdp_last_error());
        if (nn_gpt2_backward(&ctx, &model, 1.0f) != FSDP_OK) return fail(fsdp_last_error());
        if (step == 0 && o.dump_grads_path &&
            nn_params_save(o.dump_grads_path, &model.params, FSDP_SAVE_GRADS) != FSDP_OK)
            return fail(fsdp_last_error());
        if (o.clip > 0.0f) {
            double norm = sqrt(k->sum_squares(grads, (size_t)numel));
            k->scale(grads, fsdp_clip_coefficient(norm, o.clip), (size_t)numel);
        }
        float lr = o.warmup > 0 ? fsdp_lr_warmup_cosine(step, o.lr, o.warmup, o.steps, o.min_lr) : o.lr;
        fsdp_adamw_begin_step(&opt);
        fsdp_adamw_update(k, &opt, lr, params, grads, 0, numel);
        double dt = fsdp_now_sec() - t0;
        if (step > 0) total_time += dt;
        printf("step %d loss %.9g lr %.3g ms %.1f tok/s %.0f\n", step, model.loss, (double)lr, dt * 1e3,
               (double)B * T / dt);
        fflush(stdout);
    }
    if (o.steps > 1)
        printf("mean (steps 1..%d): %.1f ms/step, %.0f tok/s\n", o.steps - 1, total_time * 1e3 / (o.steps - 1),
               (double)B * T * (o.steps - 1) / total_time);
    if (o.save_path && nn_params_save(o.save_path, &model.params, FSDP_SAVE_VALUES) != FSDP_OK)
        return fail(fsdp_last_error());
    fsdp_adamw_free(&opt);
    nn_gpt2_free(&model);
    fsdp_free(params);
    fsdp_free(grads);
    free(idx);
    free(targets);
    free(text.bytes);
    return 0;
}
