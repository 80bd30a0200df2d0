// train_sample.c: evaluation, text generation and --eval-only for fsdp-train (see train_sample.h).
#include "cli/train_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/rng.h"

// ---------------------------------------------------------------------------------------------------------
// UTF-8 output

// What pending bytes p (n, 1..4) are: the length of the complete valid sequence they start with (> 0), 0
// while they are a valid but incomplete start, -1 when p[0] cannot start a valid sequence with what
// follows (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
static int utf8_sequence(const unsigned char *p, int n) {
    unsigned char b = p[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i < n && i < len; i++) {
        unsigned char c = p[i];
        if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return -1;
    }
    return n >= len ? len : 0;
}

// Writes what pending holds that is decided: complete sequences as they are, bytes that start none
// escaped; with `all`, the incomplete rest escaped too.
static void utf8_drain(train_utf8_writer *w, int all) {
    while (w->n > 0) {
        int k = utf8_sequence(w->pending, w->n);
        if (k == 0 && !all) return;
        if (k > 0) fwrite(w->pending, 1, (size_t)k, w->out);
        else fprintf(w->out, "\\x%02X", w->pending[0]);
        if (k <= 0) k = 1;
        w->n -= k;
        memmove(w->pending, w->pending + k, (size_t)w->n);
    }
}

void train_utf8_put(train_utf8_writer *w, unsigned char byte) {
    w->pending[w->n++] = byte;  // n < 4 here: a fifth byte never waits (no sequence is longer than 4)
    utf8_drain(w, 0);
}

void train_utf8_flush(train_utf8_writer *w) { utf8_drain(w, 1); }

// ---------------------------------------------------------------------------------------------------------
// Flag checks

int train_sample_check(const char *prog, const train_sample_options *so, int vocab, const cli_arg *args, int nargs,
                       int argc, char **argv, int rank) {
    static const char *const needs_tokens[] = {"--prompt", "--temperature", "--top-k"};
    if (so->max_new_tokens == 0)
        for (int i = 0; i < 3; i++)
            if (cli_given(args, nargs, argc, argv, needs_tokens[i])) {
                if (rank == 0)
                    fprintf(stderr, "%s: %s needs --max-new-tokens (without it nothing is generated)\n", prog,
                            needs_tokens[i]);
                return -1;
            }
    if (so->top_k > vocab) {
        if (rank == 0) fprintf(stderr, "%s: --top-k %d is larger than the vocabulary (%d)\n", prog, so->top_k, vocab);
        return -1;
    }
    for (const unsigned char *p = (const unsigned char *)so->prompt; p && *p && !so->tokenizer; p++)
        if (*p >= vocab) {
            if (rank == 0)
                fprintf(stderr, "%s: --prompt: byte 0x%02X at offset %d is not a token of the %d-token vocabulary\n",
                        prog, *p, (int)(p - (const unsigned char *)so->prompt), vocab);
            return -1;
        }
    return 0;
}

const char *const train_eval_only_refused[] = {
    "--steps", "--lr", "--min-lr", "--warmup", "--lr-schedule", "--weight-decay", "--clip-grad-norm",
    "--dropout", "--eval-every", "--save", "--save-every", "--keep-last", "--ckpt-type", "--dump-grads", "--input",
    "--log-jsonl", "--plot", "--skip-nonfinite", NULL};

static int flag_known(const cli_arg *args, int nargs, const char *name) {
    for (int k = 0; k < nargs; k++)
        if (strcmp(args[k].name, name) == 0) return 1;
    return 0;
}

int train_eval_only_check(const char *prog, const cli_arg *args, int nargs, int argc, char **argv,
                          const cli_ckpt_options *ckpt, const char *init_path, int grad_accum, int eval_batches,
                          int max_new_tokens, int rank) {
    const char *why = NULL, *flag = NULL;
    for (int i = 0; train_eval_only_refused[i] && !flag; i++)
        if (flag_known(args, nargs, train_eval_only_refused[i]) &&
            cli_given(args, nargs, argc, argv, train_eval_only_refused[i]))
            flag = train_eval_only_refused[i];
    if (flag) why = "a training flag (--eval-only neither trains nor writes files)";
    else if (grad_accum != 1) flag = "--grad-accum", why = "other than 1 only matters for training";
    else if (!init_path && !ckpt->resume)
        flag = "", why = "needs weights: --init FILE or --resume DIR|auto";
    else if (ckpt->dir && (!ckpt->resume || strcmp(ckpt->resume, "auto") != 0))
        flag = "--ckpt-dir", why = "is only read: it needs --resume auto";
    else if (eval_batches == 0 && max_new_tokens == 0)
        flag = "--eval-batches 0", why = "without --max-new-tokens leaves --eval-only nothing to do";
    if (!flag) return 0;
    if (rank == 0) fprintf(stderr, "%s: %s%s--eval-only: %s\n", prog, flag, *flag ? " with " : "", why);
    return -1;
}

// ---------------------------------------------------------------------------------------------------------
// Evaluation

