// test_threads.c: the threads-per-rank policy (core/threads.c): default = affinity cores / ranks sharing
// them (at least 1), --threads then OMP_NUM_THREADS override it, and the oversubscription flag.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/threads.h"

static int failures;
static void expect(int cond, const char *what) {
    if (!cond) failures++;
    printf("%s %s\n", cond ? "ok  " : "FAIL", what);
}

int main(void) {
    unsetenv("OMP_NUM_THREADS");
    expect(fsdp_affinity_cores() >= 1, "the affinity mask has a CPU");
    fsdp_threads_choice c = fsdp_threads_choose(0, 16, 2, 2);
    expect(c.threads == 8 && c.source == FSDP_THREADS_DEFAULT && !c.oversubscribed, "16 cores, 2 ranks share: 8");
    c = fsdp_threads_choose(0, 8, 2, 1);
    expect(c.threads == 8 && !c.oversubscribed, "bound to 8 cores of its own: 8");
    c = fsdp_threads_choose(0, 2, 3, 3);
    expect(c.threads == 1 && c.oversubscribed, "3 ranks on 2 cores: 1 thread, oversubscribed");
    c = fsdp_threads_choose(0, 7, 2, 2);
    expect(c.threads == 3 && !c.oversubscribed, "7 cores, 2 ranks: 3 (rounds down)");
    c = fsdp_threads_choose(4, 2, 1, 1);
    expect(c.threads == 4 && c.source == FSDP_THREADS_FLAG && c.oversubscribed, "--threads 4 on 2 cores");
    setenv("OMP_NUM_THREADS", "3,2", 1);
    c = fsdp_threads_choose(0, 16, 2, 2);
    expect(c.threads == 3 && c.source == FSDP_THREADS_ENV, "OMP_NUM_THREADS=3,2: 3");
    c = fsdp_threads_choose(5, 16, 2, 2);
    expect(c.threads == 5 && c.source == FSDP_THREADS_FLAG, "--threads beats OMP_NUM_THREADS");
    const char *bad[] = {"0", "abc", "-2", "3x", ""};
    for (int i = 0; i < 5; i++) {
        setenv("OMP_NUM_THREADS", bad[i], 1);
        c = fsdp_threads_choose(0, 16, 4, 4);
        char what[80];
        snprintf(what, sizeof what, "OMP_NUM_THREADS='%s' is ignored: default 4", bad[i]);
        expect(c.threads == 4 && c.source == FSDP_THREADS_DEFAULT, what);
    }
    char line[160];
    c = fsdp_threads_choose(0, 16, 4, 4);
    fsdp_threads_describe(&c, line, sizeof line);
    expect(strcmp(line, "threads per rank 4 (affinity 16 cores, 4 ranks on node, 4 sharing these cores)") == 0, line);
    printf("test_threads: %d failed\n", failures);
    return failures ? 1 : 0;
}
