// guard_device.c: the guard backend's table (guard_device.h). Memory, registration and enter / leave
// are guard_memory.c's; host memory, capabilities, streams, copies and the kernels are the cpu
// backend's (the kernels bound to the streams again, so each call opens the arena). Every collective
// runs to completion inside the call, with the device's memory open.
#include "device/cpu/cpu_device.h"
#include "device/cpu/cpu_kernels.h"
#include "device/guard/guard_device.h"
#include "device/guard/guard_memory.h"

static fsdp_status guard_open(fsdp_dev *d, int ordinal) {
    (void)ordinal;
    FSDP_CHECK(dev_guard_open(d));
    dev_host_kernels_bind(d, fsdp_kernels_cpu(), fsdp_kernels_cpu_bf16(), "guard", "guard-bf16");
    return FSDP_OK;
}

static void guard_capabilities(const fsdp_dev *d, fsdp_dev_caps *out) {
    cpu_backend_capabilities(d, out);  // the cpu's kernels, on host memory the host may not touch
    out->host_addressable = 0;
    out->zero_copy_shared = 0;
}

static fsdp_status finish(fsdp_stream *s, fsdp_status st) {
    dev_end(s);
    return st;
}

static fsdp_status guard_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                    fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, bytes, recv, all));
    return finish(s, fsdp_all_gather(c, send, recv, count, dt));
}

static fsdp_status guard_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                        fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, all, recv, bytes));
    return finish(s, fsdp_reduce_scatter(c, send, recv, count, dt, op));
}

static fsdp_status guard_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt,
                                    fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt);
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    return finish(s, fsdp_all_reduce(c, buf, count, dt, op));
}

const fsdp_backend_i fsdp_backend_guard = {
    .name = "guard",
    .kind = FSDP_DEVICE_GUARD,
    .open = guard_open,
    .close = dev_guard_close,
    .capabilities = guard_capabilities,
    .mem_info = cpu_backend_mem_info,
    .alloc = dev_guard_alloc,
    .free = dev_guard_free,
    .host_alloc = cpu_backend_alloc,
    .host_free = dev_free_after_streams,
    .register_host = dev_guard_register,
    .unregister_host = dev_guard_unregister,
    .enter = dev_guard_enter,
    .leave = dev_guard_leave,
    DEV_HOST_STREAM_ENTRIES,
    .all_gather = guard_all_gather,
    .all_gather_shared = dev_host_all_gather_shared,
    .reduce_scatter = guard_reduce_scatter,
    .all_reduce = guard_all_reduce,
    .broadcast = dev_host_broadcast,
    .kernels = dev_host_kernels,
};
