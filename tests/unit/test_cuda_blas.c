// test_cuda_blas.c: cuBLAS is loaded when the first CUDA device opens, not when the program starts
// (device/cuda/cuda_blas.h). Needs a CUDA build, not a GPU (exit 77, skipped, without CUDA in the build):
//  - at start, no libcublas is mapped (a build that links it again fails here, as test_plan's PSS checks
//    fail by ~100 MB);
//  - a CPU device opened and used maps nothing of it either;
//  - opening "cuda" maps it only where a GPU is there to open (no GPU: the open fails first, nothing loaded);
//  - fsdp_cublas() loads it and binds every function: each pointer set, the status strings those of
//    cuBLAS (two statuses, two different texts); a second call returns the same table.
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "kernels/kernels.h"
#include "test.h"

#ifdef FSDP_HAVE_CUDA
#include "device/cuda/cuda_blas.h"

// 1 if a mapping of this process names `lib` (/proc/self/maps)
static int mapped(const char *lib) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, lib) != NULL;
    fclose(f);
    return found;
}

int main(void) {
    CHECK(!mapped("libcublas"));
    CHECK(fsdp_cublas_loaded() == NULL);

    fsdp_dev *cpu = NULL;
    CHECK(fsdp_dev_open("cpu", &cpu) == FSDP_OK);
    float *x = cpu ? fsdp_dev_alloc(cpu, 3 * 64 * sizeof(float), FSDP_MEM_ACTIVATIONS) : NULL;  // A, B, C (8, 8)
    CHECK(x != NULL);
    if (x) {
        const fsdp_kernels *k = fsdp_dev_kernels(cpu, 1);
        fsdp_stream *st = fsdp_dev_stream(cpu, FSDP_STREAM_COMPUTE);
        for (int i = 0; i < 64; i++) x[i] = (float)(i % 8), x[64 + i] = (float)(i / 8);  // A[m][k] = k, B[k][n] = k
        k->gemm(st, 0, 0, 8, 8, 8, 1.0f, x, 8, x + 64, 8, 0.0f, x + 128, 8);  // the bf16 table's product, on the CPU
        CHECK(fsdp_stream_synchronize(st) == FSDP_OK);
        CHECK(x[128] == 140.0f);  // C[0][0] = sum of k * k over k < 8
        fsdp_dev_free(cpu, x);
    }
    fsdp_dev_close(cpu);
    CHECK(!mapped("libcublas"));

    fsdp_dev *gpu = NULL;
    if (fsdp_dev_open("cuda", &gpu) == FSDP_OK) {  // a GPU: the open loaded cuBLAS for its handles
        CHECK(mapped("libcublas") && fsdp_cublas_loaded() != NULL);
        fsdp_dev_close(gpu);
    } else {
        printf("no GPU (%s): cuBLAS not loaded by the failed open\n", fsdp_last_error());
        CHECK(!mapped("libcublas") && fsdp_cublas_loaded() == NULL);
    }

    const fsdp_cublas_api *blas = fsdp_cublas();
    CHECK(blas != NULL);
    if (!blas) {
        fprintf(stderr, "fsdp_cublas: %s\n", fsdp_last_error());
        TEST_MAIN_END();
    }
    CHECK(mapped("libcublas"));
    CHECK(blas->create && blas->destroy && blas->set_stream && blas->set_math_mode && blas->set_workspace &&
          blas->gemm_ex && blas->status_string);
    const char *ok = blas->status_string(CUBLAS_STATUS_SUCCESS), *bad = blas->status_string(CUBLAS_STATUS_INVALID_VALUE);
    CHECK(ok && bad && *ok && *bad && strcmp(ok, bad) != 0);
    printf("cuBLAS statuses: %s / %s\n", ok ? ok : "(null)", bad ? bad : "(null)");
    CHECK(fsdp_cublas() == blas && fsdp_cublas_loaded() == blas);
    TEST_MAIN_END();
}

#else
int main(void) {
    printf("SKIPPED: built without CUDA (FSDP_CUDA)\n");
    return 77;
}
#endif
