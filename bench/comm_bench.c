// comm_bench.c: bandwidth sweep of all-gather, reduce-scatter and all-reduce from 64 KiB to 256 MiB
// (bytes of the full buffer), nccl-tests style: algorithm bandwidth = bytes / time, bus bandwidth =
// algbw * (n-1)/n (all-reduce: 2(n-1)/n). Run under mpirun; FSDP_COMM_NO_SHM=1 measures MPI's own
// collectives instead of the shared-memory path; FSDP_COMM_ALGO=mpi|p2p|auto picks how reduce-scatters and
// all-reduces run there (MPI's collectives or point to point; the `path` column says which ran).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/timer.h"

int main(int argc, char **argv) {
    fsdp_comm *w = NULL;
    if (fsdp_comm_world(&w, &argc, &argv) != FSDP_OK) return 1;
    int R = fsdp_comm_rank(w), N = fsdp_comm_size(w);
    size_t min_bytes = (size_t)64 << 10, max_bytes = (size_t)256 << 20;  // comm-bench [MIN_BYTES [MAX_BYTES]]
    if (argc > 1) min_bytes = strtoull(argv[1], NULL, 10);
    if (argc > 2) max_bytes = strtoull(argv[2], NULL, 10);
    if (min_bytes < 4096 || max_bytes < min_bytes) {
        fprintf(stderr, "comm-bench: want 4096 <= MIN_BYTES <= MAX_BYTES, got %zu and %zu\n", min_bytes, max_bytes);
        fsdp_comm_free(w);
        return 2;
    }
    float *a = malloc(max_bytes), *b = malloc(max_bytes);
    memset(a, 0, max_bytes);
    memset(b, 0, max_bytes);
    // registered (shared) send buffers: the zero-copy path the FSDP engine uses for shards and gradients
    float *shared = fsdp_comm_alloc_shared(w, max_bytes);
    if (R == 0)
        printf("# %d ranks, backend %s, FSDP_COMM_ALGO %s\n# %-10s %-22s %10s %10s %10s %5s\n", N,
               fsdp_comm_backend(w), fsdp_comm_algo_setting(), "bytes", "collective", "time_us", "algbw_GBs",
               "busbw_GBs", "path");
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        size_t total = bytes / sizeof(float), per = total / (size_t)N;
        for (int coll = 0; coll < 5; coll++) {
            if (coll >= 3 && !shared) continue;
            int iters = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 3;
            double best = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                fsdp_barrier(w);
                double t0 = fsdp_now_sec();
                for (int it = 0; it < iters; it++) {
                    if (coll == 0) fsdp_all_gather(w, a + (size_t)R * per, a, per, FSDP_F32);
                    else if (coll == 1) fsdp_reduce_scatter(w, a, b, per, FSDP_F32, FSDP_AVG);
                    else if (coll == 2) fsdp_all_reduce(w, a, total, FSDP_F32, FSDP_SUM);
                    else if (coll == 3) fsdp_all_gather(w, shared, a, per, FSDP_F32);
                    else fsdp_reduce_scatter(w, shared, b, per, FSDP_F32, FSDP_AVG);
                }
                double dt = (fsdp_now_sec() - t0) / iters;
                fsdp_all_reduce_double(w, &dt);
                dt /= N;
                best = dt < best ? dt : best;
            }
            double algbw = (double)bytes / best / 1e9;
            double bus = algbw * (coll == 2 ? 2.0 : 1.0) * (N - 1) / N;
            const char *names[] = {"all_gather", "reduce_scatter", "all_reduce", "all_gather/shared",
                                   "reduce_scatter/shared"};
            const char *path = coll == 1 || coll == 4 ? fsdp_comm_path(w, 0, per, FSDP_F32)
                               : coll == 2             ? fsdp_comm_path(w, 1, total, FSDP_F32)
                               : fsdp_comm_gather_path(w, per, FSDP_F32);
            if (R == 0)
                printf("  %-10zu %-22s %10.1f %10.2f %10.2f %5s\n", bytes, names[coll], best * 1e6, algbw, bus, path);
        }
    }
    free(a);
    free(b);
    fsdp_comm_free_shared(w, shared);
    fsdp_comm_free(w);
    return 0;
}
