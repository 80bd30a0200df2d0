// progress_bench.c: how a collective in flight progresses while the rank computes, three ways (issue:
// "a progress thread, or MPI_Test polls between kernels: measure which, with one core per rank"):
//   none:   start the collective, compute, then wait (MPI moves only what it can without being called)
//   poll:   fsdp_comm_test between kernels (what the device does: docs/device.md, "Progress")
//   thread: a second thread calls fsdp_comm_test every --thread-us microseconds while the main thread
//           computes, then the main thread waits (only one thread calls MPI at a time: the launch's
//           MPI_THREAD_SERIALIZED suffices)
// The compute is a sequence of "kernels" of about --kernel-us each (an FMA loop on an L1-resident
// array, calibrated at start), as many as the collective takes alone, so compute ~ communication.
// Reported per mode: the step's time, the exposed communication (step - compute alone) and the share
// of the collective hidden (1 - exposed / collective alone). Run under mpirun across hosts (bench/
// multihost_progress.sh); every rank must get the same arguments.
//   progress_bench [--bytes B] [--collective reduce_scatter|all_gather|all_reduce] [--kernel-us U] [--thread-us T]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "core/timer.h"

enum { KERNEL_FLOATS = 2048 };
static float kernel_buf[KERNEL_FLOATS];  // (KERNEL_FLOATS,) the dummy kernel's data (L1-resident)
static volatile float kernel_sink;

static void kernel(long reps) {  // about reps * KERNEL_FLOATS * 2 flops, no memory traffic beyond L1
    for (long r = 0; r < reps; r++)
        for (int i = 0; i < KERNEL_FLOATS; i++) kernel_buf[i] = kernel_buf[i] * 0.999f + 0.001f;
    kernel_sink = kernel_buf[reps % KERNEL_FLOATS];
}

typedef struct {
    fsdp_comm *w;
    int coll;       // 0 all-gather, 1 reduce-scatter, 2 all-reduce
    float *a, *b;   // (total,) send/receive buffers
    size_t total;   // elements of the full buffer
} bench;

static fsdp_comm_request *start(const bench *x) {
    fsdp_comm_request *req = NULL;
    int N = fsdp_comm_size(x->w), R = fsdp_comm_rank(x->w);
    size_t per = x->total / (size_t)N;
    fsdp_status s = x->coll == 0 ? fsdp_iall_gather(x->w, x->a + (size_t)R * per, x->a, per, FSDP_F32, &req)
                    : x->coll == 1 ? fsdp_ireduce_scatter(x->w, x->a, x->b, per, FSDP_F32, FSDP_SUM, &req)
                                   : fsdp_iall_reduce(x->w, x->a, x->total, FSDP_F32, FSDP_SUM, &req);
    if (s != FSDP_OK) {
        fprintf(stderr, "progress_bench: %s\n", fsdp_last_error());
        return NULL;
    }
    return req;
}

typedef struct {
    fsdp_comm_request *req;
    long interval_ns;
    volatile int stop;
    int polls;
} poller;

static void *poll_thread(void *arg) {
    poller *p = arg;
    struct timespec ts = {0, p->interval_ns};
    int done = 0;
    while (!p->stop && !done) {
        if (fsdp_comm_test(p->req, &done) != FSDP_OK) break;
        p->polls++;
        if (!done) nanosleep(&ts, NULL);
    }
    return NULL;
}

