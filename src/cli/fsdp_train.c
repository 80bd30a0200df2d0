// fsdp_train.c: the language-model trainer. Trains a GPT-2 or Llama-family model (Hugging Face names
// and layouts; nn/causal_lm.h) with FSDP across MPI ranks (or as a plain process) on byte-level text, llm.c .bin token files, or a
// built-in corpus. --batch is the per-rank micro-batch: a step sees world x grad-accum x batch
// sequences (--global-batch sets that product), in the order fsdp_data_batch documents. Rank 0 prints a
// banner and a progress line per step; --log-jsonl, --plot, --max-new-tokens, --eval-every add records,
// a loss curve, generated text, validation. --eval-only evaluates and/or generates from --init or
// --resume without training (train_sample.c).
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/safetensors.h"
#include "cli/cli_args.h"
#include "cli/cli_threads.h"
#include "cli/fsdp_flags.h"
#include "cli/memory_check.h"
#include "cli/model_config.h"
#include "cli/output_paths.h"
#include "cli/train_arch.h"
#include "cli/train_ckpt.h"
#include "cli/train_lineage.h"
#include "cli/train_flags.h"
#include "cli/train_hf.h"
#include "cli/train_log.h"
#include "cli/train_loop.h"
#include "cli/train_sample.h"
#include "comm/comm.h"
#include "core/alloc.h"
#include "core/fault_inject.h"
#include "core/timer.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "fsdp/fsdp.h"
#include "kernels/kernels.h"
#include "nn/causal_lm.h"
#include "prof/trace.h"
#include "core/tunables.h"
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#define EVAL_HOLDOUT_PERCENT 10  // --eval-every without --val-data validates on this last part of --data


// The watchdog: a collective blocked for longer than the timeout (a rank died, or the ranks run
// different collective sequences) aborts this rank with a message naming it; the launcher then ends
// the others.
static int watchdog_timeout, watchdog_rank;
static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        sleep(1);
        const char *name = NULL;
        double since = 0.0;
        fsdp_comm_current(&name, &since);
        if (since > 0.0 && fsdp_now_sec() - since > watchdog_timeout) {
            fprintf(stderr, "fsdp-train: rank %d: collective %s has not completed in %d s (a rank died or the ranks "
                    "run different collectives; FSDP_DEBUG=DETAIL checks the sequence); aborting\n",
                    watchdog_rank, name ? name : "?", watchdog_timeout);
            fsdp_comm_abort_device();  // a device transport's collectives in flight (NCCL: ncclCommAbort)
            _exit(3);
        }
    }
    return NULL;
}

// FSDP_TEST_NAN_SHARD's fault: the first element of this rank's gradient shard becomes NaN.
static fsdp_status poison_grad_shard(fsdp_state *fs) {
    const float nan_value = NAN;
    for (int i = 0; i < fsdp_named_param_count(fs); i++) {
        fsdp_named_param p = fsdp_named_param_at(fs, i);
        if (p.shard_numel > 0 && p.shard_grad)
            return fsdp_copy_h2d(fsdp_dev_stream(fsdp_state_device(fs), FSDP_STREAM_COMPUTE), p.shard_grad, &nan_value,
                                 sizeof nan_value);
    }
    return FSDP_OK;
}

// The mean loss of the model's last forward (a device scalar), read for the log.
static fsdp_status read_loss(const nn_ctx *ctx, const nn_lm *model, double *loss) {
    return fsdp_dev_read(ctx->stream, loss, nn_lm_loss(model), sizeof *loss);
}

// --save: the weights, or with adapters what train_lora_save writes.
static fsdp_status save_weights(const train_options *o, fsdp_state *fs, const nn_lm *model, int rank) {
    if (o->lora.rank > 0) return train_lora_save("fsdp-train", &o->lora, fs, model, o->training.save_path, rank);
    return train_hf_save_weights("fsdp-train", o, fs, rank);
}

static int fail(const char *msg) {
    fprintf(stderr, "fsdp-train: %s\n", msg);
    return 1;
}

