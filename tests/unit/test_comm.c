// test_comm.c: every collective against values each rank computes locally (nccl-tests' way: rank r's
// input element i is a function of (r, i), so the expected output needs no communication).
// Runs as a plain process (local backend) and under `mpirun -np N` (see tests/CMakeLists.txt).
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "test.h"

static float input(int rank, size_t i) { return (float)((rank + 1) * 0.5 + (double)(i % 1000) * 0.001); }

static void check_group(fsdp_comm *c, const char *label) {
    int R = fsdp_comm_rank(c), N = fsdp_comm_size(c);
    size_t counts[] = {1, 7, 1000, 300001};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        size_t n = counts[ci];
        float *send = malloc(sizeof(float) * n * (size_t)N), *recv = malloc(sizeof(float) * n * (size_t)N);
        int bad = 0;
        // all-gather, out of place and in place
        for (size_t i = 0; i < n; i++) send[i] = input(R, i);
        CHECK(fsdp_all_gather(c, send, recv, n, FSDP_F32) == FSDP_OK);
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i);
        memset(recv, 0, sizeof(float) * n * (size_t)N);
        for (size_t i = 0; i < n; i++) recv[(size_t)R * n + i] = input(R, i);
        CHECK(fsdp_all_gather(c, recv + (size_t)R * n, recv, n, FSDP_F32) == FSDP_OK);
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i);
        // reduce-scatter sum and avg: element i of block b on rank r is input(r, b*n + i)
        for (size_t i = 0; i < n * (size_t)N; i++) send[i] = input(R, i);
        for (int op = 0; op < 2; op++) {
            CHECK(fsdp_reduce_scatter(c, send, recv, n, FSDP_F32, (fsdp_reduce_op)op) == FSDP_OK);
            for (size_t i = 0; i < n; i++) {
                double want = 0;
                for (int r = 0; r < N; r++) want += input(r, (size_t)R * n + i);
                if (op == FSDP_AVG) want /= N;
                bad += fabs(recv[i] - want) > 1e-5 * fabs(want);
            }
        }
        // all-reduce avg, nonblocking
        for (size_t i = 0; i < n; i++) recv[i] = input(R, i);
        fsdp_comm_request *req = NULL;
        CHECK(fsdp_iall_reduce(c, recv, n, FSDP_F32, FSDP_AVG, &req) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += input(r, i);
            bad += fabs(recv[i] - want / N) > 1e-5 * fabs(want / N);
        }
        // nonblocking all-gather and reduce-scatter
        for (size_t i = 0; i < n; i++) send[i] = input(R, i);
        CHECK(fsdp_iall_gather(c, send, recv, n, FSDP_F32, &req) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i);
        for (size_t i = 0; i < n * (size_t)N; i++) send[i] = input(R, i);
        CHECK(fsdp_ireduce_scatter(c, send, recv, n, FSDP_F32, FSDP_SUM, &req) == FSDP_OK);
        int done = 0;
        while (!done) CHECK(fsdp_comm_test(req, &done) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += input(r, (size_t)R * n + i);
            bad += fabs(recv[i] - want) > 1e-5 * fabs(want);
        }
        // broadcast from the last rank
        for (size_t i = 0; i < n; i++) recv[i] = input(R, i);
        CHECK(fsdp_broadcast(c, recv, n, FSDP_F32, N - 1) == FSDP_OK);
        for (size_t i = 0; i < n; i++) bad += recv[i] != input(N - 1, i);
        if (bad) fprintf(stderr, "%s rank %d/%d count %zu: %d wrong values\n", label, R, N, n, bad);
        CHECK(bad == 0);
        free(send);
        free(recv);
    }
    // bf16 reduce-scatter and all-reduce: bf16 payloads summed in fp32 in rank order, rounded once,
    // identically over shared memory (plain and zero-copy from a shared buffer) and plain MPI
    for (int shared = 0; shared < 2; shared++) {
        size_t n = 513;
        fsdp_bf16 *s = shared ? fsdp_comm_alloc_shared(c, 2 * n * (size_t)N) : NULL;
        int from_shared = s != NULL;
        if (!s) s = malloc(2 * n * (size_t)N);
        fsdp_bf16 *r = malloc(2 * n * (size_t)N), *a = malloc(2 * n);
        for (size_t i = 0; i < n * (size_t)N; i++) s[i] = fsdp_f32_to_bf16(input(R, i));
        for (size_t i = 0; i < n; i++) a[i] = fsdp_f32_to_bf16(input(R, i));
        CHECK(fsdp_reduce_scatter(c, s, r, n, FSDP_BF16, FSDP_SUM) == FSDP_OK);
        CHECK(fsdp_all_reduce(c, a, n, FSDP_BF16, FSDP_AVG) == FSDP_OK);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = 0.0f, want_avg = 0.0f;
            for (int q = 0; q < N; q++) want += fsdp_bf16_to_f32(fsdp_f32_to_bf16(input(q, (size_t)R * n + i)));
            for (int q = 0; q < N; q++) want_avg += fsdp_bf16_to_f32(fsdp_f32_to_bf16(input(q, i)));
            bad += fsdp_bf16_to_f32(r[i]) != fsdp_bf16_to_f32(fsdp_f32_to_bf16(want));
            bad += fsdp_bf16_to_f32(a[i]) != fsdp_bf16_to_f32(fsdp_f32_to_bf16(want_avg * (1.0f / (float)N)));
        }
        if (bad) fprintf(stderr, "bf16 reductions (%s, send in %s memory): %d wrong\n", fsdp_comm_backend(c),
                         from_shared ? "shared" : "private", bad);
        CHECK(bad == 0);
        CHECK(fsdp_barrier(c) == FSDP_OK);  // peers may still read a shared send buffer until here
        if (from_shared) fsdp_comm_free_shared(c, s);
        else free(s);
        free(r);
        free(a);
    }
    double v = R + 1.0;
    CHECK(fsdp_all_reduce_double(c, &v) == FSDP_OK);
    CHECK_NEAR(v, N * (N + 1) / 2.0, 1e-9);
    CHECK(fsdp_barrier(c) == FSDP_OK);
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return 1;
    }
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    check_group(world, "world");
    if (N > 1) {  // an MPI error comes back as a status naming the call (no abort inside MPI): root N is invalid
        float x = 0.0f;
        CHECK(fsdp_broadcast(world, &x, 1, FSDP_F32, N) == FSDP_ERR_COMM);
        CHECK(strstr(fsdp_last_error(), "MPI_Bcast failed") != NULL);
    }
    fsdp_comm *half = NULL, *node = NULL;
    CHECK(fsdp_comm_split(world, R % 2, R, &half) == FSDP_OK);
    CHECK_EQ_INT(fsdp_comm_size(half), (N + 1 - R % 2) / 2);
    check_group(half, "split");
    CHECK(fsdp_comm_split_node(world, &node) == FSDP_OK);
    CHECK_EQ_INT(fsdp_comm_size(node), N);
    fsdp_comm_stats st = fsdp_comm_get_stats(world);
    if (N > 1) CHECK(st.calls > 0 && st.bytes_sent > 0);
    if (R == 0) printf("backend %s, %d ranks\n", fsdp_comm_backend(world), N);
    fsdp_comm_free(node);
    fsdp_comm_free(half);
    int failures = test_failures;
    fsdp_comm_free(world);
    if (failures) return 1;
    if (R == 0) printf("all checks passed\n");
    return 0;
}
