// cuda_backend.h: the cuda backend's table (cuda_device.c) and what its collectives (cuda_comm.c)
// take from the device. C only: the CUDA kernels include cuda_device.h instead.
#pragma once
#include "device/backend_impl.h"
#include "device/cuda/cuda_device.h"

extern const fsdp_backend_i fsdp_backend_cuda;

// cuda_device.c
fsdp_status dev_cuda_stream_synchronize(fsdp_stream *s);
// The failure a kernel noted on s (fsdp_cuda_check), returned once.
fsdp_status dev_cuda_stream_status(fsdp_stream *s);
// Any direction (unified addressing tells it apart), enqueued on s.
fsdp_status dev_cuda_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes);
// Pinned host memory of at least `bytes` for staging a collective on s (one buffer per stream, grown).
void *dev_cuda_stage(fsdp_stream *s, size_t bytes);

// cuda_comm.c: through NCCL, enqueued on s (cuda_nccl.h), where the group's path is NCCL (--comm nccl,
// or auto between ranks with a GPU each); else staged through pinned host memory (the stream's work
// first, the bytes to the host, the host collective, the result back), complete when the call returns;
// staged with one rank in the group: the identity, left on the stream (a device copy where recv is not
// send; nothing else), as NCCL's would.
fsdp_status cuda_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
fsdp_status cuda_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                fsdp_dtype dt, fsdp_reduce_op op);
fsdp_status cuda_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
fsdp_status cuda_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root);
