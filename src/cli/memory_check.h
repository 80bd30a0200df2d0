// memory_check.h: the training tools' up-front memory check. Before the model, the data or the FSDP
// state is built (and before anything is written), fsdp-plan's prediction of a rank's peak memory for
// this run (plan_input.h, fsdp/plan.h) times the ranks on this host is held against what the host can
// still give (core/mem_available.h: MemAvailable, or a lower cgroup limit). A run predicted not to fit
// is refused at once with the numbers; one that fits, or that the prediction does not cover, goes on.
// Not checked: --no-memory-check; --device cuda (device memory; FSDP_DEVICE=cuda too); --offload-dir
// (the plan does not model file-backed shards and moments); fsdp-train --eval-only (no gradients or
// optimizer state, which the plan counts).
#pragma once
#include "cli/minimal_flags.h"
#include "cli/train_flags.h"
#include "comm/comm.h"

// fsdp-train's check; o's batch and vocabulary resolved (cli_training_resolve_batch, --tokenizer). Collective
// over world. Returns 0 to go on, or 2 on every rank after rank 0 printed one line naming what the run
// needs per rank (by category), the ranks on the host, what is available and from where, and what to
// change (also 2, on the ranks that printed it, after a flag error of cli_fsdp_config's).
int cli_memory_check_train(const train_options *o, fsdp_comm *world);
// fsdp-minimal's, the same; threads: each rank's OpenMP threads (cli_threads_setup). Resolves the batch
// on a copy of o (a bad one is left to the tool to report).
int cli_memory_check_minimal(const minimal_options *o, int threads, fsdp_comm *world);
