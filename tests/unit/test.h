// test.h: a tiny test harness: checks print both sides and the location, then the test fails.
// Each tests/unit/test_*.c is one executable registered with ctest; main() returns non-zero on failure.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                        \
        }                                                                           \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                   \
    do {                                                                                     \
        long long a_ = (long long)(a), b_ = (long long)(b);                                  \
        if (a_ != b_) {                                                                      \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, \
                    #b, a_, b_);                                                             \
            test_failures++;                                                                 \
        }                                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                   \
    do {                                                                                        \
        double a_ = (double)(a), b_ = (double)(b);                                              \
        if (!(fabs(a_ - b_) <= (tol))) {                                                        \
            fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, \
                    #a, #b, (double)(tol), a_, b_);                                             \
            test_failures++;                                                                    \
        }                                                                                       \
    } while (0)

// Writes n raw bytes to path (a failed write is a failed check).
static inline void test_write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK(fwrite(data, 1, n, fp) == n);
    fclose(fp);
}

#define TEST_MAIN_END()                                              \
    do {                                                             \
        if (test_failures) {                                         \
            fprintf(stderr, "%d check(s) failed\n", test_failures);  \
            return 1;                                                \
        }                                                            \
        printf("all checks passed\n");                               \
        return 0;                                                    \
    } while (0)