fsdp_status train_evaluate(fsdp_state *fs, nn_lm *model, const fsdp_data *val, int batch, int seq,
                           int eval_batches, int det_micro, uint64_t seed, fsdp_comm *world, double *out) {
    nn_ctx ctx = fsdp_model_ctx(fs, 0, seed, 0);
    size_t n = (size_t)batch * seq;
    int M = det_micro > 0 ? det_micro : 1, R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    int32_t *idx = malloc(sizeof(int32_t) * n), *targets = malloc(sizeof(int32_t) * n);  // (batch, seq) each
    double *losses = malloc(sizeof(double) * (size_t)eval_batches * M);  // (eval_batches, M) this rank's
    fsdp_status s = idx && targets && losses ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory for validation");
    double total = 0.0;
    for (int b = 0; b < eval_batches && s == FSDP_OK; b++)
        for (int m = 0; m < M && s == FSDP_OK; m++) {  // --deterministic: chunk m x N + R of batch b
            fsdp_data_batch(val, b, m, M, R, N, batch, seq, idx, targets);
            s = fsdp_begin_eval(fs);
            if (s == FSDP_OK) s = nn_lm_forward(&ctx, model, idx, targets, batch, seq);
            if (s == FSDP_OK) s = fsdp_end_eval(fs);
            double loss = 0.0;  // the device scalar model->loss, read for the mean
            if (s == FSDP_OK) s = fsdp_dev_read(ctx.stream, &loss, nn_lm_loss(model), sizeof loss);
            total += loss;
            losses[(size_t)b * M + m] = loss;
        }
    free(idx);
    free(targets);
    if (s == FSDP_OK && det_micro > 0) {  // summed in chunk order: the same bits on any world size
        s = fsdp_det_mean(world, losses, eval_batches * M, 0, out);
    } else if (s == FSDP_OK) {
        s = fsdp_all_reduce_double(world, &total);
        *out = total / eval_batches / N;
    }
    free(losses);
    return s;
}

// ---------------------------------------------------------------------------------------------------------
// Generation

typedef struct {
    float logit;
    int id;
} scored_token;

