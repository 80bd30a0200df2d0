// comm_transport.h: the collective-transport interface (NCCL's `struct ncclTransport`, ggml's backend
// `_i` structs): one struct of function pointers per way of moving data between the ranks of a group,
// with a context of its own. comm.c runs every collective through one; comm_path.c picks which. Built in:
// shared memory (comm_shm.c), point to point (comm_p2p.c), hierarchical (comm_hier.c) and MPI's own
// collectives (comm_mpi_transport.c); a device backend adds its own (NCCL on CUDA buffers) with
// fsdp_comm_set_device_transport (comm.h).
//
// Semantics are comm.h's (counts per rank for all-gathers and reduce-scatters, the buffer for
// all-reduces and broadcasts). Entries marked optional may be NULL: the transport then never gets that
// kind of collective (a missing nonblocking form: the blocking form runs and the request is complete).
// Every entry gets the group c (rank, size: comm.h's accessors) and the transport's context ctx (the
// one it was installed with; NULL for the built-in transports, whose state hangs off c).
#pragma once
#include <stddef.h>

#include "comm/comm.h"

// The kinds of collective, as the sequence check numbers them
typedef enum {
    FSDP_COLL_ALL_GATHER = 1,
    FSDP_COLL_REDUCE_SCATTER = 2,
    FSDP_COLL_ALL_REDUCE = 3,
    FSDP_COLL_BROADCAST = 4,
} fsdp_coll_kind;

typedef struct fsdp_comm_transport {
    const char *name;  // what fsdp_comm_path reports: "shm", "p2p", "hier", "mpi", "nccl"
    // (optional) 1 when this transport can run a collective on buf: a device transport claims its
    // device's buffers. NULL: every buffer.
    int (*accepts)(void *ctx, const void *buf);
    // blocking forms (each optional)
    fsdp_status (*all_gather)(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt);
    fsdp_status (*reduce_scatter)(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                  fsdp_reduce_op op);
    fsdp_status (*all_reduce)(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
    fsdp_status (*broadcast)(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, int root);
    // nonblocking starts (each optional): *op = the collective in flight, completed by test/wait and
    // then released (release also after a failed test or wait). On an error *op is NULL.
    fsdp_status (*iall_gather)(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt,
                               void **op);
    fsdp_status (*ireduce_scatter)(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                   fsdp_dtype dt, fsdp_reduce_op op, void **op_out);
    fsdp_status (*iall_reduce)(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                               void **op_out);
    fsdp_status (*test)(void *op, int *done);  // progresses; *done = 1 when complete (required with a start)
    fsdp_status (*wait)(void *op);             // completes (required with a start)
    void (*release)(void *op);                 // frees (required with a start)
    // Bytes this rank sends in a collective of `kind` of count elements of dt (per rank for all-gathers
    // and reduce-scatters), for the statistics. Broadcasts are accounted by comm.c (the root's buffer).
    size_t (*bytes_sent)(const fsdp_comm *c, fsdp_coll_kind kind, size_t count, fsdp_dtype dt);
    // (optional, device transports) c is being freed (fsdp_comm_free) while t is installed on it: t lets go
    // of what it holds for c (NCCL: its communicator). Called before c's MPI communicator goes.
    void (*detach)(fsdp_comm *c, void *ctx);
    // (optional, device transports) the watchdog gave up (fsdp_comm_abort_device): t ends its collectives
    // in flight on c without waiting for the peers (NCCL: ncclCommAbort). Called from another thread
    // than the one blocked in c's collectives; the process exits afterwards.
    void (*abort)(fsdp_comm *c, void *ctx);
} fsdp_comm_transport;

// The bytes of the flat exchanges: every rank's block to every peer (all-gather, reduce-scatter), a
// ring's 2 (size-1)/size of the buffer (all-reduce). For transports whose traffic is that.
static inline size_t fsdp_comm_flat_bytes(int size, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    size_t esize = fsdp_dtype_size(dt), peers = (size_t)(size - 1);
    if (kind == FSDP_COLL_ALL_REDUCE) return 2 * count * esize * peers / (size_t)size;
    return count * esize * peers;
}
