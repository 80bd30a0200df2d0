// plan_input.h: fsdp-plan's input (fsdp/plan.h) for the run a tool's options start, written once for
// fsdp-plan and for the tools' memory check before anything is built (memory_check.h).
#pragma once
#include <stdint.h>

#include "cli/fsdp_flags.h"
#include "cli/minimal_flags.h"
#include "cli/train_flags.h"
#include "fsdp/plan.h"

// Where the run's ranks are and how many threads each runs.
typedef struct {
    int world;              // ranks the run starts
    int no_shm;             // every rank on its own host (no shared memory)
    int ranks_per_host;     // ranks on each host (0: all on one host); rank r on host r / ranks_per_host
    double intra_host_gbps; // GB/s one rank sends to ranks on its own host
    double inter_host_gbps; // GB/s one host's NIC sends to other hosts
    int threads;            // OpenMP threads per rank; 0: the tool's --threads, else the tools' default choice
} cli_plan_ranks;

// Fills `in` from the FSDP flags both tools share, and *cfg as the tool's cli_fsdp_config does; no_shm:
// no shared memory between the ranks. Returns 0, or -1 after printing a one-line error naming the flag.
int cli_plan_fsdp(const char *prog, const cli_fsdp_options *f, int no_shm, fsdp_plan_input *in, fsdp_config *cfg);

// Fills the rest of `in` (after cli_plan_fsdp) from fsdp-train's options t or fsdp-minimal's m (the other
// NULL), whose batch, vocabulary and model dimensions are resolved as the tool resolves them: the model,
// the batch, the ranks r, the threads, --deterministic's digits, and with --freeze or LoRA each block's
// trainable elements (the tool's model built without data: names and shapes only), *block_train
// ((layers,), malloc'd, in->block_train points to it; the caller frees it; NULL when every parameter
// trains). Checks what fsdp-plan checks (ranks per host, heads, the shard group, the LoRA flags, the
// --freeze globs). Returns 0, or -1 (after a one-line error on stderr when `print`).
int cli_plan_finish(const char *prog, const train_options *t, const minimal_options *m, const cli_plan_ranks *r,
                    int print, fsdp_plan_input *in, int64_t **block_train);
