// test_cuda_device.c: the CUDA device's layer calls (device.h, device_comm.h) on a GPU: memory zero-filled
// on allocation, copies in every direction (pinned, pageable and registered host memory), memsets,
// 2-D copies, events ordering the two streams, the synchronous read, every kernel-table entry set, and
// the collectives staged through host memory (a plain process: a world of one; under mpirun: N ranks
// sharing the GPUs). Exit 77 (skipped) without a CUDA build or a GPU.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "cuda_check.h"
#include "device/device_comm.h"

static void check_memory_and_copies(cuda_test *t) {
    const size_t n = (1 << 20) + 13;  // bytes, not a multiple of anything
    unsigned char *d = fsdp_dev_alloc(t->gpu, n, FSDP_MEM_OTHER);  // (n,) device
    CHECK(d != NULL);
    if (!d) return;
    unsigned char *h = cuda_test_download(t, d, n);  // (n,)
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += h[i] != 0;
    CHECK_EQ_INT(nonzero, 0);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + 3);
    CHECK(fsdp_copy_h2d(t->gs, d, h, n) == FSDP_OK);
    unsigned char *d2 = fsdp_dev_alloc(t->gpu, n, FSDP_MEM_OTHER);  // (n,) device
    CHECK(fsdp_copy_d2d(t->gs, d2 + 1, d, n - 1) == FSDP_OK);
    unsigned char *back = cuda_test_download(t, d2, n);  // (n,)
    size_t bad = back[0] != 0;
    for (size_t i = 1; i < n; i++) bad += back[i] != h[i - 1];
    CHECK_EQ_INT(bad, 0);
    free(back);

    // memset, then a 2-D copy of 5 rows of 100 bytes out of rows of 1000
    CHECK(fsdp_dev_memset(t->gs, d2, 0xab, 5000) == FSDP_OK);
    CHECK(fsdp_copy_h2d(t->gs, d2 + 2000, h, 100) == FSDP_OK);
    unsigned char rows[5 * 128];  // (5, 128)
    memset(rows, 0, sizeof rows);
    CHECK(fsdp_copy_d2h_2d(t->gs, rows, 128, d2, 1000, 100, 5) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(t->gs) == FSDP_OK);
    bad = 0;
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 128; j++) {
            unsigned char want = j >= 100 ? 0 : r == 2 ? h[j] : 0xab;
            bad += rows[r * 128 + j] != want;
        }
    CHECK_EQ_INT(bad, 0);

    // the synchronous read
    uint32_t word = 0;
    CHECK(fsdp_dev_read(t->gs, &word, d2 + 4, sizeof word) == FSDP_OK);
    CHECK_EQ_INT(word, 0xababababu);

    // pinned host memory in both directions
    unsigned char *pinned = fsdp_dev_host_alloc(t->gpu, n, FSDP_MEM_COMM);  // (n,) host
    CHECK(pinned != NULL);
    if (pinned) {
        CHECK(fsdp_copy_d2h(t->gs, pinned, d, n) == FSDP_OK);
        CHECK(fsdp_stream_synchronize(t->gs) == FSDP_OK);
        CHECK(memcmp(pinned, h, n) == 0);
        fsdp_dev_host_free(t->gpu, pinned);
    }
    // registered host memory, read by a copy
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *reg = aligned_alloc((size_t)page, (size_t)page * 4);  // (4 pages,) host
    memset(reg, 0x5c, (size_t)page * 4);
    CHECK(fsdp_dev_register(t->gpu, reg, (size_t)page * 4, "test region") == FSDP_OK);
    CHECK(fsdp_copy_d2d(t->gs, d2, reg, 64) == FSDP_OK);
    CHECK(fsdp_dev_read(t->gs, &word, d2 + 60, sizeof word) == FSDP_OK);
    CHECK_EQ_INT(word, 0x5c5c5c5cu);
    fsdp_dev_unregister(t->gpu, reg);
    free(reg);
    free(h);
    fsdp_dev_free(t->gpu, d);
    fsdp_dev_free(t->gpu, d2);
}

