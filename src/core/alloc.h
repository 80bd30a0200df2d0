// alloc.h: 64-byte aligned allocation with memory accounting by category.
// Every byte the library holds for model state goes through fsdp_alloc so that the profiler can
// report current and peak bytes for parameters, gradients, optimizer state, activations and
// communication buffers, and compare them with the OS's peak RSS.
#pragma once
#include <stddef.h>

#include "core/status.h"

typedef enum {
    FSDP_MEM_PARAMS = 0,   // parameters a rank keeps (under FSDP: its fp32 shards)
    FSDP_MEM_UNSHARDED,    // FSDP's gathered (unsharded) parameter and gradient buffers
    FSDP_MEM_GRADS,        // gradients a rank keeps (under FSDP: its gradient shards)
    FSDP_MEM_OPTIM,
    FSDP_MEM_ACTIVATIONS,
    FSDP_MEM_COMM,         // communication buffers, the shared-memory collectives' window included
    FSDP_MEM_WORKSPACE,    // kernel scratch (GEMM packing panels): grown to the largest product, kept
    FSDP_MEM_OTHER,
    FSDP_MEM_NCATEGORIES,
} fsdp_mem_category;

#define FSDP_ALIGNMENT 64

// Keeps glibc from returning freed memory to the kernel (first-touch page faults are expensive on
// these machines) and from serving large blocks with mmap. Idempotent; call once at start-up.
void fsdp_mem_init(void);

// Returns zero-filled, FSDP_ALIGNMENT-aligned memory of `bytes`, or NULL (with fsdp_error set).
// Blocks come from plain malloc (not aligned_alloc, whose extra alignment room keeps a freed block from
// serving the next request of the same size), so a buffer freed and allocated again each step reuses
// its hole and the heap stays as large as the accounted peak.
void *fsdp_alloc(size_t bytes, fsdp_mem_category cat);
void fsdp_free(void *ptr);  // NULL is fine

// Accounts `bytes` of memory obtained elsewhere (e.g. MPI shared-memory windows): +1 on allocation,
// -1 on release.
void fsdp_mem_track(fsdp_mem_category cat, size_t bytes, int sign);

const char *fsdp_mem_category_name(fsdp_mem_category cat);
size_t fsdp_mem_current(fsdp_mem_category cat);
size_t fsdp_mem_peak(fsdp_mem_category cat);
size_t fsdp_mem_current_total(void);
size_t fsdp_mem_peak_total(void);
void fsdp_mem_reset_peaks(void);  // peaks := current
size_t fsdp_mem_os_peak_rss(void);  // from getrusage, bytes

// What the OS reports for this process now (Linux /proc/self/status and smaps_rollup), in bytes.
// RSS counts every page mapped, so on a node it also counts the peers' shared-memory pages this rank
// reads (zero-copy collectives) and the code of every library; the proportional set size (PSS)
// splits each shared page among the processes that map it, so the ranks' PSS values add up to the
// node's memory. data_pss = anonymous + shared-memory PSS: the data a rank really holds.
typedef struct {
    size_t peak_rss, rss;         // VmHWM, VmRSS
    size_t anon, file, shmem;     // RssAnon, RssFile (code, libraries, mapped files), RssShmem
    size_t pss_anon, pss_file, pss_shmem;
    size_t data_pss;              // pss_anon + pss_shmem
} fsdp_os_memory;
// Returns 0 and fills *m, or -1 where /proc is not readable (fields then 0, peak_rss from getrusage).
int fsdp_mem_os_usage(fsdp_os_memory *m);
