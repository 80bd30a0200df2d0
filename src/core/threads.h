// threads.h: how many OpenMP threads a rank runs, chosen so ranks never oversubscribe their cores.
// Default: the CPUs this process may run on (its affinity mask) divided by the ranks that share them,
// at least 1. --threads (the caller's request) and OMP_NUM_THREADS override it.
#pragma once

typedef enum { FSDP_THREADS_DEFAULT, FSDP_THREADS_FLAG, FSDP_THREADS_ENV } fsdp_threads_source;

typedef struct {
    int threads;                 // OpenMP threads for this rank
    fsdp_threads_source source;  // where `threads` came from
    int affinity_cores;          // CPUs in this process's affinity mask
    int ranks_on_node;           // processes of the job on this node (1 for a plain process)
    int sharing_ranks;           // of those, the ones whose masks overlap this one's (itself included)
    int oversubscribed;          // threads * sharing_ranks > affinity_cores: waits should not spin
} fsdp_threads_choice;

// CPUs in this process's affinity mask (sched_getaffinity); the online CPUs when it cannot be read.
int fsdp_affinity_cores(void);
// The choice for a rank: `requested` > 0 (the --threads flag) wins, then a positive OMP_NUM_THREADS
// (its first entry), then max(1, affinity_cores / sharing_ranks).
fsdp_threads_choice fsdp_threads_choose(int requested, int affinity_cores, int ranks_on_node, int sharing_ranks);
// "threads per rank N (affinity M cores, K ranks on node, S sharing these cores[, from ...])" into buf (size bytes); returns buf.
const char *fsdp_threads_describe(const fsdp_threads_choice *c, char *buf, unsigned size);