// Work on the compute stream, an event, the comm stream waiting for it: the comm stream's copy sees the
// compute stream's result (a long kernel first, so an unordered copy would read the old values).
static void check_events(cuda_test *t) {
    const size_t n = (size_t)1 << 24;  // floats
    float *x = fsdp_dev_alloc(t->gpu, n * sizeof(float), FSDP_MEM_OTHER);  // (n,) device
    float *y = fsdp_dev_alloc(t->gpu, n * sizeof(float), FSDP_MEM_OTHER);  // (n,) device
    fsdp_stream *comm = fsdp_dev_stream(t->gpu, FSDP_STREAM_COMM);
    const fsdp_kernels *k = t->kg[0];
    fsdp_event *e = NULL;
    CHECK(fsdp_event_create(t->gpu, &e) == FSDP_OK);
    CHECK(fsdp_event_query(e) == 1);  // never recorded: complete
    for (int round = 0; round < 3; round++) {
        CHECK(fsdp_dev_memset(t->gs, x, 0, n * sizeof(float)) == FSDP_OK);
        for (int i = 0; i < 20; i++) k->scale(t->gs, x, 1.0f, n);  // keeps the stream busy
        float one = 1.0f + (float)round;
        for (int i = 0; i < 4; i++) CHECK(fsdp_copy_h2d(t->gs, x + i * (n / 4), &one, sizeof one) == FSDP_OK);
        CHECK(fsdp_event_record(e, t->gs) == FSDP_OK);
        CHECK(fsdp_stream_wait_event(comm, e) == FSDP_OK);
        CHECK(fsdp_copy_d2d(comm, y, x, n * sizeof(float)) == FSDP_OK);
        float got[4];
        for (int i = 0; i < 4; i++) CHECK(fsdp_dev_read(comm, &got[i], y + i * (n / 4), sizeof(float)) == FSDP_OK);
        for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], one, 0);
    }
    CHECK(fsdp_event_synchronize(e) == FSDP_OK);
    CHECK(fsdp_event_query(e) == 1);
    fsdp_event_destroy(e);
    fsdp_dev_free(t->gpu, x);
    fsdp_dev_free(t->gpu, y);
}

static void check_table(cuda_test *t) {
    for (int b = 0; b < 2; b++) {
        const fsdp_kernels *k = t->kg[b];
        CHECK(k != NULL && k->device == FSDP_DEV_CUDA);
        const size_t first = offsetof(fsdp_kernels, gemm), n = (sizeof(fsdp_kernels) - first) / sizeof(void (*)(void));
        size_t missing = 0;
        for (size_t i = 0; i < n; i++) {
            void (*fn)(void);
            memcpy(&fn, (const char *)k + first + i * sizeof fn, sizeof fn);
            missing += fn == NULL;
        }
        CHECK_EQ_INT(missing, 0);
    }
}

// bytes at src (device) to a new host buffer, read on t's compute stream after the work queued on s so
// far (an event, as device_comm.h's contract asks of another stream: a collective in a group of one
// stays on s and is not complete when its call returns)
static void *download_after(cuda_test *t, fsdp_stream *s, const void *src, size_t bytes) {
    fsdp_event *e = NULL;
    CHECK(fsdp_event_create(t->gpu, &e) == FSDP_OK);
    CHECK(fsdp_event_record(e, s) == FSDP_OK);
    CHECK(fsdp_stream_wait_event(t->gs, e) == FSDP_OK);
    void *h = cuda_test_download(t, src, bytes);
    fsdp_event_destroy(e);
    return h;
}

