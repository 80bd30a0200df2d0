// mem_available.h: how much memory this process's host can still give it, before anything is allocated
// (the tools' up-front memory check, cli/memory_check.h). The host's MemAvailable (/proc/meminfo), or
// less where a memory cgroup limits this process: for cgroup v2 memory.max, for v1
// memory.limit_in_bytes, of its cgroup or any ancestor, minus that group's usage, with the group's page
// cache counted as available (the kernel reclaims it before failing an allocation).
#pragma once

typedef struct {
    double bytes;        // what is available, in bytes; < 0 when nothing could be read
    const char *source;  // what set it: "MemAvailable", "cgroup memory.max", "cgroup memory.limit_in_bytes",
                         // or "FSDP_TEST_MEM_AVAILABLE"; "" when unknown
} fsdp_mem_available_info;

// Reads it now (a few small files under /proc and /sys). For tests, the environment variable
// FSDP_TEST_MEM_AVAILABLE (a byte count, e.g. 1e9) stands in for every source.
fsdp_mem_available_info fsdp_mem_available(void);
