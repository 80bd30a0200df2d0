// test.h: a tiny test harness: checks print both sides and the location, then the test fails.
// Each tests/unit/test_*.c is one executable registered with ctest; main() returns non-zero on failure.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

#define TEST_MAIN_END()                                              \
    do {                                                             \
        if (test_failures) {                                         \
            fprintf(stderr, "%d check(s) failed\n", test_failures);  \
            return 1;                                                \
        }                                                            \
        printf("all checks passed\n");                               \
        return 0;                                                    \
    } while (0)