// --tokenizer: opens it (every rank reads the files) into *tok, and gives the model its vocabulary
// unless --vocab (or an --init/--resume file's configuration) set one; a smaller one is refused.
// Returns 0, or 2 after rank 0 printed one line.
static int open_tokenizer(train_options *o, int R, fsdp_tokenizer **tok) {
    *tok = NULL;
    if (!o->tokenizer_dir) return 0;
    if (fsdp_tokenizer_open(o->tokenizer_dir, tok) != FSDP_OK) {
        if (R == 0) fprintf(stderr, "fsdp-train: --tokenizer: %s\n", fsdp_last_error());
        return 2;
    }
    const cli_model_config *c = &o->config;
    int n = fsdp_tokenizer_vocab(*tok);
    if (!cli_given(c->args, c->nargs, c->argc, c->argv, "--vocab"))  // --init's wte may hold more rows
        o->vocab = o->training.init_path && o->vocab > n ? o->vocab : n;
    if (o->vocab < n) {
        if (R == 0)
            fprintf(stderr, "fsdp-train: --vocab %d is smaller than --tokenizer %s's %d token ids\n", o->vocab,
                    o->tokenizer_dir, n);
        fsdp_tokenizer_free(*tok);
        *tok = NULL;
        return 2;
    }
    o->gen.tokenizer = *tok;
    return 0;
}

// --tokenizer with a text *path (not .bin): rank 0 encodes it into its token cache (or finds it up to
// date), then every rank takes the cache's path (cache: (cap,)) as *path. flag names the flag for
// messages. Collective. Returns 0, or 2 after rank 0 printed one line.
static int tokenize_data(const fsdp_tokenizer *tok, const char *dir, const char **path, char *cache, size_t cap,
                         const char *flag, fsdp_comm *world) {
    size_t n = *path ? strlen(*path) : 0;
    if (!tok || !*path || (n >= 4 && strcmp(*path + n - 4, ".bin") == 0)) return 0;
    int R = fsdp_comm_rank(world), reused = 0;
    size_t count = 0;
    double bad = 0.0;
    if (R == 0) {
        if (fsdp_tokenizer_cache_file(tok, *path, cache, cap, &reused, &count) != FSDP_OK) {
            fprintf(stderr, "fsdp-train: %s: %s\n", flag, fsdp_last_error());
            bad = 1.0;
        } else {
            printf("fsdp-train: tokenized %s with %s: %zu tokens %s%s%s\n", *path, dir, count, reused ? "(cached " : "-> ",
                   cache, reused ? ")" : "");
            fflush(stdout);
        }
    }
    if (fsdp_all_reduce_double(world, &bad) != FSDP_OK || bad > 0.0) return 2;
    if (R != 0 && fsdp_tokenizer_cache_file(tok, *path, cache, cap, &reused, &count) != FSDP_OK) {
        fprintf(stderr, "fsdp-train: %s: rank %d: %s\n", flag, R, fsdp_last_error());
        return 2;
    }
    *path = cache;
    return 0;
}

static int run_with(train_options *o, fsdp_comm *world, const fsdp_tokenizer *tok);

static int run(train_options *o, fsdp_comm *world) {
    int R = fsdp_comm_rank(world);
    const cli_model_config *c = &o->config;
    if (o->eval_only && train_eval_only_check("fsdp-train", c->args, c->nargs, c->argc, c->argv, &o->fsdp.ckpt,
                                              o->training.init_path, o->training.grad_accum, o->eval_batches, o->gen.max_new_tokens, R))
        return 2;
    fsdp_tokenizer *tok = NULL;
    if (open_tokenizer(o, R, &tok)) return 2;
    int rc = run_with(o, world, tok);
    cli_ckpt_close(&o->fsdp.ckpt);
    fsdp_tokenizer_free(tok);
    return rc;
}

