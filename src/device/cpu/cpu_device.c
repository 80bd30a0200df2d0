// cpu_device.c: the cpu backend's table (cpu_device.h). Its streams, events, copies and memsets are
// the host streams' (host_stream.c); its kernels the tables of this folder (table.c) bound to them.
#include <string.h>
#include <unistd.h>

#include "core/mem_available.h"
#include "device/cpu/cpu_device.h"
#include "device/cpu/cpu_kernels.h"

static fsdp_status cpu_open(fsdp_dev *d, int ordinal) {
    (void)ordinal;
    dev_host_kernels_bind(d, fsdp_kernels_cpu(), fsdp_kernels_cpu_bf16(), "cpu", "cpu-bf16");
    return FSDP_OK;
}

static void cpu_close(fsdp_dev *d) { (void)d; }  // memory still allocated stays its owners' to free

void cpu_backend_capabilities(const fsdp_dev *d, fsdp_dev_caps *out) {
    (void)d;
    out->host_addressable = 1;
    out->host_memory = 1;
    out->zero_copy_shared = 1;
    out->runs_at_call = 1;
    out->gemm_f32 = cpu_gemm_name();
    out->gemm_bf16 = cpu_gemm_bf16_name();
    out->gemm_bf16_emulated = strcmp(out->gemm_bf16, "emulate") == 0;
    out->gemm_pack_a_bytes = sizeof(float) * CPU_SGEMM_MC * CPU_SGEMM_KC;  // sgemm_avx512.c's panels
    out->gemm_pack_b_bytes = sizeof(float) * CPU_SGEMM_KC * CPU_SGEMM_NC;
}

fsdp_status cpu_backend_mem_info(fsdp_dev *d, size_t *free_bytes, size_t *total_bytes) {
    (void)d;
    fsdp_mem_available_info avail = fsdp_mem_available();
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (avail.bytes < 0 || pages <= 0 || page <= 0)
        return fsdp_error(FSDP_ERR_IO, "device cpu: the host's memory could not be read (/proc/meminfo)");
    *free_bytes = (size_t)avail.bytes;
    *total_bytes = (size_t)pages * (size_t)page;
    return FSDP_OK;
}

void *cpu_backend_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    (void)d;
    return fsdp_alloc(bytes, cat);
}

static fsdp_status cpu_register(fsdp_dev *d, void *p, size_t bytes, const char *what) {
    (void)d, (void)p, (void)bytes, (void)what;
    return FSDP_OK;  // host memory: the kernels reach it as it is
}

static void cpu_unregister(fsdp_dev *d, void *p) { (void)d, (void)p; }

const fsdp_backend_i fsdp_backend_cpu = {
    .name = "cpu",
    .kind = FSDP_DEVICE_CPU,
    .open = cpu_open,
    .close = cpu_close,
    .capabilities = cpu_backend_capabilities,
    .mem_info = cpu_backend_mem_info,
    .alloc = cpu_backend_alloc,
    .free = dev_free_after_streams,
    .host_alloc = cpu_backend_alloc,
    .host_free = dev_free_after_streams,  // collectives may run on host memory too
    .register_host = cpu_register,
    .unregister_host = cpu_unregister,
    DEV_HOST_STREAM_ENTRIES,
    .all_gather = cpu_all_gather,
    .all_gather_shared = dev_host_all_gather_shared,
    .reduce_scatter = cpu_reduce_scatter,
    .all_reduce = cpu_all_reduce,
    .broadcast = dev_host_broadcast,
    .kernels = dev_host_kernels,
};
