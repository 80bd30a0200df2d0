// fsdp_train.c: trains the GPT-2 model (Hugging Face names and layouts) with FSDP on byte-level text,
// on fixed token tensors (--input), or on a built-in synthetic corpus. Runs as a plain process or
// under any MPI launcher; --batch is the global batch (rank r takes sequences [r*B/N, (r+1)*B/N)).
// Rank 0 prints "step K loss L lr X ms T tok/s S" per step.
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "comm/comm.h"
#include "cli/cli_args.h"
#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "fsdp/fsdp.h"
#include "nn/gpt2.h"
#include "optim/optim.h"

typedef struct {
    int layers, d_model, heads, vocab, seq, max_seq, batch, steps, seed, threads, warmup, strategy, summary;
    int backward_prefetch, forward_prefetch, limit_all_gathers;
    float lr, min_lr, weight_decay, dropout, clip;
    const char *data_path, *input_path, *init_path, *save_path, *dump_grads_path, *wrap;
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

// idx, targets: (nb, T): sequences [b0, b0 + nb) of the global batch of B at `step`: consecutive
// windows through the text, wrapping around
static void text_batch(const text_data *d, int step, int B, int b0, int nb, int T, int32_t *idx, int32_t *targets) {
    size_t span = d->len - (size_t)T - 1;
    for (int b = 0; b < nb; b++) {
        size_t start = ((size_t)step * B + b0 + b) * (size_t)T % span;
        for (int t = 0; t < T; t++) {
            idx[b * T + t] = d->bytes[start + t];
            targets[b * T + t] = d->bytes[start + t + 1];
        }
    }
}

// A learnable synthetic corpus: token t+1 = (5 * token t + c) mod V with per-sequence (start, c);
// sequences [b0, b0 + nb) of the global batch.
static void synthetic_batch(int seed, int step, int b0, int nb, int T, int V, int32_t *idx, int32_t *targets) {
    for (int b = 0; b < nb; b++) {
        fsdp_rng rng = {(uint64_t)seed, (uint64_t)step * 1000003u + (uint64_t)(b0 + b)};
        int tok = (int)(fsdp_rng_uniform_at(rng, 0) * V), c = 1 + (int)(fsdp_rng_uniform_at(rng, 1) * 7);
        for (int t = 0; t <= T; t++) {
            if (t < T) idx[b * T + t] = tok;
            if (t > 0) targets[b * T + t - 1] = tok;
            tok = (tok * 5 + c) % V;
        }
    }
}

static int parse_wrap(const char *text, fsdp_config *cfg) {
    if (strcmp(text, "transformer") == 0) cfg->wrap = FSDP_WRAP_TRANSFORMER;
    else if (strcmp(text, "none") == 0) cfg->wrap = FSDP_WRAP_NONE;
    else if (strncmp(text, "size:", 5) == 0) {
        char *end = NULL;
        long long n = strtoll(text + 5, &end, 10);
        if (!text[5] || *end || n < 0) return -1;
        cfg->wrap = FSDP_WRAP_SIZE;
        cfg->min_num_params = n;
    } else {
        return -1;
    }
    return 0;
}

static int run(train_options *o, fsdp_comm *world) {
    int N = fsdp_comm_size(world), R = fsdp_comm_rank(world);
    if (o->batch % N) {
        fprintf(stderr, "fsdp-train: --batch %d is not divisible by the world size %d\n", o->batch, N);
        return 2;
    }
    fsdp_config fcfg = fsdp_config_default();
    fcfg.strategy = (fsdp_strategy)o->strategy;
    fcfg.backward_prefetch = (fsdp_backward_prefetch)(o->backward_prefetch == 0 ? FSDP_PREFETCH_BACKWARD_PRE
                                                      : o->backward_prefetch == 1 ? FSDP_PREFETCH_BACKWARD_POST
                                                                                  : FSDP_PREFETCH_NONE);
    fcfg.forward_prefetch = o->forward_prefetch;
    fcfg.limit_all_gathers = o->limit_all_gathers;
    if (parse_wrap(o->wrap, &fcfg)) {
        fprintf(stderr, "fsdp-train: --wrap: expected transformer, size:N or none, got '%s'\n", o->wrap);
        return 2;
    }
    const fsdp_kernels *k = fsdp_kernels_cpu();
    nn_gpt2_config cfg = {o->vocab, o->max_seq, o->layers, o->heads, o->d_model, o->dropout, 1e-5f};
    nn_gpt2 model;
    if (nn_gpt2_create(&model, cfg) != FSDP_OK) return fail(fsdp_last_error());
    fsdp_model_desc desc = {&model.params, &model.blocks, "GPT2Block", "h.%d."};
    fsdp_state *fs = NULL;
    if (fsdp_wrap(&fs, desc, fcfg, world) != FSDP_OK) return fail(fsdp_last_error());
    fsdp_status st = o->init_path ? fsdp_load_params(fs, o->init_path, "transformer.")
                                  : fsdp_init_params(fs, (uint64_t)o->seed);
    if (st != FSDP_OK) return fail(fsdp_last_error());
    if (o->summary && R == 0) fsdp_print_summary(fs, stdout);
    int B = o->batch, T = o->seq, Bl = B / N, b0 = R * Bl;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)B * T), *targets = malloc(sizeof(int32_t) * (size_t)B * T);
    if (!idx || !targets) return fail("out of memory");
    text_data text = {0};
    if (o->input_path) {  // the global batch, of which this rank keeps rows [b0, b0 + Bl)
        st_file *f = NULL;
        int64_t shape[2] = {B, T};
        if (st_open(o->input_path, &f) != FSDP_OK) return fail(fsdp_last_error());
        st = st_read_i32(f, "idx", idx, 2, shape);
        if (st == FSDP_OK) st = st_read_i32(f, "targets", targets, 2, shape);
        st_close(f);
        if (st != FSDP_OK) return fail(fsdp_last_error());
        memmove(idx, idx + (size_t)b0 * T, sizeof(int32_t) * (size_t)Bl * T);
        memmove(targets, targets + (size_t)b0 * T, sizeof(int32_t) * (size_t)Bl * T);
    } else if (o->data_path && load_text(o->data_path, &text, T) != FSDP_OK) {
        return fail(fsdp_last_error());
    }
    fsdp_adamw_config ac = fsdp_adamw_defaults();
    ac.lr = o->lr;
    ac.weight_decay = o->weight_decay;
    if (fsdp_optimizer_create(fs, ac) != FSDP_OK) return fail(fsdp_last_error());
    if (R == 0)
        printf("gpt2: %d layers, d_model %d, %d heads, vocab %d, seq %d, batch %d, %lld parameters, %d rank(s) x %d "
               "threads, %s\n", o->layers, o->d_model, o->heads, o->vocab, T, B,
               (long long)nn_params_numel(&model.params), N, omp_get_max_threads(),
               fsdp_strategy_name(fcfg.strategy));
    double total_time = 0.0, total_comm = 0.0;
    for (int step = 0; step < o->steps; step++) {
        double t0 = fsdp_now_sec(), c0 = fsdp_exposed_comm_seconds(fs);
        if (!o->input_path) {
            if (text.bytes) text_batch(&text, step, B, b0, Bl, T, idx, targets);
            else synthetic_batch(o->seed, step, b0, Bl, T, o->vocab, idx, targets);
        }
        nn_ctx ctx = {.k = k, .training = 1, .seed = (uint64_t)o->seed, .step = (uint64_t)step};
        fsdp_zero_grad(fs);
        if (fsdp_begin_forward(fs, 1) != FSDP_OK || nn_gpt2_forward(&ctx, &model, idx, targets, Bl, T) != FSDP_OK ||
            nn_gpt2_backward(&ctx, &model, 1.0f) != FSDP_OK || fsdp_end_backward(fs) != FSDP_OK)
            return fail(fsdp_last_error());
        if (step == 0 && o->dump_grads_path && fsdp_save_full(fs, o->dump_grads_path, 1) != FSDP_OK)
            return fail(fsdp_last_error());
        double loss = model.loss;
        if (fsdp_all_reduce_double(world, &loss) != FSDP_OK) return fail(fsdp_last_error());
        loss /= N;
        if (o->clip > 0.0f) {
            double norm = 0.0;
            if (fsdp_grad_norm(fs, &norm) != FSDP_OK) return fail(fsdp_last_error());
            fsdp_scale_grads(fs, fsdp_clip_coefficient(norm, o->clip));
        }
        float lr = o->warmup > 0 ? fsdp_lr_warmup_cosine(step, o->lr, o->warmup, o->steps, o->min_lr) : o->lr;
        fsdp_optimizer_step(fs, lr);
        double dt = fsdp_now_sec() - t0, dc = fsdp_exposed_comm_seconds(fs) - c0;
        if (step > 0) {
            total_time += dt;
            total_comm += dc;
        }
        if (R == 0) {  // comm: share of the step rank 0 spent blocked in collectives
            printf("step %d loss %.9g lr %.3g ms %.1f tok/s %.0f comm %.1f%% peak_mem_mb %.1f\n", step, loss, (double)lr,
                   dt * 1e3, (double)B * T / dt, 100.0 * dc / dt, (double)fsdp_mem_peak_total() / 1048576.0);
            fflush(stdout);
        }
    }
    if (o->steps > 1 && R == 0)
        printf("mean (steps 1..%d): %.1f ms/step, %.0f tok/s, exposed comm %.1f%%, peak memory %.1f MiB (rss %.1f MiB)\n",
               o->steps - 1, total_time * 1e3 / (o->steps - 1), (double)B * T * (o->steps - 1) / total_time,
               100.0 * total_comm / total_time, (double)fsdp_mem_peak_total() / 1048576.0,
               (double)fsdp_mem_os_peak_rss() / 1048576.0);
    if (o->save_path && fsdp_save_full(fs, o->save_path, 0) != FSDP_OK) return fail(fsdp_last_error());
    fsdp_free_state(fs);
    nn_gpt2_free(&model);
    free(idx);
    free(targets);
    free(text.bytes);
    return 0;
}