// The checks made before anything is built: the sampling and FSDP flags, the batch, the evaluation
// flags, the memory the run needs, --ckpt-dir (created, locked and its lineage decided; released by
// run's cli_ckpt_close), the output paths, the FSDP configuration (*fcfg) and --input's limits. Returns
// 0, or 2 after a one-line error.
static int prepare_run(train_options *o, fsdp_comm *world, fsdp_config *fcfg) {
    int N = fsdp_comm_size(world), R = fsdp_comm_rank(world);
    const cli_model_config *c = &o->config;
    if (train_sample_check("fsdp-train", &o->gen, o->vocab, c->args, c->nargs, c->argc, c->argv, R)) return 2;
    if (cli_fsdp_check_flags("fsdp-train", &o->fsdp, R)) return 2;
    if (cli_training_optimizer("fsdp-train", &o->training, &o->fsdp, c->args, c->nargs, c->argc, c->argv, R,
                               &o->training.optimizer_config))
        return 2;
    if (cli_training_resolve_batch("fsdp-train", &o->training, &o->fsdp, c->args, c->nargs, c->argc, c->argv, N,
                                   R == 0))
        return 2;
    if (o->eval_every > 0 && o->eval_batches == 0) {
        if (R == 0) fprintf(stderr, "fsdp-train: --eval-batches 0 with --eval-every evaluates nothing\n");
        return 2;
    }
    if (o->val_path && o->eval_every == 0 && !o->eval_only) {
        if (R == 0) fprintf(stderr, "fsdp-train: --val-data needs --eval-every (without it nothing is evaluated)\n");
        return 2;
    }
    if (cli_memory_check_train(o, world)) return 2;  // before anything is built or written
    if (cli_ckpt_open("fsdp-train", &o->fsdp.ckpt, !o->eval_only, world)) return 2;
    const cli_output_path outputs[] = {
        {"--ckpt-dir", o->eval_only ? NULL : o->fsdp.ckpt.dir, CLI_OUT_DIR_CREATE},  // --eval-only: only read
        {"--offload-dir", o->fsdp.offload_dir, CLI_OUT_DIR_EVERY_RANK},
        {"--save", o->training.save_path, train_hf_save_kind(o->training.save_path)},
        {"--dump-grads", o->training.dump_grads_path, CLI_OUT_FILE},
        {"--log-jsonl", o->jsonl_path, CLI_OUT_FILE}, {"--trace", o->trace_path, CLI_OUT_FILE},
        {"--plot", o->plot_path, CLI_OUT_FILE}};
    if (cli_check_output_paths("fsdp-train", outputs, (int)(sizeof outputs / sizeof *outputs), world)) return 2;
    if (cli_fsdp_config("fsdp-train", &o->fsdp, fcfg)) return 2;
    if (o->input_path && o->training.grad_accum != 1) {
        fprintf(stderr, "fsdp-train: --input holds one fixed batch: it needs --grad-accum 1\n");
        return 2;
    }
    if (o->input_path && o->eval_every > 0 && !o->val_path) {
        fprintf(stderr, "fsdp-train: --eval-every with --input needs --val-data (there is no training stream)\n");
        return 2;
    }
    return 0;
}

// A run's data, model, state and buffers: the context of the step loop's hooks (train_loop.h). Released
// by release_run.
typedef struct {
    train_options *o;
    fsdp_comm *world;
    fsdp_data *data, *val;  // training and validation data (either may be NULL; val may be a split of data)
    nn_lm model;
    fsdp_state *fs;
    int B, T, M;              // per-rank micro-batch, sequence length, micro-steps per step
    int64_t tokens_per_step;  // N x M x B x T
    int32_t *idx, *targets;   // (N * B, T) token ids and next-token targets (rows [0, B) in use)
    train_log log;
    int start_step;
    double t_start;                          // when the first step started (the log's ETA)
    char data_cache[4096], val_cache[4096];  // --tokenizer: the token caches of text --data and --val-data
} train_run;

// Opens --data and --val-data (tokenized first with --tokenizer), or holds out --data's tail for
// validation, and checks that the vocabulary covers them. Returns 0, 2 after a one-line flag error, or
// 1 after printing the failure.
static int open_data(train_run *r, const fsdp_tokenizer *tok) {
    train_options *o = r->o;
    int R = fsdp_comm_rank(r->world);
    // --eval-only evaluates (unless --eval-batches 0) and reads --data only for its held-out split
    int evaluating = o->eval_only ? o->eval_batches > 0 : o->eval_every > 0;
    if (tokenize_data(tok, o->tokenizer_dir, &o->data_path, r->data_cache, sizeof r->data_cache, "--data", r->world) ||
        tokenize_data(tok, o->tokenizer_dir, &o->val_path, r->val_cache, sizeof r->val_cache, "--val-data", r->world))
        return 2;
    if (!o->input_path && (!o->eval_only || (evaluating && !o->val_path)) &&
        fsdp_data_open(o->data_path, o->seq, &r->data) != FSDP_OK)
        return fail(fsdp_last_error());
    if (o->val_path && fsdp_data_open(o->val_path, o->seq, &r->val) != FSDP_OK) return fail(fsdp_last_error());
    // no --val-data: hold out the training data's last 10% (training never sees it), as nanoGPT's split
    if (evaluating && !r->val && fsdp_data_split_tail(r->data, EVAL_HOLDOUT_PERCENT, o->seq, &r->val) != FSDP_OK) {
        if (R == 0) fprintf(stderr, "fsdp-train: --eval-every without --val-data: %s; pass --val-data\n", fsdp_last_error());
        return 2;
    }
    const fsdp_data *streams[2] = {r->data, r->val};  // training and validation data (either may be NULL)
    for (int i = 0; i < 2; i++) {
        int data_vocab = streams[i] ? fsdp_data_vocab(streams[i]) : 0;
        if (data_vocab > o->vocab) {
            fprintf(stderr, "fsdp-train: --vocab %d is smaller than the data's %d token ids (%s)\n", o->vocab,
                    data_vocab, fsdp_data_name(streams[i]));
            return 2;
        }
    }
    return 0;
}

