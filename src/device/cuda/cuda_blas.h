// cuda_blas.h: the cuBLAS functions the CUDA device and its kernels call, loaded with dlopen when the
// first CUDA device opens (fsdp_cublas), not when the program starts: linking libcublas made every
// process of a CUDA build, CPU runs included, map libcublas and libcublasLt and pay ~95 MB of private
// memory for their relocations and static data (tests/train/test_plan's PSS checks caught it). The
// prototypes are cuBLAS's own (cublas_v2.h), so every call is type-checked as a direct call would be.
// Only for device/ and device/cuda/; needs the CUDA headers (FSDP_HAVE_CUDA builds only).
#pragma once
#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    cublasStatus_t (*create)(cublasHandle_t *handle);    // cublasCreate
    cublasStatus_t (*destroy)(cublasHandle_t handle);    // cublasDestroy
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*set_workspace)(cublasHandle_t handle, void *workspace, size_t bytes);
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                              cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                              cublasComputeType_t compute, cublasGemmAlgo_t algo);
    const char *(*status_string)(cublasStatus_t status);  // cublasGetStatusString
} fsdp_cublas_api;

// cuBLAS, loaded on the first call (thread-safe; later calls return the same table). NULL when the
// library cannot be loaded or lacks one of the functions, with the reason (the names tried, dlerror) as
// the last error (fsdp_last_error).
const fsdp_cublas_api *fsdp_cublas(void);
// The table if an earlier fsdp_cublas() loaded it, else NULL (loads nothing).
const fsdp_cublas_api *fsdp_cublas_loaded(void);

#ifdef __cplusplus
}
#endif
