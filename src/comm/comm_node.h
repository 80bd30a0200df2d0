// comm_node.h: what a process knows about the other ranks on its node, for the threads-per-rank policy.
#pragma once
#include "comm/comm.h"

// Before MPI starts: the ranks the launcher put on this node (0 when not launched by a known MPI
// launcher: Open MPI, MPICH/Intel MPI hydra), and whether it bound each rank to its own CPUs.
int fsdp_launcher_local_ranks(int *bound);
// Collective over `world`: the ranks sharing this process's node, and how many of them (itself
// included) may run on at least one of this process's CPUs (their affinity masks overlap).
fsdp_status fsdp_comm_node_cpus(fsdp_comm *world, int *ranks_on_node, int *sharing_ranks);
