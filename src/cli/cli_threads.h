// cli_threads.h: the tools' threads-per-rank setup (policy in core/threads.h), in two steps around
// the start of MPI.
#pragma once
#include "comm/comm.h"
#include "core/threads.h"

// Call before fsdp_comm_world and before any OpenMP region, with main's argv and the --threads flag
// (0: unset). When this node's ranks x threads exceed the cores they share, asks Open MPI to yield
// while it polls and, where threads > 1 and OMP_WAIT_POLICY is unset, re-executes the program with
// OMP_WAIT_POLICY=passive (the OpenMP runtime reads it only at startup). Returns when no re-exec happens.
void cli_threads_before_mpi(char **argv, int requested);
// Collective over `world`: chooses and sets this rank's OpenMP threads; rank 0 prints one notice when
// any rank is oversubscribed, and the choice under FSDP_DEBUG=INFO/DETAIL (stderr).
fsdp_status cli_threads_setup(const char *prog, fsdp_comm *world, int requested, fsdp_threads_choice *out);