// Creates the model (with LoRA adapters when asked), checks the room the saves need, wraps it and fills
// its shards (--init, --lora-init), and records the configuration for the files written. Returns 0, 2
// after a one-line flag error, or 1 after printing the failure.
static int build_model(train_run *r, fsdp_config fcfg) {
    train_options *o = r->o;
    int R = fsdp_comm_rank(r->world);
    fsdp_status created;
    if (o->arch == 1) {
        nn_llama_config cfg;
        if (train_arch_llama_config("fsdp-train", o, &cfg)) return 2;
        created = nn_lm_create_llama(&r->model, cfg);
    } else {
        nn_gpt2_config cfg = {o->vocab, o->max_seq, o->layers, o->heads, o->d_model, o->dropout, 1e-5f};
        created = nn_lm_create_gpt2(&r->model, cfg);
    }
    if (created != FSDP_OK) return fail(fsdp_last_error());
    const cli_model_config *mc = &o->config;
    if (train_lora_check("fsdp-train", &o->lora, cli_given(mc->args, mc->nargs, mc->argc, mc->argv, "--lora-alpha"),
                         cli_given(mc->args, mc->nargs, mc->argc, mc->argv, "--lora-dropout"),
                         cli_given(mc->args, mc->nargs, mc->argc, mc->argv, "--lora-targets"), o->training.save_path,
                         R) ||
        train_lora_attach("fsdp-train", &o->lora, &r->model, NULL, R))
        return 2;
    // room for what the saves will write, before the model is built and trained
    if (cli_check_save_space("fsdp-train", nn_lm_params(&r->model), o->eval_only ? NULL : &o->fsdp.ckpt,
                             o->training.save_path, o->training.steps, r->world))
        return 2;
    fsdp_model_desc desc = {nn_lm_params(&r->model), nn_lm_blocks(&r->model), nn_lm_block_type(&r->model),
                            nn_lm_block_prefix(&r->model), nn_lm_conv1d(&r->model)};
    const char *alt_prefix = nn_lm_hf_prefix(&r->model);
    int rc = cli_fsdp_build("fsdp-train", &o->fsdp, desc, fcfg, r->world, (uint64_t)o->training.seed,
                            o->training.init_path, alt_prefix[0] ? alt_prefix : NULL, &r->fs);
    if (rc) return rc;
    if (train_lora_load(&o->lora, &r->model, r->fs) != FSDP_OK) return fail(fsdp_last_error());
    if (cli_config_to_state(&o->config, r->fs)) return 1;
    return 0;
}

// The watchdog thread (--collective-timeout), on more than one rank.
static void start_watchdog(const train_options *o, int N, int R) {
    if (o->collective_timeout <= 0 || N <= 1) return;
    pthread_t tid;
    watchdog_timeout = o->collective_timeout;
    watchdog_rank = R;
    if (pthread_create(&tid, NULL, watchdog, NULL) == 0) pthread_detach(tid);
}

