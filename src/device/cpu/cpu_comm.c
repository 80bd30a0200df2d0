// cpu_comm.c: the cpu backend's collectives on streams. all_gather, reduce_scatter and all_reduce
// start as nonblocking requests (fsdp_i*, which the local and shared-memory paths complete at once)
// and stay in flight on the stream (host_stream.c) until something needs their buffers or waits.
#include "device/cpu/cpu_device.h"

fsdp_status cpu_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, bytes, recv, all));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_iall_gather(c, send, recv, count, dt, &req);
    if (st != FSDP_OK) return dev_start_failed(st, req);
    return dev_stream_push(s, req, send, bytes, recv, all);
}

fsdp_status cpu_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                               fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, all, recv, bytes));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_ireduce_scatter(c, send, recv, count, dt, op, &req);
    if (st != FSDP_OK) return dev_start_failed(st, req);
    return dev_stream_push(s, req, send, all, recv, bytes);
}

fsdp_status cpu_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt);
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_iall_reduce(c, buf, count, dt, op, &req);
    if (st != FSDP_OK) return dev_start_failed(st, req);
    return dev_stream_push(s, req, buf, bytes, buf, bytes);
}
