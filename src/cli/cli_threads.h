// cli_threads.h: the tools' threads-per-rank setup (policy in core/threads.h), in two steps around
// the start of MPI.
#pragma once
#include "comm/comm.h"
#include "core/threads.h"

// The largest --threads (and OMP_NUM_THREADS) the tools take.
#define CLI_THREADS_MAX 1024

// Without --threads (requested 0), OMP_NUM_THREADS sets the threads per rank: a value other than an
// integer in [0, CLI_THREADS_MAX] (or a list "N,M,..." whose first entry is one) is refused as
// --threads would refuse it. Returns 0, or -1 after printing one line naming OMP_NUM_THREADS.
int cli_threads_check_env(const char *prog, int requested);
// Call before fsdp_comm_world and before any OpenMP region, with main's argv and the --threads flag
// (0: unset). When this node's ranks x threads exceed the cores they share, asks Open MPI to yield
// while it polls and, where threads > 1 and OMP_WAIT_POLICY is unset, re-executes the program with
// OMP_WAIT_POLICY=passive (the OpenMP runtime reads it only at startup). Returns when no re-exec happens.
void cli_threads_before_mpi(char **argv, int requested);
// Collective over `world`: chooses and sets this rank's OpenMP threads; rank 0 prints one notice when
// any rank is oversubscribed, and the choice under FSDP_DEBUG=INFO/DETAIL (stderr).
fsdp_status cli_threads_setup(const char *prog, fsdp_comm *world, int requested, fsdp_threads_choice *out);