// Rank 0's banner: the model, the ranks and threads, the precision, the batch and data, the memory per
// rank, and the resolved flags (with --summary, the sharding layout).
static void print_banner(const train_run *r, fsdp_config fcfg) {
    const train_options *o = r->o;
    int N = fsdp_comm_size(r->world), B = r->B, T = r->T, M = r->M;
    const fsdp_kernels *k = fsdp_compute_kernels(r->fs);  // bf16 products under --mixed-precision bf16
    int64_t numel = nn_params_numel(nn_lm_params_const(&r->model)), local = fsdp_local_numel(r->fs);
    int64_t trainable = fsdp_local_grad_numel(r->fs);
    if (o->arch == 1)
        printf("fsdp-train: Llama %d layers, d_model %d, %d heads (%d key/value, width %d), MLP %d, vocab %d, seq %d%s: "
               "%.2fM parameters\n", o->layers, o->d_model, o->heads, o->kv_heads, o->head_dim, o->d_ff, o->vocab, T,
               o->tie_embeddings ? ", tied head" : "", numel / 1e6);
    else
        printf("fsdp-train: GPT-2 %d layers, d_model %d, %d heads, vocab %d, seq %d: %.2fM parameters\n", o->layers,
               o->d_model, o->heads, o->vocab, T, numel / 1e6);
    printf("  %d rank(s) x %d thread(s), %s, %d units (%s), backend %s, precision %s (reduce %s, kernels %s)\n", N,
           omp_get_max_threads(), fsdp_strategy_name(fcfg.strategy), fsdp_unit_count(r->fs), o->fsdp.wrap,
           fsdp_comm_backend(fsdp_shard_comm(r->fs)), fsdp_dtype_name(fcfg.param_dtype),
           fcfg.deterministic ? "exact" : fsdp_dtype_name(fcfg.reduce_dtype), k->name);
    if (fcfg.deterministic)
        printf("  deterministic: %d chunks of %d sequences per step, %d per rank (docs/deterministic.md)\n",
               fcfg.det_chunks, B, M);
    char threads_line[160];
    printf("  %s\n", fsdp_threads_describe(&o->thread_choice, threads_line, sizeof threads_line));
    if (o->eval_only)
        printf("  eval only (no training): batch %d per rank x %d ranks\n", B, N);
    else
        printf("  batch %d per rank x %d micro-steps x %d ranks = %lld tokens/step; data: %s\n", B, M, N,
               (long long)r->tokens_per_step, o->input_path ? o->input_path : fsdp_data_name(r->data));
    if (r->val && !o->eval_only)
        printf("  validation: %d batches of %s every %d steps and after the last\n", o->eval_batches,
               fsdp_data_name(r->val), o->eval_every);
    if (trainable == local)
        printf("  memory per rank: %.1f MiB params+grads+AdamW (16 B x %lld shard elements)\n",
               16.0 * (double)local / 1048576.0, (long long)local);
    else  // frozen parameters: a shard only
        printf("  memory per rank: %.1f MiB params+grads+AdamW (16 B x %lld trainable + 4 B x %lld frozen shard "
               "elements)\n", (4.0 * (double)local + 12.0 * (double)trainable) / 1048576.0, (long long)trainable,
               (long long)(local - trainable));
    const fsdp_muon_config *mc = &o->training.optimizer_config.muon;
    if (o->training.optimizer_config.kind == FSDP_OPTIM_MUON && !o->eval_only)
        printf("  optimizer: Muon on the blocks' 2-D weights (lr %g, momentum %g, nesterov %s, %d NS steps, wd %g), "
               "AdamW on the rest; the line above counts AdamW's moments for every element, --summary Muon's state\n",
               (double)mc->lr, (double)mc->momentum, mc->nesterov ? "on" : "off", mc->ns_steps,
               (double)mc->weight_decay);
    cli_config_print(&o->config, stdout);  // the resolved flags, as they could be typed again
    if (o->fsdp.summary) fsdp_print_summary(r->fs, stdout);
    fflush(stdout);
}

// --input: one fixed global batch [N*B, T]; this rank keeps rows [R*B, (R+1)*B) in r->idx, r->targets.
static fsdp_status load_fixed_batch(train_run *r) {
    int N = fsdp_comm_size(r->world), R = fsdp_comm_rank(r->world), B = r->B, T = r->T;
    st_file *f = NULL;
    int64_t shape[2] = {(int64_t)N * B, T};
    FSDP_CHECK(st_open(r->o->input_path, &f));
    fsdp_status st = st_read_i32(f, "idx", r->idx, 2, shape);
    if (st == FSDP_OK) st = st_read_i32(f, "targets", r->targets, 2, shape);
    st_close(f);
    if (st != FSDP_OK) return st;
    memmove(r->idx, r->idx + (size_t)R * B * T, sizeof(int32_t) * (size_t)B * T);
    memmove(r->targets, r->targets + (size_t)R * B * T, sizeof(int32_t) * (size_t)B * T);
    return FSDP_OK;
}