// Larger logits first, ties by the smaller id (torch.topk's order on distinct values).
static int by_logit_desc(const void *a, const void *b) {
    const scored_token *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

// The next token from logits (vocab,): the argmax at temperature 0 (the first of equal maxima); else a
// draw of u in [0, 1) from softmax(logits / T) over the kept tokens (the top_k largest, or all), taking
// the first kept token in id order whose running sum of exp((logit - max) / T) reaches u * sum.
// kept, order: (vocab,) scratch.
static int next_token(const float *logits, int vocab, float temperature, int top_k, double u, unsigned char *kept,
                      scored_token *order) {
    if (temperature == 0.0f) {
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (logits[v] > logits[best]) best = v;
        return best;
    }
    if (top_k > 0 && top_k < vocab) {
        for (int v = 0; v < vocab; v++) order[v] = (scored_token){logits[v], v};
        qsort(order, (size_t)vocab, sizeof *order, by_logit_desc);
        memset(kept, 0, (size_t)vocab);
        for (int j = 0; j < top_k; j++) kept[order[j].id] = 1;
    } else {
        memset(kept, 1, (size_t)vocab);
    }
    float maxv = -INFINITY;
    for (int v = 0; v < vocab; v++)
        if (kept[v] && logits[v] > maxv) maxv = logits[v];
    double sum = 0.0, t = (double)temperature;
    int last = 0;
    for (int v = 0; v < vocab; v++)
        if (kept[v]) {
            sum += exp((double)(logits[v] - maxv) / t);
            last = v;
        }
    double target = u * sum, acc = 0.0;
    for (int v = 0; v < vocab; v++) {
        if (!kept[v]) continue;
        acc += exp((double)(logits[v] - maxv) / t);
        if (acc >= target) return v;
    }
    return last;
}

fsdp_status train_sample_generate(fsdp_state *fs, nn_lm *model, const train_sample_options *so, int vocab,
                                  int seq, uint64_t seed, int rank, FILE *out) {
    int T = seq, n = so->max_new_tokens;
    int32_t *ctx_tokens = calloc((size_t)T, sizeof(int32_t));  // (T,) the context window
    int32_t *dummy = calloc((size_t)T, sizeof(int32_t));       // (T,) targets the forward needs
    float *logits = malloc(sizeof(float) * (size_t)vocab);       // (vocab,) host: the last position's logits
    unsigned char *kept = malloc((size_t)vocab);                // (vocab,) scratch of next_token
    scored_token *order = so->top_k > 0 ? malloc(sizeof(scored_token) * (size_t)vocab) : NULL;  // (vocab,)
    fsdp_status s = FSDP_OK;
    if (!ctx_tokens || !dummy || !logits || !kept || (so->top_k > 0 && !order))
        s = fsdp_error(FSDP_ERR_NOMEM, "out of memory for --max-new-tokens");
    nn_ctx ctx = fsdp_model_ctx(fs, 0, seed, 0);
    fsdp_rng rng = {seed, fsdp_hash_name("sample")};
    const char *prompt = so->prompt ? so->prompt : "\n";
    int32_t *encoded = NULL;  // (n_prompt,) the prompt's tokens: its bytes, or the tokenizer's encoding
    size_t n_prompt = strlen(prompt);
    if (s == FSDP_OK && so->tokenizer) {
        s = fsdp_tokenizer_encode(so->tokenizer, prompt, strlen(prompt), &encoded, &n_prompt);
    } else if (s == FSDP_OK) {
        encoded = malloc(sizeof(int32_t) * (n_prompt ? n_prompt : 1));
        for (size_t i = 0; encoded && i < n_prompt; i++) encoded[i] = (unsigned char)prompt[i];
        if (!encoded) s = fsdp_error(FSDP_ERR_NOMEM, "out of memory for --prompt");
    }
    int len = 0;
    for (size_t i = 0; i < n_prompt && s == FSDP_OK; i++) {
        if (len == T) {  // a prompt longer than the window: its last T tokens
            if (T > 1) memmove(ctx_tokens, ctx_tokens + 1, sizeof(int32_t) * (size_t)(T - 1));
            len--;
        }
        ctx_tokens[len++] = encoded[i] % vocab;
    }
    free(encoded);
    train_utf8_writer w = {out, {0}, 0};
    if (rank == 0 && s == FSDP_OK) fprintf(out, "--- sample (%d tokens) ---\n", n);
    for (int i = 0; i < n && s == FSDP_OK; i++) {
        s = fsdp_begin_eval(fs);
        if (s == FSDP_OK) s = nn_lm_forward(&ctx, model, ctx_tokens, dummy, 1, len);
        if (s == FSDP_OK) s = fsdp_end_eval(fs);
        if (s == FSDP_OK)
            s = fsdp_dev_read(ctx.stream, logits, nn_lm_logits(model) + (size_t)(len - 1) * vocab,
                              sizeof(float) * (size_t)vocab);
        if (s != FSDP_OK) break;
        int tok = next_token(logits, vocab, so->temperature, so->top_k, (double)fsdp_rng_uniform_at(rng, (uint64_t)i),
                             kept, order);
        if (rank == 0 && so->tokenizer) {  // the token's bytes (an id that is no token prints as '?')
            size_t nb = 0;
            const unsigned char *b = fsdp_tokenizer_token_bytes(so->tokenizer, tok, &nb);
            if (!b) train_utf8_put(&w, (unsigned char)'?');
            for (size_t k = 0; k < nb; k++) train_utf8_put(&w, b[k]);
        } else if (rank == 0) {
            train_utf8_put(&w, tok < 256 && tok != 0 ? (unsigned char)tok : (unsigned char)'?');
        }
        if (len < T) {
            ctx_tokens[len++] = tok;
        } else {  // slide the window
            memmove(ctx_tokens, ctx_tokens + 1, sizeof(int32_t) * (size_t)(T - 1));
            ctx_tokens[T - 1] = tok;
        }
    }
    if (rank == 0 && s == FSDP_OK) {
        train_utf8_flush(&w);
        fprintf(out, "\n--- end of sample ---\n");
        fflush(out);
    }
    free(ctx_tokens);
    free(dummy);
    free(logits);
    free(kept);
    free(order);
    return s;
}

// ---------------------------------------------------------------------------------------------------------
// --eval-only

fsdp_status train_eval_only(fsdp_state *fs, nn_lm *model, const cli_ckpt_options *ckpt, const fsdp_data *val,
                            int batch, int seq, int eval_batches, const train_sample_options *so, int vocab,
                            uint64_t seed, fsdp_comm *world) {
    int rank = fsdp_comm_rank(world);
    if (ckpt->resume) {
        char dir[4096];
        int found = 0;
        FSDP_CHECK(cli_ckpt_resume_dir(ckpt, dir, sizeof dir, &found));
        struct stat dir_stat;
        if (!found && stat(ckpt->dir, &dir_stat) != 0)
            return fsdp_error(FSDP_ERR_MISSING, "--eval-only --resume auto: --ckpt-dir %s: no such directory", ckpt->dir);
        if (!found)
            return fsdp_error(FSDP_ERR_MISSING, "--eval-only --resume auto: no complete checkpoint under --ckpt-dir %s",
                              ckpt->dir);
        // weights only (no optimizer was made); an export (fsdp-ckpt convert --dtype bf16) is fine to evaluate
        fsdp_trainer_state ts;
        FSDP_CHECK(fsdp_checkpoint_load(fs, dir, &ts));
        if (rank == 0) printf("eval: weights of %s (%lld steps done)\n", dir, (long long)ts.step);
    }
    if (val && eval_batches > 0) {
        double loss = 0.0;
        FSDP_CHECK(train_evaluate(fs, model, val, batch, seq, eval_batches, 0, seed, world, &loss));
        if (rank == 0) {
            printf("eval: val_loss %.9g (%d batches of %d x %d tokens per rank of %s)\n", loss, eval_batches, batch,
                   seq, fsdp_data_name(val));
            fflush(stdout);
        }
    }
    if (so->max_new_tokens > 0) FSDP_CHECK(train_sample_generate(fs, model, so, vocab, seq, seed, rank, stdout));
    return FSDP_OK;
}
