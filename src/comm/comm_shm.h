// comm_shm.h: the shared-memory transport (comm_shm.c): collectives among the ranks of a group that
// all run on one node, through an MPI shared-memory window, summed here in rank order. Also the
// shared buffers of comm.h (fsdp_comm_alloc_shared and the zero-copy reads). Not part of the public API.
#pragma once
#include "comm/comm_group.h"

extern const fsdp_comm_transport comm_shm_transport;  // all-gather, reduce-scatter, all-reduce; blocking

// Collective over c (size > 1): sets c->shm where every rank of c shares this node and the window can
// be made (not with FSDP_COMM_NO_SHM), else leaves it NULL.
fsdp_status comm_shm_setup(fsdp_comm *c);
void comm_shm_free(fsdp_comm *c);  // its window and every shared buffer still allocated; c->shm = NULL
// comm.h's semantics, on a group with c->shm; each returns FSDP_OK or an error with a message
fsdp_status comm_shm_all_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
fsdp_status comm_shm_all_gather_shared(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                       const size_t (*copy)[2], size_t n_copy);
fsdp_status comm_shm_reduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                    fsdp_reduce_op op);
fsdp_status comm_shm_all_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