// The step loop's micro-step (train_loop.h): this rank's micro-batch m of the step (or --input's fixed
// batch), forward with the loss, backward, and the loss read for the log. FSDP_TEST_NAN_GRAD scales the
// step's loss gradients by NaN; FSDP_TEST_NAN_SHARD poisons the gradient shard after the last backward.
static fsdp_status micro_step(void *tool, int step, int m, uint64_t micro_id, int sync, float grad_scale,
                              double *loss) {
    train_run *r = tool;
    const train_options *o = r->o;
    int N = fsdp_comm_size(r->world), R = fsdp_comm_rank(r->world);
    if (fsdp_fault_at_step(FSDP_ENV_TEST_NAN_GRAD, step, R)) grad_scale = NAN;
    if (!o->input_path) fsdp_data_batch(r->data, step, m, r->M, R, N, r->B, r->T, r->idx, r->targets);
    nn_ctx ctx = fsdp_model_ctx(r->fs, 1, (uint64_t)o->training.seed, micro_id);
    FSDP_CHECK(fsdp_begin_forward(r->fs, sync));
    FSDP_CHECK(nn_lm_forward(&ctx, &r->model, r->idx, r->targets, r->B, r->T));
    FSDP_CHECK(nn_lm_backward(&ctx, &r->model, grad_scale));
    FSDP_CHECK(fsdp_end_backward(r->fs));
    FSDP_CHECK(read_loss(&ctx, &r->model, loss));  // the log's value, read once per micro-step
    if (m == r->M - 1 && fsdp_fault_at_step(FSDP_ENV_TEST_NAN_SHARD, step, R)) FSDP_CHECK(poison_grad_shard(r->fs));
    return FSDP_OK;
}

// The step loop's learning rate: cosine from --lr after the warmup down to --min-lr at the last step
// (steps - 1), or constant after the warmup.
static float lr_at(void *tool, int step) {
    const train_options *o = ((const train_run *)tool)->o;
    return o->schedule == 0 ? fsdp_lr_warmup_cosine(step, o->training.lr, o->warmup, o->training.steps - 1, o->min_lr)
                            : fsdp_lr_warmup_cosine(step, o->training.lr, o->warmup, o->warmup, o->training.lr);
}

// The step loop's log: the evaluation every --eval-every steps and after the last, then rank 0's progress
// line and --log-jsonl record.
static fsdp_status log_step(void *tool, const train_loop_step *s) {
    train_run *r = tool;
    const train_options *o = r->o;
    train_record rec = {s->step, s->loss, s->lr, (double)r->tokens_per_step / s->seconds, s->seconds * 1e3,
                        100.0 * s->exposed_comm_seconds / s->seconds, (double)fsdp_mem_peak_total(), -1.0, s->norm};
    if (o->eval_every > 0 && ((s->step + 1) % o->eval_every == 0 || s->step == o->training.steps - 1))
        FSDP_CHECK(train_evaluate(r->fs, &r->model, r->val, r->B, r->T, o->eval_batches,
                                  o->fsdp.deterministic ? r->M : 0, (uint64_t)o->training.seed, r->world,
                                  &rec.val_loss));
    if (fsdp_comm_rank(r->world) == 0)
        train_log_step(&r->log, &rec, o->training.steps, fsdp_now_sec() - r->t_start, s->step + 1 - r->start_step);
    return FSDP_OK;
}

// The step loop's stop: an interrupted run writes --save too.
static fsdp_status save_on_stop(void *tool) {
    const train_run *r = tool;
    if (!r->o->training.save_path) return FSDP_OK;
    return save_weights(r->o, r->fs, &r->model, fsdp_comm_rank(r->world));
}

