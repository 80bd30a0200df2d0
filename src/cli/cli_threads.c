// cli_threads.c: threads per rank for fsdp-train and fsdp-minimal (see cli_threads.h).
#include "cli/cli_threads.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "comm/comm_node.h"
#include "core/tunables.h"

static int wait_is_passive(void) {
    const char *p = getenv("OMP_WAIT_POLICY");
    return p && strcasecmp(p, "passive") == 0;
}

// OMP_WAIT_POLICY as this process started (the OpenMP runtime read it then); -1: not looked yet
static int passive_at_start = -1;

int cli_threads_check_env(const char *prog, int requested) {
    const char *v = getenv("OMP_NUM_THREADS");
    if (requested > 0 || !v || !*v) return 0;  // --threads wins over it; unset
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);  // "N", or a nested list "N,M,...": its first entry is this level's
    if (end != v && (*end == '\0' || *end == ',') && !errno && n >= 0 && n <= CLI_THREADS_MAX) return 0;
    fprintf(stderr, "%s: OMP_NUM_THREADS=%s: expected an integer in [0, %d] (OpenMP threads per rank, as --threads)\n",
            prog, v, CLI_THREADS_MAX);
    return -1;
}

void cli_threads_before_mpi(char **argv, int requested) {
    passive_at_start = wait_is_passive();
    int bound = 0, ranks = fsdp_launcher_local_ranks(&bound);
    if (ranks <= 1) return;  // one process: the OpenMP runtime throttles its own spinning
    // Before MPI the masks of the other ranks are unknown: assume they share this one's unless the
    // launcher bound each rank to its own CPUs.
    fsdp_threads_choice c = fsdp_threads_choose(requested, fsdp_affinity_cores(), ranks, bound ? 1 : ranks);
    if (!c.oversubscribed) return;
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    if (c.threads > 1 && !getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);  // returns only on failure: then carry on, spinning
    }
}

fsdp_status cli_threads_setup(const char *prog, fsdp_comm *world, int requested, fsdp_threads_choice *out) {
    int ranks = 1, sharing = 1;
    FSDP_CHECK(fsdp_comm_node_cpus(world, &ranks, &sharing));
    *out = fsdp_threads_choose(requested, fsdp_affinity_cores(), ranks, sharing);
    omp_set_num_threads(out->threads);
    double over = out->oversubscribed;  // any rank oversubscribed: rank 0 says so once
    FSDP_CHECK(fsdp_all_reduce_double(world, &over));
    if (fsdp_comm_rank(world) != 0) return FSDP_OK;
    if (passive_at_start < 0) passive_at_start = wait_is_passive();
    char line[160];
    fsdp_threads_describe(out, line, sizeof line);
    if (over > 0)
        fprintf(stderr, "%s: note: oversubscribed: ranks x threads exceed the cores they share (rank 0: %d rank(s) x %d "
                        "thread(s) on %d core%s); waits yield the CPU%s\n",
                prog, out->sharing_ranks, out->threads, out->affinity_cores, out->affinity_cores == 1 ? "" : "s",
                out->threads > 1 && !passive_at_start
                    ? "; OpenMP's idle threads still spin: set OMP_WAIT_POLICY=passive to make them yield too"
                    : "");
    const char *dbg = fsdp_tunable(FSDP_ENV_DEBUG);
    if (dbg && (strcmp(dbg, "INFO") == 0 || strcmp(dbg, "DETAIL") == 0)) fprintf(stderr, "%s: %s\n", prog, line);
    return FSDP_OK;
}
