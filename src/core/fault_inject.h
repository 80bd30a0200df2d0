// fault_inject.h: test-only fault injection. The FSDP_TEST_* environment variables (core/tunables.h)
// are read here and nowhere else; docs/decisions.md lists them. Unset, every query answers "no fault". Each query
// only answers; the fault itself is made where it acts (a checkpoint write, a collective, a step).
//   FSDP_TEST_CRASH_IN_SAVE=K   every rank SIGKILLs itself once its shard of the step-K checkpoint is
//                               complete (before the index and the DONE marker)
//   FSDP_TEST_TORN_SHARD=K:R    rank R dies while writing its shard of the step-K checkpoint: half the
//                               file is left under the writer's temporary name, then SIGKILL
//   FSDP_TEST_CRASH_IN_ROTATE=K:P  the rotation (--keep-last) after the step-K checkpoint SIGKILLs
//                               the process at point P of removing the first checkpoint it removes:
//                               0 once it is renamed aside, 1 after its first file is deleted, 2 once
//                               it is gone
//   FSDP_TEST_CRASH_IN_ARCHIVE=1  archiving (a branch, --new-run) SIGKILLs the process once its journal
//                               is written, before any checkpoint has moved
//   FSDP_TEST_MARKER_FULL=1     the completion marker DONE of a checkpoint is written into /dev/full, so
//                               its write fails as on a full disk (ENOSPC, from the kernel)
//   FSDP_TEST_DESYNC=R:U[:K]    rank R issues a stray all_reduce before the all-gathers of unit U (in
//                               step K only, when K is given; steps count completed optimizer steps)
//   FSDP_TEST_NAN_LOSS=K[:R]    fsdp-train: step K's (all-reduced) loss reads as NaN
//   FSDP_TEST_NAN_GRAD=K[:R]    fsdp-train: rank R runs step K's backward with a NaN loss scale, so
//                               every gradient it computes is NaN and the reductions spread it
//   FSDP_TEST_NAN_SHARD=K[:R]   fsdp-train: after step K's reduction one element of rank R's gradient
//                               shard becomes NaN (only that rank sees it: the skip must be collective)
//   FSDP_TEST_SLOW_VIEWS=R:MS   rank R sleeps MS milliseconds each time it binds a unit's parameters in
//                               place (the peers' shared shards), before compute reads them: a reader
//                               that lags behind its peers
// (Without ":R", every rank.)
#pragma once
#include <stdint.h>

#include "core/tunables.h"

// Whether FSDP_TEST_CRASH_IN_SAVE names this checkpoint step.
int fsdp_fault_crash_in_save(int64_t step);
// Whether FSDP_TEST_TORN_SHARD names this checkpoint step and rank.
int fsdp_fault_torn_shard(int64_t step, int rank);
// The point FSDP_TEST_CRASH_IN_ROTATE names for the rotation after step K's checkpoint, or -1.
int fsdp_fault_crash_in_rotate(int64_t step);
// Whether FSDP_TEST_CRASH_IN_ARCHIVE is set.
int fsdp_fault_crash_in_archive(void);
// Whether FSDP_TEST_MARKER_FULL is set.
int fsdp_fault_marker_full(void);
// Whether FSDP_TEST_DESYNC names this rank, unit and step.
int fsdp_fault_desync(int rank, int unit, int64_t step);
// Whether the hook `var` (one of the FSDP_TEST_NAN_* above) is set to "K" or "K:R" naming this step
// and rank.
int fsdp_fault_at_step(fsdp_tunable_id var, int64_t step, int rank);
// The milliseconds FSDP_TEST_SLOW_VIEWS asks this rank to sleep (0: none).
int fsdp_fault_slow_views_ms(int rank);
// Dies like kill -9.
void fsdp_fault_die(void);
// Cuts the file at path to half its length (a write interrupted half-way), then dies like kill -9.
void fsdp_fault_tear_and_die(const char *path);
