// comm_group.h: the process group every transport works on (not part of the public API): who the
// ranks are, and one handle per transport's state, set up where the transport applies.
#pragma once
#include <mpi.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/comm_transport.h"

typedef enum { COMM_LOCAL, COMM_MPI } comm_backend;

typedef struct comm_shm comm_shm;                // shared-memory transport's window and regions (comm_shm.c)
typedef struct comm_p2p_group comm_p2p_group;    // point-to-point transport's tags and scratch (comm_p2p.c)
typedef struct comm_hier_group comm_hier_group;  // hierarchical transport's sub-groups (comm_hier.c)

struct fsdp_comm {
    comm_backend backend;
    int rank, size;
    int owns_mpi;               // the world that called MPI_Init: finalizes on free
    MPI_Comm mpi;               // COMM_MPI only
    comm_shm *shm;              // NULL unless every rank is on one node and the window is usable
    comm_p2p_group *p2p;        // NULL until the first point-to-point reduction on the group
    comm_hier_group *hier;      // NULL unless the group is laid out host by host, several ranks per host
    const fsdp_comm_transport *device;  // installed from above (fsdp_comm_set_device_transport), or NULL
    void *device_ctx;                   // its context
    int check_sequence;         // FSDP_DEBUG=DETAIL: compare (call, kind, count, elements per MPI call) across ranks first
    int64_t calls_issued;       // collectives issued on this group (the sequence number)
    fsdp_comm_stats stats;
    char host[MPI_MAX_PROCESSOR_NAME];  // this process's host (MPI_Get_processor_name), cached on first use
};

// Takes m into c (a zeroed group of backend COMM_MPI): its rank and size, and the shared-memory
// transport where every rank shares a node (collective over m). The caller releases c on failure.
fsdp_status comm_group_init(fsdp_comm *c, MPI_Comm m);
// fsdp_comm_free's first step (comm_device.c): the device transport installed on c, if any, is told (its
// detach) and forgotten.
void comm_device_detach(fsdp_comm *c);
// Frees what comm_group_init and the transports set up on c (not the hierarchy, not MPI itself), and
// m (MPI_Comm_free); c itself stays allocated.
void comm_group_release(fsdp_comm *c);
