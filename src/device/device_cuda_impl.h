// device_cuda_impl.h: the CUDA device's half of the layer (device_cuda.c), called by device.c and
// device_comm.c when a device's kind is FSDP_DEVICE_CUDA. Not part of the API. Without CUDA in the
// build, dev_cuda_open fails with a message saying so and nothing else is reached.
#pragma once
#include "device/device_cuda.h"
#include "device/device_impl.h"

fsdp_status dev_cuda_open(fsdp_dev *d, int ordinal);  // ordinal -1: the local rank's GPU
void dev_cuda_close(fsdp_dev *d);
void *dev_cuda_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
void dev_cuda_free(fsdp_dev *d, void *p);
void *dev_cuda_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
void dev_cuda_host_free(fsdp_dev *d, void *p);
fsdp_status dev_cuda_register(fsdp_dev *d, void *p, size_t bytes);
void dev_cuda_unregister(fsdp_dev *d, void *p);
fsdp_status dev_cuda_stream_synchronize(fsdp_stream *s);
// The failure a kernel noted on s (fsdp_cuda_check), returned once.
fsdp_status dev_cuda_stream_status(fsdp_stream *s);
fsdp_status dev_cuda_event_create(fsdp_event *e);
void dev_cuda_event_destroy(fsdp_event *e);
fsdp_status dev_cuda_event_record(fsdp_event *e, fsdp_stream *s);
fsdp_status dev_cuda_stream_wait_event(fsdp_stream *s, fsdp_event *e);
fsdp_status dev_cuda_event_synchronize(fsdp_event *e);
int dev_cuda_event_query(fsdp_event *e);
// Any direction (unified addressing tells it apart), enqueued on s.
fsdp_status dev_cuda_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes);
fsdp_status dev_cuda_copy_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows);
fsdp_status dev_cuda_memset(fsdp_stream *s, void *dst, int byte, size_t bytes);
// Pinned host memory of at least `bytes` for staging a collective on s (one buffer per stream, grown).
void *dev_cuda_stage(fsdp_stream *s, size_t bytes);
const struct fsdp_kernels *dev_cuda_kernels(int bf16);
