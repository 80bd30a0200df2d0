// train_sample.h: fsdp-train's evaluation and text generation, used after training and by --eval-only
// (evaluate and/or generate from --init or --resume, then exit without training).
//
// Generation: every rank runs the same forwards (FSDP needs all ranks in each one) and makes the same
// random draws (token i of the sample draws uniform i of the counter-based Philox stream (--seed,
// "sample"), so all ranks agree without communicating); rank 0 prints. The prompt's bytes are the first
// tokens (the byte vocabulary), or its encoding with --tokenizer; the context slides at --seq. With a
// tokenizer each token prints as its bytes. Output is always valid UTF-8: a byte that
// is not part of a valid UTF-8 sequence prints as \xHH; token 0 and ids >= 256 print as '?'.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "cli/cli_args.h"
#include "cli/train_ckpt.h"
#include "comm/comm.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "fsdp/fsdp.h"
#include "nn/causal_lm.h"

typedef struct {
    const char *prompt;   // --prompt TEXT (NULL: a newline)
    float temperature;    // --temperature T (0: greedy argmax)
    int top_k;            // --top-k K (0: every token)
    int max_new_tokens;   // --max-new-tokens N (--sample N, its alias; 0: no generation)
    const fsdp_tokenizer *tokenizer;  // --tokenizer: encodes the prompt, decodes the sample (NULL: bytes)
} train_sample_options;

// The sampling flags' checks, before anything is built: --prompt, --temperature and --top-k need
// --max-new-tokens; a prompt byte must be a token id (< vocab); --top-k at most --vocab. args: (nargs,)
// the parsed flag table, to tell a given flag from a default. Rank 0 prints one line naming the flag.
// Returns 0, or -1.
int train_sample_check(const char *prog, const train_sample_options *so, int vocab, const cli_arg *args, int nargs,
                       int argc, char **argv, int rank);

// Generates so->max_new_tokens tokens (see above) and rank 0 prints them to out between
// "--- sample (N tokens) ---" and "--- end of sample ---". seq: the context window. Collective.
fsdp_status train_sample_generate(fsdp_state *fs, nn_lm *model, const train_sample_options *so, int vocab,
                                  int seq, uint64_t seed, int rank, FILE *out);

// Mean loss over eval_batches fixed validation micro-batches (batch x seq each; steps 0, 1, ... of val as
// fsdp_data_batch orders them; no dropout), averaged over ranks. det_micro > 0 (--deterministic): each
// validation batch is det_micro micro-steps per rank, one chunk each as in training, and the chunks'
// losses are summed in chunk order (the same bits on any world size). Reads into its own buffers.
// Collective.
fsdp_status train_evaluate(fsdp_state *fs, nn_lm *model, const fsdp_data *val, int batch, int seq,
                           int eval_batches, int det_micro, uint64_t seed, fsdp_comm *world, double *out);

// --eval-only: the flags that only training uses, which are one-line errors with it (--grad-accum only
// when it is not 1). NULL-terminated; names a tool's table lacks are skipped.
extern const char *const train_eval_only_refused[];

// --eval-only's checks, before anything is built: it needs --init or --resume; the flags of
// train_eval_only_refused are errors; --ckpt-dir is only read, so it needs --resume auto; --eval-batches 0
// with --max-new-tokens 0 leaves nothing to do. Rank 0 prints one line naming the flag. Returns 0, or -1.
int train_eval_only_check(const char *prog, const cli_arg *args, int nargs, int argc, char **argv,
                          const cli_ckpt_options *ckpt, const char *init_path, int grad_accum, int eval_batches,
                          int max_new_tokens, int rank);

// --eval-only after the model is built (with --init's weights): loads the checkpoint --resume names
// (weights only; a missing one is an error, not a fresh start; a bf16 export is fine to evaluate), prints
// "eval: val_loss L (B batches of NAME)" on rank 0 when val is not NULL, then generates when
// so->max_new_tokens > 0. Collective.
fsdp_status train_eval_only(fsdp_state *fs, nn_lm *model, const cli_ckpt_options *ckpt, const fsdp_data *val,
                            int batch, int seq, int eval_batches, const train_sample_options *so, int vocab,
                            uint64_t seed, fsdp_comm *world);

// Writes bytes (n,) to out as valid UTF-8: complete, valid UTF-8 sequences unchanged, every other byte as
// \xHH. A streaming writer: bytes arrive one at a time (one token each), a sequence may span several.
typedef struct {
    FILE *out;
    unsigned char pending[4];  // the start of a sequence not yet complete
    int n;                     // bytes in pending
} train_utf8_writer;
void train_utf8_put(train_utf8_writer *w, unsigned char byte);
void train_utf8_flush(train_utf8_writer *w);  // the incomplete rest, escaped
