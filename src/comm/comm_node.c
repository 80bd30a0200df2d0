// comm_node.c: node-local rank counts for the threads-per-rank policy: from the launcher's environment
// before MPI starts, and from the ranks' exchanged affinity masks after.
#include "comm/comm_node.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_group.h"
#include "comm/comm_host.h"
#include "comm/comm_mpi.h"
#include "core/tunables.h"

int fsdp_launcher_local_ranks(int *bound) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    // Open MPI 4 sets this when it bound every rank (to a core, by default, for up to 2 ranks)
    const char *b = getenv("OMPI_MCA_orte_bound_at_launch");
    *bound = b && strcmp(b, "1") == 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        int n = v ? atoi(v) : 0;
        if (n > 0) return n;
    }
    return 0;
}

int comm_host_split(MPI_Comm m, int key, MPI_Comm *out) {
    static int per_host = -1;  // FSDP_COMM_RANKS_PER_HOST, read once (0: unset)
    if (per_host < 0) {
        const char *v = fsdp_tunable(FSDP_ENV_COMM_RANKS_PER_HOST);
        per_host = v && atoi(v) > 0 ? atoi(v) : 0;
    }
    if (!per_host) return MPI_Comm_split_type(m, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out);
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    return MPI_Comm_split(m, world_rank / per_host, key, out);
}

int comm_sharing_ranks(MPI_Comm m) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    int n = 0, rank = 0;
    MPI_Comm_size(m, &n);
    MPI_Comm_rank(m, &rank);
    cpu_set_t *all = malloc(sizeof(cpu_set_t) * (size_t)n);  // (n,) every rank's mask
    // this rank can take part; after the MIN all-reduce: every rank can (all ranks gather, or none)
    int everyone = all != NULL && sched_getaffinity(0, sizeof mine, &mine) == 0;
    if (comm_mpi_allreduce(&everyone, 1, sizeof everyone, MPI_INT, MPI_MIN, m) != FSDP_OK) everyone = 0;
    if (!everyone || comm_mpi_allgather(&mine, all, sizeof mine, 1, MPI_BYTE, m, rank) != FSDP_OK) {
        free(all);
        return -1;
    }
    int sharing = 0;
    for (int r = 0; r < n; r++) {
        cpu_set_t common;
        CPU_AND(&common, &all[r], &mine);
        sharing += CPU_COUNT(&common) > 0;
    }
    free(all);
    return sharing;
}

fsdp_status fsdp_comm_node_cpus(fsdp_comm *world, int *ranks_on_node, int *sharing_ranks) {
    *ranks_on_node = *sharing_ranks = 1;
    if (world->backend != COMM_MPI) return FSDP_OK;
    MPI_Comm node;
    if (MPI_Comm_split_type(world->mpi, MPI_COMM_TYPE_SHARED, world->rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return fsdp_error(FSDP_ERR_COMM, "MPI_Comm_split_type (ranks on this node) failed");
    int n = 0;
    MPI_Comm_size(node, &n);
    int sharing = comm_sharing_ranks(node);
    MPI_Comm_free(&node);
    *ranks_on_node = n;
    *sharing_ranks = sharing > 0 ? sharing : n;  // masks unknown: assume all share
    return FSDP_OK;
}
