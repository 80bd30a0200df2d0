// threads.c: the threads-per-rank policy (see threads.h). Knows nothing about MPI: the caller says how
// many ranks share this process's CPUs.
#include "core/threads.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int fsdp_affinity_cores(void) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0) return CPU_COUNT(&mask);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

// The first entry of OMP_NUM_THREADS ("4" or "4,2") when it is a positive integer; 0 otherwise.
static int env_threads(void) {
    const char *v = getenv("OMP_NUM_THREADS");
    if (!v) return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end != v && (*end == '\0' || *end == ',') && n > 0 && n <= 1 << 20 ? (int)n : 0;
}

fsdp_threads_choice fsdp_threads_choose(int requested, int affinity_cores, int ranks_on_node, int sharing_ranks) {
    fsdp_threads_choice c = {0, FSDP_THREADS_DEFAULT, affinity_cores > 0 ? affinity_cores : 1,
                             ranks_on_node > 0 ? ranks_on_node : 1, sharing_ranks > 0 ? sharing_ranks : 1, 0};
    int from_env = env_threads();
    if (requested > 0) {
        c.threads = requested;
        c.source = FSDP_THREADS_FLAG;
    } else if (from_env > 0) {
        c.threads = from_env;
        c.source = FSDP_THREADS_ENV;
    } else {
        c.threads = c.affinity_cores / c.sharing_ranks;
        if (c.threads < 1) c.threads = 1;
    }
    c.oversubscribed = (long)c.threads * c.sharing_ranks > c.affinity_cores;
    return c;
}

const char *fsdp_threads_describe(const fsdp_threads_choice *c, char *buf, unsigned size) {
    static const char *const from[] = {"", ", from --threads", ", from OMP_NUM_THREADS"};
    snprintf(buf, size, "threads per rank %d (affinity %d cores, %d ranks on node, %d sharing these cores%s)",
             c->threads, c->affinity_cores, c->ranks_on_node, c->sharing_ranks, from[c->source]);
    return buf;
}