// After the last step: the mean time per step (rank 0), the trace report, and with --summary the
// measured memory by category (to hold against fsdp-plan's prediction, bytes) and the OS's view of it.
static void print_totals(const train_run *r, const train_loop_result *t) {
    const train_options *o = r->o;
    int N = fsdp_comm_size(r->world), R = fsdp_comm_rank(r->world), steps = o->training.steps;
    int start_step = r->start_step;
    fsdp_os_memory os;
    fsdp_mem_os_usage(&os);
    if (steps - start_step > 1 && R == 0)
        printf("mean (steps %d..%d): %.1f ms/step, %.0f tok/s, exposed comm %.1f%%, peak memory %.1f MiB (rss %.1f MiB, "
               "data pss %.1f MiB)\n",
               start_step + 1, steps - 1, t->seconds * 1e3 / (steps - 1 - start_step),
               (double)r->tokens_per_step * (steps - 1 - start_step) / t->seconds,
               100.0 * t->exposed_comm_seconds / t->seconds, (double)fsdp_mem_peak_total() / 1048576.0,
               (double)os.peak_rss / 1048576.0, (double)os.data_pss / 1048576.0);
    if (R == 0) fsdp_trace_report(stdout, N);
    double shard_sent = 0.0, replica_sent = 0.0;
    fsdp_comm_bytes_by_group(r->fs, &shard_sent, &replica_sent);
    double run_steps = steps - start_step > 0 ? steps - start_step : 1;
    if (o->fsdp.summary && R == 0)
        printf("memory rank 0: parameters %zu gradients %zu optimizer %zu unsharded_peak %zu activations_peak %zu "
               "communication %zu workspace %zu total_peak %zu bytes_sent_per_step %.0f offloaded %zu "
               "shard_group_bytes_per_step %.0f replica_group_bytes_per_step %.0f\n",
               fsdp_mem_current(FSDP_MEM_PARAMS), fsdp_mem_current(FSDP_MEM_GRADS), fsdp_mem_current(FSDP_MEM_OPTIM),
               fsdp_mem_peak(FSDP_MEM_UNSHARDED), fsdp_mem_peak(FSDP_MEM_ACTIVATIONS), fsdp_mem_peak(FSDP_MEM_COMM),
               fsdp_mem_peak(FSDP_MEM_WORKSPACE), fsdp_mem_peak_total(),
               fsdp_comm_bytes_sent(r->fs) / run_steps, fsdp_offload_bytes(), shard_sent / run_steps,
               replica_sent / run_steps);
    cli_training_muon_summary(r->fs, o->fsdp.summary, R, run_steps);
    if (o->fsdp.summary && R == 0)  // what the OS says, by kind (fsdp_os_memory)
        printf("os memory rank 0: peak_rss %zu rss %zu anon %zu shmem %zu file %zu pss_anon %zu pss_shmem %zu "
               "pss_file %zu data_pss %zu\n",
               os.peak_rss, os.rss, os.anon, os.shmem, os.file, os.pss_anon, os.pss_shmem, os.pss_file, os.data_pss);
}

// The training steps on the step loop, from the checkpoint --resume names (or from the start). Returns
// 0 when every step ran, else the tool's exit status (1 after printing the failure).
static int train_steps(train_run *r) {
    train_options *o = r->o;
    int N = fsdp_comm_size(r->world), R = fsdp_comm_rank(r->world);
    if (fsdp_optimizer_create(r->fs, o->training.optimizer_config) != FSDP_OK) return fail(fsdp_last_error());
    // the activations now, not in the first step (their pages' first touch is most of its extra time)
    nn_ctx reserve_ctx = fsdp_model_ctx(r->fs, 1, (uint64_t)o->training.seed, 0);
    if (nn_lm_reserve(&reserve_ctx, &r->model, r->B, r->T) != FSDP_OK) return fail(fsdp_last_error());
    int64_t global_batch = (int64_t)N * r->M * r->B;
    if (cli_ckpt_resume(r->fs, &o->fsdp.ckpt, global_batch, R, &r->start_step) != FSDP_OK)
        return fail(fsdp_last_error());
    if (cli_ckpt_check_steps("fsdp-train", o->training.steps, r->start_step, R)) return 2;
    // a resumed run appends to --log-jsonl (the run it continues logged the earlier steps there)
    if (train_log_open(&r->log, R == 0 ? o->jsonl_path : NULL, o->training.steps, r->start_step > 0)) return 1;
    if (r->log.jsonl) cli_config_write_json(&o->config, r->log.jsonl);  // the first record of this run
    train_loop loop = {
        .prog = "fsdp-train", .fs = r->fs, .world = r->world, .start_step = r->start_step,
        .steps = o->training.steps, .grad_accum = r->M, .no_sync = o->training.no_sync, .clip = o->training.clip,
        .deterministic = o->fsdp.deterministic, .det_rank_major = 0,  // micro-step m: chunk m x N + R
        .check_nonfinite = 1, .skip_nonfinite = o->skip_nonfinite, .dump_grads_path = o->training.dump_grads_path,
        .ckpt = &o->fsdp.ckpt, .seed = o->training.seed, .global_batch = global_batch,
        .stop_detail = o->fsdp.ckpt.dir          ? "saving a checkpoint (--resume auto continues)"
                       : o->training.save_path ? "saving the weights"
                                               : "",
        .tool = r, .micro_step = micro_step, .lr_at = lr_at, .log_step = log_step, .save_on_stop = save_on_stop};
    r->t_start = fsdp_now_sec();
    train_loop_result done;
    if (train_loop_run(&loop, &done) != FSDP_OK) return fail(fsdp_last_error());
    if (done.rc) return done.rc;
    print_totals(r, &done);
    return 0;
}

