// fsdp_flags.h: the FSDP, memory and checkpoint flags that fsdp-train and fsdp-minimal share.
#pragma once
#include "cli/cli_args.h"
#include "cli/train_ckpt.h"
#include "fsdp/fsdp.h"

typedef struct {
    int strategy;                 // --strategy (index into fsdp_strategy)
    const char *wrap;             // --wrap transformer|size:N|none
    int shard_group_size;         // --shard-group-size
    int backward_prefetch;        // --backward-prefetch pre|post|none
    int forward_prefetch;         // --forward-prefetch
    int limit_all_gathers;        // --limit-all-gathers
    int activation_checkpointing; // --activation-checkpointing
    const char *offload_dir;      // --offload-dir
    int cpu_offload;              // --cpu-offload
    int mixed_precision;          // --mixed-precision fp32|bf16 (index)
    int reduce_dtype;             // --reduce-dtype param|fp32|bf16 (index; param: follow --mixed-precision)
    int summary;                  // --summary
    int init_nonstrict;           // --init-nonstrict
    const char *device;           // --device cpu|guard (NULL: $FSDP_DEVICE, else cpu)
    int comm;                     // --comm auto|nccl|host (index; -1: not given: $FSDP_DEVICE_COMM, else auto)
    cli_ckpt_options ckpt;        // --ckpt-dir --save-every --ckpt-type --keep-last --resume --new-run
    int deterministic;            // --deterministic
    int det_chunks;               // --det-chunks (0: resolved by cli_batch_resolve)
    const char *freeze;           // --freeze GLOB[,GLOB...] (repeatable: the values joined with commas), or NULL
} cli_fsdp_options;

#define CLI_FSDP_NFLAGS 25

void cli_fsdp_defaults(cli_fsdp_options *o);
// Appends the shared flags to args[n..] (room for CLI_FSDP_NFLAGS more); returns the new count.
int cli_fsdp_add_flags(cli_arg *args, int n, cli_fsdp_options *o);
// Fills cfg from the options (--device chooses the process's default device, as FSDP_DEVICE does, and
// cfg->device is that device; --comm its collectives' path, as FSDP_DEVICE_COMM does, checked against
// the device: fsdp_dev_comm_check); returns 0, or -1 after printing a one-line error naming the flag.
int cli_fsdp_config(const char *prog, const cli_fsdp_options *o, fsdp_config *cfg);

// Flags that do nothing on their own, checked before anything is created: --save-every, --keep-last
// and --ckpt-type need --ckpt-dir, and --shard-group-size needs --strategy hybrid_shard (errors);
// --cpu-offload does nothing on the CPU backend (a one-line note). Rank 0 prints. Returns 0, or -1
// after a one-line error naming the flag.
int cli_fsdp_check_flags(const char *prog, const cli_fsdp_options *o, int rank);

// Sets activation checkpointing on the model's blocks, wraps it, fills the shards (deterministic init,
// then --init when given: strict unless --init-nonstrict, whose report rank 0 prints). Returns 0, 2
// after a one-line error about a flag (a --freeze glob that matches nothing; rank 0 prints) or about an
// --init that does not fit the model (a tensor missing or unexpected, of another shape or dtype, a
// malformed file: every rank prints), or 1 after printing a one-line error.
int cli_fsdp_build(const char *prog, const cli_fsdp_options *o, fsdp_model_desc desc, fsdp_config cfg,
                   fsdp_comm *world, uint64_t seed, const char *init_path, const char *alt_prefix,
                   fsdp_state **out);

// --batch (per-rank micro-batch) against --global-batch (sequences per optimizer step, over all ranks
// and micro-steps): with --global-batch given (*global > 0) sets *batch = *global / (world x grad_accum);
// otherwise sets *global = world x grad_accum x *batch. given_batch: --batch was on the command line.
// Returns 0, or -1 after one line naming the flags and values (both given; not divisible), printed when
// `print` (rank 0).
int cli_batch_resolve(const char *prog, int print, int given_batch, int *batch, int *global, int grad_accum, int world);

// The same under --deterministic: the global batch is cut into o->det_chunks chunks whatever the world
// size (--det-chunks; default world x --grad-accum when --grad-accum is given, else one sequence per
// chunk), each rank runs det_chunks / world micro-steps of one chunk (*grad_accum) of *global /
// det_chunks sequences (*batch). Needs --global-batch; refuses --batch, --no-sync (no_sync), a
// --grad-accum other than det_chunks / world, and chunk counts that do not divide. Sets
// o->det_chunks. Returns 0, or -1 after one line naming the flags (printed when `print`).
int cli_det_resolve(const char *prog, int print, cli_fsdp_options *o, int given_batch, int given_accum, int no_sync,
                    int *batch, int *global, int *grad_accum, int world);
