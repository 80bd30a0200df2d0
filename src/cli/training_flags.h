// training_flags.h: the training flags fsdp-train and fsdp-minimal share (--steps --lr --seed
// --grad-accum --no-sync --clip-grad-norm --init --save --threads --config, and the other flags both
// tools declare with one meaning: --batch --global-batch --weight-decay --dump-grads
// --no-memory-check), each declared once, with one help text. Each tool sets its own defaults in the
// targets and places the declarations in its table in its own order (cli_training_flag), so its --help,
// its "config:" line and the settings its files record keep their order.
#pragma once
#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"

typedef struct {
    int steps;                    // --steps: optimizer steps in total
    int seed;                     // --seed
    int threads;                  // --threads (0: OMP_NUM_THREADS, else the affinity cores / ranks)
    int grad_accum;               // --grad-accum: micro-steps per optimizer step
    int no_sync;                  // --no-sync
    int batch;                    // --batch: the per-rank micro-batch (sequences)
    int global_batch;             // --global-batch (0: world x grad_accum x batch, set when resolved)
    int no_memory_check;          // --no-memory-check: skip the up-front memory check (memory_check.h)
    float lr;                     // --lr
    float weight_decay;           // --weight-decay
    float clip;                   // --clip-grad-norm (0: off)
    const char *init_path;        // --init
    const char *save_path;        // --save
    const char *dump_grads_path;  // --dump-grads
    const char *config_path;      // --config (cli_config_argv)
    int optimizer;                // --optimizer adamw|muon (fsdp_optimizer_kind)
    float muon_lr;                // --muon-lr
    float muon_momentum;          // --muon-momentum
    int muon_nesterov;            // --muon-nesterov (on; --no-muon-nesterov turns it off)
    int muon_ns_steps;            // --muon-ns-steps
    float muon_weight_decay;      // --muon-weight-decay
    int muon_ns_dtype;            // --muon-ns-dtype fp32|bf16 (index; bf16 not implemented yet: an error)
    fsdp_optimizer_config optimizer_config;  // the optimizer the flags resolve to (cli_training_optimizer)
} cli_training_options;

#define CLI_TRAINING_NFLAGS 22

// Writes the shared flags' declarations (targets in t; t's values are the defaults) to
// table[0..CLI_TRAINING_NFLAGS). Sets the Muon flags' defaults in t first (fsdp_muon_defaults; the same in
// both tools), the --optimizer to adamw.
void cli_training_flags(cli_training_options *t, cli_arg *table);

// Appends the optimizer's flags (--optimizer and the --muon-* ones, CLI_OPTIMIZER_NFLAGS of them) from
// cli_training_flags' table to args[n..]; returns the new count. Both tools place them after their own.
#define CLI_OPTIMIZER_NFLAGS 7
int cli_training_add_optimizer_flags(const cli_arg *table, cli_arg *args, int n);

// The declaration of the shared flag `name` ("--steps") in table (cli_training_flags'); a name that is
// not one of them is a bug (FSDP_ASSERT).
cli_arg cli_training_flag(const cli_arg *table, const char *name);

// Resolves the batch for `world` ranks: --batch B is the per-rank micro-batch (a step sees
// world x --grad-accum x B sequences); --global-batch G sets B = G / (world x --grad-accum). Sets
// t->global_batch to the sequences per step either way. Under --deterministic, cli_det_resolve's rules
// (fsdp_flags.h) instead. args..argv: the tool's table and command line (for what was given). Both
// flags, or a G that does not divide, print one line naming the flags and values (when `print`) and
// return -1; otherwise 0.
int cli_training_resolve_batch(const char *prog, cli_training_options *t, cli_fsdp_options *f, const cli_arg *args,
                               int nargs, int argc, char **argv, int world, int print);

// The optimizer the flags ask for, checked before anything is built: a --muon-* flag without --optimizer
// muon, and what Muon does not do yet (--muon-ns-dtype bf16, --deterministic, --cpu-offload, --offload-dir,
// --strategy no_shard / ddp, --ckpt-dir / --resume: its momentum is not checkpointed) are one-line errors
// naming the flags (printed by rank 0). Fills *out (AdamW from --lr and --weight-decay, Muon from its
// flags). Returns 0, or -1 after the error.
int cli_training_optimizer(const char *prog, const cli_training_options *t, const cli_fsdp_options *f,
                           const cli_arg *args, int nargs, int argc, char **argv, int rank, fsdp_optimizer_config *out);

// With --summary under --optimizer muon: this rank's line "muon rank R: matrices M owned K ns_calls C
// ns_flops F momentum_floats X exchange_bytes_per_step B" (every rank prints its own: the Newton-Schulz
// work is split over them). run_steps: the steps this run took.
void cli_training_muon_summary(fsdp_state *fs, int summary, int rank, double run_steps);