// Collectives over `world` on device buffers: values rank * 1000 + i, so every result is known.
static void check_collectives(cuda_test *t, fsdp_comm *world) {
    const int rank = fsdp_comm_rank(world), size = fsdp_comm_size(world);
    const size_t count = 100003;
    float *h = malloc(count * (size_t)size * sizeof(float));  // (size*count,) host
    for (size_t i = 0; i < count * (size_t)size; i++) h[i] = (float)(rank * 1000 + (int)(i % 997));
    float *send = cuda_test_upload(t, h, count * (size_t)size * sizeof(float));          // (size*count,)
    float *recv = fsdp_dev_alloc(t->gpu, count * (size_t)size * sizeof(float), FSDP_MEM_COMM);  // (size*count,)
    fsdp_stream *s = fsdp_dev_stream(t->gpu, FSDP_STREAM_COMM);

    // all-gather of each rank's first count values (out of place), then in place
    CHECK(fsdp_dev_all_gather(s, world, send, recv, count, FSDP_F32) == FSDP_OK);
    float *got = download_after(t, s, recv, count * (size_t)size * sizeof(float));  // (size*count,)
    size_t bad = 0;
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < count; i++) bad += got[(size_t)r * count + i] != (float)(r * 1000 + (int)(i % 997));
    CHECK_EQ_INT(bad, 0);
    free(got);
    CHECK(fsdp_dev_memset(s, recv, 0, count * (size_t)size * sizeof(float)) == FSDP_OK);
    CHECK(fsdp_copy_d2d(s, recv + (size_t)rank * count, send, count * sizeof(float)) == FSDP_OK);
    CHECK(fsdp_dev_all_gather(s, world, recv + (size_t)rank * count, recv, count, FSDP_F32) == FSDP_OK);
    got = download_after(t, s, recv, count * (size_t)size * sizeof(float));
    bad = 0;
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < count; i++) bad += got[(size_t)r * count + i] != (float)(r * 1000 + (int)(i % 997));
    CHECK_EQ_INT(bad, 0);
    free(got);

    // reduce-scatter (sum and avg): rank r gets sum over ranks q of q*1000 + (r*count + i) % 997
    for (int avg = 0; avg < 2; avg++) {
        CHECK(fsdp_dev_reduce_scatter(s, world, send, recv, count, FSDP_F32, avg ? FSDP_AVG : FSDP_SUM) ==
              FSDP_OK);
        got = download_after(t, s, recv, count * sizeof(float));
        bad = 0;
        for (size_t i = 0; i < count; i++) {
            double want = 0;
            for (int q = 0; q < size; q++) want += q * 1000 + (int)(((size_t)rank * count + i) % 997);
            if (avg) want /= size;
            bad += fabs(got[i] - want) > 1e-3 * fabs(want) + 1e-3;
        }
        CHECK_EQ_INT(bad, 0);
        free(got);
    }
    // all-reduce in place, broadcast from the last rank
    CHECK(fsdp_dev_all_reduce(s, world, send, count, FSDP_F32, FSDP_SUM) == FSDP_OK);
    got = download_after(t, s, send, count * sizeof(float));
    bad = 0;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int q = 0; q < size; q++) want += q * 1000 + (int)(i % 997);
        bad += fabs(got[i] - want) > 1e-3 * fabs(want);
    }
    CHECK_EQ_INT(bad, 0);
    free(got);
    CHECK(fsdp_copy_h2d(s, recv, h, count * sizeof(float)) == FSDP_OK);
    CHECK(fsdp_dev_broadcast(s, world, recv, count, FSDP_F32, size - 1) == FSDP_OK);
    got = download_after(t, s, recv, count * sizeof(float));
    bad = 0;
    for (size_t i = 0; i < count; i++) bad += got[i] != (float)((size - 1) * 1000 + (int)(i % 997));
    CHECK_EQ_INT(bad, 0);
    free(got);
    fsdp_dev_free(t->gpu, send);
    fsdp_dev_free(t->gpu, recv);
    free(h);
}

int main(int argc, char **argv) {
    // an unknown device name and a GPU number out of range are one-line errors, with or without CUDA
    fsdp_dev *d = NULL;
    CHECK(fsdp_dev_open("cuda:x", &d) == FSDP_ERR_INVALID_ARG && d == NULL);
    CHECK(strstr(fsdp_last_error(), "cuda:x") != NULL);
    CHECK(fsdp_dev_open("cuda:999", &d) != FSDP_OK && d == NULL);
    if (test_failures) return 1;

    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "no world: %s\n", fsdp_last_error());
        return 1;
    }
    cuda_test t;
    if (fsdp_dev_open("cuda", &t.gpu) != FSDP_OK) {
        printf("SKIPPED: no CUDA device: %s\n", fsdp_last_error());
        fsdp_comm_free(world);
        return CUDA_TEST_SKIP;
    }
    fsdp_dev_close(t.gpu);
    cuda_test_open(&t);
    check_table(&t);
    check_memory_and_copies(&t);
    check_events(&t);
    check_collectives(&t, world);
    int ranks = fsdp_comm_size(world);
    cuda_test_close(&t);
    fsdp_comm_free(world);
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);
    else printf("ok test_cuda_device (%d rank%s)\n", ranks, ranks == 1 ? "" : "s");
    return test_failures ? 1 : 0;
}
