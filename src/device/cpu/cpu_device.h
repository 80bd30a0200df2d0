// cpu_device.h: the cpu backend ("cpu"): host memory from fsdp_alloc, work that runs when it is
// called (the host streams of backend_impl.h), collectives in flight as MPI requests, and the CPU
// kernels of this folder. The guard backend wraps it, and takes these entries from it.
#pragma once
#include "device/backend_impl.h"

extern const fsdp_backend_i fsdp_backend_cpu;

void cpu_backend_capabilities(const fsdp_dev *d, fsdp_dev_caps *out);
fsdp_status cpu_backend_mem_info(fsdp_dev *d, size_t *free_bytes, size_t *total_bytes);
void *cpu_backend_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);  // fsdp_alloc (zero-filled, accounted)

// The collectives of the cpu backend (cpu_comm.c): started as nonblocking requests and kept in flight
// on the stream (device_comm.h).
fsdp_status cpu_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
fsdp_status cpu_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                               fsdp_dtype dt, fsdp_reduce_op op);
fsdp_status cpu_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