// Trains, then writes the trace, the generated sample, --save and the loss plot. Returns the tool's
// exit status.
static int train_and_save(train_run *r) {
    const train_options *o = r->o;
    int N = fsdp_comm_size(r->world), R = fsdp_comm_rank(r->world);
    r->idx = malloc(sizeof(int32_t) * (size_t)N * r->B * r->T);
    r->targets = malloc(sizeof(int32_t) * (size_t)N * r->B * r->T);
    if (!r->idx || !r->targets) return fail("out of memory");
    if (o->input_path && load_fixed_batch(r) != FSDP_OK) return fail(fsdp_last_error());
    int rc = train_steps(r);
    if (rc) return rc;
    if (o->trace_path) {
        if (fsdp_trace_write(r->world, o->trace_path) != FSDP_OK) return fail(fsdp_last_error());
        if (R == 0) printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", o->trace_path);
    }
    if (o->gen.max_new_tokens > 0 &&
        train_sample_generate(r->fs, &r->model, &o->gen, o->vocab, r->T, (uint64_t)o->training.seed, R, stdout) !=
            FSDP_OK)
        return fail(fsdp_last_error());
    if (o->training.save_path && save_weights(o, r->fs, &r->model, R) != FSDP_OK) return fail(fsdp_last_error());
    if (R == 0 && o->plot_path && train_log_plot(&r->log, o->plot_path)) return 1;
    return 0;
}

static void release_run(train_run *r) {
    train_log_close(&r->log);
    fsdp_free_state(r->fs);
    nn_lm_free(&r->model);
    if (r->val && r->val != r->data) fsdp_data_close(r->val);
    if (r->data) fsdp_data_close(r->data);
    free(r->idx);
    free(r->targets);
}

static int run_with(train_options *o, fsdp_comm *world, const fsdp_tokenizer *tok) {
    fsdp_config fcfg;
    int rc = prepare_run(o, world, &fcfg);
    if (rc) return rc;
    int N = fsdp_comm_size(world), R = fsdp_comm_rank(world);
    train_run *r = calloc(1, sizeof *r);  // (1,) zeroed: release_run frees what was made
    if (!r) return fail("out of memory");
    r->o = o;
    r->world = world;
    r->B = o->training.batch, r->T = o->seq, r->M = o->training.grad_accum;
    r->tokens_per_step = (int64_t)N * r->M * r->B * r->T;
    if (!(rc = open_data(r, tok)) && !(rc = build_model(r, fcfg))) {
        // spans: kept for --trace, totals only otherwise (the end-of-run report)
        if (fsdp_trace_enable(R, o->trace_path ? (size_t)1 << 20 : 0) != FSDP_OK) {
            rc = fail(fsdp_last_error());
        } else {
            start_watchdog(o, N, R);
            cli_ckpt_catch_signals();
            if (R == 0) print_banner(r, fcfg);
            if (o->eval_only) {  // evaluate and/or generate, then exit without training (train_sample.c)
                if (train_eval_only(r->fs, &r->model, &o->fsdp.ckpt, r->val, r->B, r->T, o->eval_batches, &o->gen,
                                    o->vocab, (uint64_t)o->training.seed, world) != FSDP_OK)
                    rc = fail(fsdp_last_error());
            } else {
                rc = train_and_save(r);
            }
        }
    }
    release_run(r);
    free(r);
    return rc;
}

int main(int argc, char **argv) {
    train_options o;
    cli_arg args[TRAIN_FLAGS_MAX];
    int nargs = train_flags(&o, args);
    if (cli_config_argv("fsdp-train", args, nargs, &argc, &argv)) return 2;  // --config FILE, then the command line
    int parsed = cli_parse("fsdp-train", TRAIN_SUMMARY, args, nargs, argc, argv);
    if (parsed) return parsed > 0 ? 0 : 2;
    int resolved = train_arch_resolve("fsdp-train", &o, args, nargs, argc, argv);  // the model: arch, shape
    if (resolved) return resolved;
    if (cli_threads_check_env("fsdp-train", o.training.threads)) return 2;
    cli_threads_before_mpi(argv, o.training.threads);
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return fail(fsdp_last_error());
    if (cli_threads_setup("fsdp-train", world, o.training.threads, &o.thread_choice) != FSDP_OK) return fail(fsdp_last_error());
    if (fsdp_comm_rank(world) == 0) fsdp_tunables_warn_unknown("fsdp-train");  // a misspelt FSDP_* variable
    int rc = run(&o, world);
    fsdp_comm_free(world);
    return rc;
}