int main(int argc, char **argv) {
    train_options o = {.layers = 6, .d_model = 512, .heads = 8, .vocab = 256, .seq = 256, .max_seq = 0,
                       .batch = 8, .steps = 20, .seed = 0, .threads = 0, .warmup = 0, .lr = 3e-4f,
                       .min_lr = 0.0f, .weight_decay = 0.01f, .dropout = 0.0f, .clip = 0.0f, .wrap = "transformer", .limit_all_gathers = 2};
    cli_arg args[] = {
        {"--layers", ARG_INT, &o.layers, "transformer blocks", 1, 1e5, NULL},
        {"--d-model", ARG_INT, &o.d_model, "model width", 1, 1e6, NULL},
        {"--heads", ARG_INT, &o.heads, "attention heads (must divide d_model)", 1, 1e5, NULL},
        {"--vocab", ARG_INT, &o.vocab, "vocabulary size (>= 256 for byte-level --data)", 2, 1e7, NULL},
        {"--seq", ARG_INT, &o.seq, "sequence length", 1, 1e6, NULL},
        {"--max-seq", ARG_INT, &o.max_seq, "position table size (0: --seq)", 0, 1e6, NULL},
        {"--batch", ARG_INT, &o.batch, "global batch size (sequences per step, split over ranks)", 1, 1e6, NULL},
        {"--steps", ARG_INT, &o.steps, "optimizer steps", 0, 1e9, NULL},
        {"--lr", ARG_FLOAT, &o.lr, "peak AdamW learning rate", 0, 1e3, NULL},
        {"--min-lr", ARG_FLOAT, &o.min_lr, "final learning rate of the cosine schedule", 0, 1e3, NULL},
        {"--warmup", ARG_INT, &o.warmup, "linear warmup steps (cosine decay to --min-lr after; 0 = constant lr)", 0, 1e9, NULL},
        {"--weight-decay", ARG_FLOAT, &o.weight_decay, "AdamW weight decay", 0, 1e3, NULL},
        {"--dropout", ARG_FLOAT, &o.dropout, "embedding/residual/attention dropout", 0, 0.999, NULL},
        {"--clip", ARG_FLOAT, &o.clip, "clip gradients to this global L2 norm (0: off)", 0, 1e9, NULL},
        {"--seed", ARG_INT, &o.seed, "seed for init, synthetic data and dropout", 0, 2147483647, NULL},
        {"--data", ARG_STRING, &o.data_path, "byte-level text file to train on", 1, 0, NULL},
        {"--input", ARG_STRING, &o.input_path, "fixed global batch: safetensors with idx and targets [batch, seq]", 1, 0, NULL},
        {"--init", ARG_STRING, &o.init_path, "initial weights (safetensors, Hugging Face GPT-2 names)", 1, 0, NULL},
        {"--save", ARG_STRING, &o.save_path, "write the weights here after the last step (rank 0)", 1, 0, NULL},
        {"--dump-grads", ARG_STRING, &o.dump_grads_path, "write the first step's gradients here", 1, 0, NULL},
        {"--strategy", ARG_CHOICE, &o.strategy, "FSDP sharding strategy", 1, 0,
         "full_shard|shard_grad_op|no_shard|hybrid_shard|ddp"},
        {"--backward-prefetch", ARG_CHOICE, &o.backward_prefetch, "issue the next unit's all-gather before (pre) or after (post) the current unit's backward", 1, 0, "pre|post|none"},
        {"--forward-prefetch", ARG_BOOL, &o.forward_prefetch, "issue the next unit's all-gather before the current unit's forward (order recorded in the first step)", 1, 0, NULL},
        {"--limit-all-gathers", ARG_INT, &o.limit_all_gathers, "at most this many units unsharded at once, prefetches included (0: no limit)", 0, 1e6, NULL},
        {"--wrap", ARG_STRING, &o.wrap, "auto-wrap policy: transformer, size:N or none", 1, 0, NULL},
        {"--summary", ARG_BOOL, &o.summary, "print the sharding layout", 1, 0, NULL},
        {"--threads", ARG_INT, &o.threads, "OpenMP threads per rank (0: OMP_NUM_THREADS or all cores)", 0, 1024, NULL},
    };
    int parsed = cli_parse("fsdp-train", "Trains a GPT-2 model with FSDP and AdamW.", args,
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
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return fail(fsdp_last_error());
    int rc = run(&o, world);
    fsdp_comm_free(world);
    return rc;
}
