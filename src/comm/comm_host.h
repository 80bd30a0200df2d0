// comm_host.h: which ranks of an MPI communicator share a host and its CPUs (comm_node.c), for the
// shared-memory and hierarchical transports. Not part of the public API.
#pragma once
#include <mpi.h>

// MPI_Comm_split_type(m, MPI_COMM_TYPE_SHARED, key): m's ranks on this host. For tests on one machine,
// FSDP_COMM_RANKS_PER_HOST=k (read once) pretends hosts of k consecutive world ranks. Returns MPI's code.
int comm_host_split(MPI_Comm m, int key, MPI_Comm *out);
// Collective over m: how many of m's ranks (this one included) may run on one of this process's CPUs;
// -1 when the affinity masks cannot be read or exchanged
int comm_sharing_ranks(MPI_Comm m);