// One step: the collective started, `kernels` kernels of `reps` each, completed per `mode`; seconds
// (the group's mean)
static double step(const bench *x, int mode, int kernels, long reps, long thread_ns) {
    fsdp_barrier(x->w);
    double t0 = fsdp_now_sec();
    fsdp_comm_request *req = mode >= 0 ? start(x) : NULL;
    if (mode >= 0 && !req) return -1.0;
    poller p = {req, thread_ns, 0, 0};
    pthread_t th;
    int threaded = mode == 2 && pthread_create(&th, NULL, poll_thread, &p) == 0;
    for (int k = 0; k < kernels; k++) {
        kernel(reps);
        if (mode == 1) {
            int done = 0;
            (void)fsdp_comm_test(req, &done);
        }
    }
    if (threaded) {
        p.stop = 1;
        pthread_join(th, NULL);
    }
    if (req && fsdp_comm_wait(req) != FSDP_OK) fprintf(stderr, "progress_bench: %s\n", fsdp_last_error());
    double dt = fsdp_now_sec() - t0;
    fsdp_all_reduce_double(x->w, &dt);
    return dt / fsdp_comm_size(x->w);
}

static double best_of(const bench *x, int mode, int kernels, long reps, long thread_ns) {
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t = step(x, mode, kernels, reps, thread_ns);
        if (t >= 0 && t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    fsdp_comm *w = NULL;
    if (fsdp_comm_world(&w, &argc, &argv) != FSDP_OK) return 1;
    size_t bytes = (size_t)64 << 20;
    int coll = 1;
    double kernel_us = 500, thread_us = 100;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--bytes") == 0) bytes = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--kernel-us") == 0) kernel_us = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--thread-us") == 0) thread_us = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--collective") == 0)
            coll = strcmp(argv[i + 1], "all_gather") == 0 ? 0 : strcmp(argv[i + 1], "all_reduce") == 0 ? 2 : 1;
        else {
            fprintf(stderr, "progress_bench: unknown flag %s\n", argv[i]);
            fsdp_comm_free(w);
            return 2;
        }
    }
    int R = fsdp_comm_rank(w), N = fsdp_comm_size(w);
    size_t total = bytes / sizeof(float) / (size_t)N * (size_t)N;
    bench x = {w, coll, calloc(total, sizeof(float)), calloc(total, sizeof(float)), total};
    if (!x.a || !x.b) return 1;
    // calibrate: reps per kernel so one kernel takes kernel_us (rank 0's figure, shared)
    double t0 = fsdp_now_sec();
    kernel(2000);
    double per_rep = (fsdp_now_sec() - t0) / 2000;
    fsdp_all_reduce_double(w, &per_rep);
    per_rep /= N;
    long reps = (long)(kernel_us * 1e-6 / per_rep) + 1;
    long thread_ns = (long)(thread_us * 1e3);
    double comm = best_of(&x, 0, 0, reps, thread_ns);  // the collective alone
    int kernels = (int)(comm / (kernel_us * 1e-6) + 0.5);
    double compute = best_of(&x, -1, kernels, reps, thread_ns);
    static const char *names[] = {"all_gather", "reduce_scatter", "all_reduce"};
    static const char *modes[] = {"none", "poll", "thread"};
    if (R == 0) {
        printf("# %d ranks, %s of %zu bytes (path %s), FSDP_COMM_ALGO %s; kernels of %.0f us, thread polls every %.0f us\n",
               N, names[coll], bytes, coll == 0 ? fsdp_comm_backend(w) : fsdp_comm_path(w, coll == 2, coll == 2 ? total : total / (size_t)N, FSDP_F32),
               fsdp_comm_algo_setting(), kernel_us, thread_us);
        printf("# collective alone %.1f ms, compute alone %.1f ms (%d kernels)\n", comm * 1e3, compute * 1e3, kernels);
        printf("# %-7s %10s %12s %8s\n", "mode", "step_ms", "exposed_ms", "hidden");
    }
    for (int mode = 0; mode < 3; mode++) {
        double t = best_of(&x, mode, kernels, reps, thread_ns);
        double exposed = t - compute;
        if (R == 0)
            printf("  %-7s %10.1f %12.1f %7.0f%%\n", modes[mode], t * 1e3, exposed * 1e3,
                   100.0 * (1.0 - exposed / comm));
    }
    free(x.a);
    free(x.b);
    fsdp_comm_free(w);
    return 0;
}
