// cuda_device.h: what the CUDA kernels (this folder's .cu files) need from the cuda backend (cuda_device.c): the
// native handles behind a stream of a "cuda" device, a scratch buffer per stream, and error notes.
// Only for device/cuda/; code above the device layer never sees these.
#pragma once
#include <stddef.h>

#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// The stream's cudaStream_t (as void *: this header is included from C without the CUDA headers).
void *fsdp_cuda_stream_handle(fsdp_stream *s);
// The stream's cublasHandle_t, bound to that stream, math mode set by the device (TF32 off unless
// --allow-tf32 / FSDP_ALLOW_TF32=1). Call cuBLAS through fsdp_cublas() (device/cuda/cuda_blas.h).
void *fsdp_cuda_cublas_handle(fsdp_stream *s);
// Device memory of at least `bytes` bytes that kernels on s may use as temporaries (its contents do not
// survive to the next kernel call). Grows when asked for more (waiting for s's work first). 256-byte
// aligned. NULL (and the error noted on s) when out of memory.
void *fsdp_cuda_scratch(fsdp_stream *s, size_t bytes);
// After a kernel launch or a library call: when the launch failed (cudaGetLastError) or status != 0 (a
// cuBLAS status), the failure naming `what` is noted on s and returned by s's next call that returns a
// status. what: the kernel's name.
void fsdp_cuda_check(fsdp_stream *s, const char *what, int library_status);

// The kernel tables of the CUDA device (device/cuda/table.cu): fp32, and bf16 mixed precision.
struct fsdp_kernels;
const struct fsdp_kernels *fsdp_kernels_cuda(int bf16);

#ifdef __cplusplus
}
#endif
