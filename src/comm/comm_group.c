// comm_group.c: an MPI process group's setup and teardown below the transports that need sub-groups
// (the hierarchical one builds its per-host and cross-host groups with these).
#include "comm/comm_group.h"

#include "comm/comm_mpi.h"
#include "comm/comm_p2p.h"
#include "comm/comm_shm.h"

fsdp_status comm_group_init(fsdp_comm *c, MPI_Comm m) {
    c->mpi = m;
    FSDP_CHECK(comm_mpi_check(MPI_Comm_rank(m, &c->rank), "MPI_Comm_rank"));
    FSDP_CHECK(comm_mpi_check(MPI_Comm_size(m, &c->size), "MPI_Comm_size"));
    return c->size > 1 ? comm_shm_setup(c) : FSDP_OK;
}

void comm_group_release(fsdp_comm *c) {
    comm_shm_free(c);
    comm_p2p_release_group(c);
    // teardown: nothing left to report a failure to, and the process is ending or moving on
    (void)MPI_Comm_free(&c->mpi);
}
