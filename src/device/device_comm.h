// device_comm.h: collectives on device buffers, enqueued on a stream.
//
// The collective starts after the work queued on s before it; later work on s, and any stream that
// waits for an event recorded on s after it, sees its result. Semantics are comm.h's (NCCL's): counts
// per rank, all_gather in place when send == recv + rank*count, AVG divides by the group size. Buffers
// are memory of s's device (fsdp_dev_alloc or registered); every rank of c makes the same calls in the
// same order. Which backend moves the bytes is chosen when the world is created (comm.h: "mpi+shm",
// "mpi", "local"); NCCL will plug in here for the CUDA device, on its comm stream.
//
// CPU device: all_gather, reduce_scatter and all_reduce start as nonblocking requests (fsdp_i*, which
// the local and shared-memory backends complete at once) and stay in flight on s until an event on s
// is synchronized or waited for, s is synchronized, or a later operation on s needs their buffers
// (kernels: always). Until then their buffers must not be touched from another stream without an event.
// broadcast and all_reduce_double run to completion.
// Guard device: every collective runs to completion inside the call, with the device's memory open.
// CUDA device: staged through pinned host memory, complete when the call returns; in a group of one rank
// the identity (a device copy) enqueued on s, so another stream needs the event as above.
#pragma once
#include <stddef.h>

#include "comm/comm.h"
#include "core/status.h"
#include "device/device.h"
#include "tensor/tensor.h"

// send (count,), recv (size*count,)
fsdp_status fsdp_dev_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
// send (count,) in shared memory, recv (size*count,): fsdp_all_gather_shared (only the element ranges
// in copy, n_copy pairs [begin, end), are written to recv; the peers' sends are read in place after it)
fsdp_status fsdp_dev_all_gather_shared(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, const size_t (*copy)[2], size_t n_copy);
// send (size*count,), recv (count,)
fsdp_status fsdp_dev_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                    fsdp_dtype dt, fsdp_reduce_op op);
// buf (count,), in place
fsdp_status fsdp_dev_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
// buf (count,): root's values on every rank
fsdp_status fsdp_dev_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root);
// --comm / FSDP_DEVICE_COMM: whether the device can run its collectives as `mode` says: "auto" (the
// device's best path for each group: NCCL on cuda between ranks that each have their own GPU, else the
// host's), "host" (comm/'s host transports: MPI, shared memory; a GPU device stages through pinned host
// memory) or a transport of the device ("nccl"). FSDP_OK, or FSDP_ERR_INVALID_ARG with one line saying
// what is missing (no such transport on this device, none in this build, the library not loading).
// Conditions that need the group (two ranks on one GPU) are checked at the group's first collective.
fsdp_status fsdp_dev_comm_check(const fsdp_dev *d, const char *mode);
// host_value: one host double (a loss or norm already read back), summed over c's ranks
fsdp_status fsdp_dev_all_reduce_double(fsdp_stream *s, fsdp_comm *c, double *host_value);

// Shared-memory windows, for devices whose capabilities say zero_copy_shared (the engine's zero-copy
// shards and gradient staging): memory every rank of c on this host reads in place
// (fsdp_comm_alloc_shared), zero-filled; NULL where the device or the group has none (the caller then
// uses fsdp_dev_alloc). Both calls are collective; free takes NULL.
void *fsdp_dev_alloc_shared(fsdp_dev *d, fsdp_comm *c, size_t bytes);
void fsdp_dev_free_shared(fsdp_dev *d, fsdp_comm *c, void *p);
// Addresses in those windows, for kernels to read: where rank q holds what p addresses
// (fsdp_comm_shared_at), and where the ranks' pieces [p, p + bytes) lie one after another
// (fsdp_comm_shared_concat); NULL where they do not (or p is not in a window of this device).
const void *fsdp_dev_shared_at(const fsdp_dev *d, const fsdp_comm *c, const void *p, int q);
const void *fsdp_dev_shared_concat(const fsdp_dev *d, const fsdp_comm *c, const void *p, size_t bytes);
