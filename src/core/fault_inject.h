// fault_inject.h: test-only fault injection. The FSDP_TEST_* environment variables are read here and
// nowhere else (FSDP_TEST_NAN_STEP, read by fsdp-train, is the one exception); docs/decisions.md lists
// them. Unset, every query answers "no fault".
//   FSDP_TEST_CRASH_IN_SAVE=K   every rank SIGKILLs itself once its shard of the step-K checkpoint is
//                               complete (before the index and the DONE marker)
//   FSDP_TEST_TORN_SHARD=K:R    rank R dies while writing its shard of the step-K checkpoint: half the
//                               file is left under the writer's temporary name, then SIGKILL
//   FSDP_TEST_DESYNC=R:U[:K]    rank R issues a stray all_reduce before the all-gathers of unit U (in
//                               step K only, when K is given; steps count completed optimizer steps)
#pragma once
#include <stdint.h>

// Whether FSDP_TEST_CRASH_IN_SAVE names this checkpoint step.
int fsdp_fault_crash_in_save(int64_t step);
// Whether FSDP_TEST_TORN_SHARD names this checkpoint step and rank.
int fsdp_fault_torn_shard(int64_t step, int rank);
// Whether FSDP_TEST_DESYNC names this rank, unit and step.
int fsdp_fault_desync(int rank, int unit, int64_t step);
// Dies like kill -9.
void fsdp_fault_die(void);
// Cuts the file at path to half its length (a write interrupted half-way), then dies like kill -9.
void fsdp_fault_tear_and_die(const char *path);
