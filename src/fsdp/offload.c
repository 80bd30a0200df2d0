// offload.c: --offload-dir (ZeRO-Infinity style): a rank's fp32 master shards, gradient shards and
// AdamW moments live in memory-mapped files under DIR instead of anonymous memory, so the kernel can
// page them out and a rank can hold more optimizer state than its RAM. Pages of the unit about to be
// used are requested ahead (madvise WILLNEED: a hint, the memory is not touched); the files are scratch
// space, removed when the state is freed. The mappings are registered with the device, whose kernels
// and copies use them in place (the CUDA device will register them as pinned host memory).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <unistd.h>

#include "fsdp/fsdp_internal.h"

// Bytes now mapped by fsdp_offload_map, across every state of the process (mapped and unmapped on
// the thread that builds and frees a state). The report's "offloaded" figure: a flag that was parsed
// but ignored shows as 0 there.
static size_t offload_mapped_bytes;

size_t fsdp_offload_bytes(void) { return offload_mapped_bytes; }

float *fsdp_offload_map(fsdp_dev *dev, const char *dir, int rank, const char *what, int index, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%05d.%s.%d.bin", dir, rank, what, index);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        fsdp_error(FSDP_ERR_IO, "--offload-dir %s: cannot create %s: %s", dir, path, strerror(errno));
        return NULL;
    }
    size_t len = bytes ? bytes : 64;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0) p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    unlink(path);  // the mapping keeps the file alive; nothing is left behind, even after a crash
    if (p == MAP_FAILED) {
        fsdp_error(FSDP_ERR_IO, "--offload-dir %s: cannot map %zu bytes: %s", dir, bytes, strerror(err));
        return NULL;
    }
    if (fsdp_dev_register(dev, p, len, what) != FSDP_OK) {
        munmap(p, len);
        return NULL;
    }
    offload_mapped_bytes += bytes;
    return p;  // zero-filled: a new file reads as zeros
}

void fsdp_offload_unmap(fsdp_dev *dev, float *p, size_t bytes) {
    if (!p) return;
    fsdp_dev_unregister(dev, p);
    munmap(p, bytes ? bytes : 64);
    offload_mapped_bytes -= bytes;
}

void fsdp_offload_prefetch(const float *p, size_t bytes) {
    if (!p || !bytes) return;
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)4095;
    madvise((void *)start, bytes + ((uintptr_t)p - start), MADV_WILLNEED);
}
