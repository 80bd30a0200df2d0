// cuda_device.c: the cuda backend ("cuda", "cuda:N"; cuda_backend.h): opening the GPU, device memory
// from cudaMalloc, pinned host memory, two CUDA streams (compute, comm) with a cuBLAS handle each, CUDA
// events, and the backend's table. Work on a stream (copies, the kernels' handles and scratch) is
// cuda_stream.c's; kernels are this folder's table (table.cu); collectives are cuda_comm.c's.
// Built when CMake finds CUDA (FSDP_CUDA); without it the device cannot be opened and says why.
#include "device/cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FSDP_HAVE_CUDA

static fsdp_status cuda_open(fsdp_dev *d, int ordinal) {
    (void)d, (void)ordinal;
    return fsdp_error(FSDP_ERR_INVALID_ARG,
                      "device cuda: this build has no CUDA (configure with -DFSDP_CUDA=ON where nvcc and the CUDA "
                      "libraries are installed)");
}

const fsdp_backend_i fsdp_backend_cuda = {.name = "cuda", .kind = FSDP_DEVICE_CUDA, .open = cuda_open};

#else  // FSDP_HAVE_CUDA

#include <cuda_runtime.h>

#include "core/tunables.h"
#include "device/cuda/cuda_blas.h"
#include "device/cuda/cuda_nccl.h"
#include "device/cuda/cuda_state.h"

#define CUDA_WORKSPACE_BYTES ((size_t)32 << 20)  // cuBLAS's advice for Hopper

// Local rank from the launcher's environment (Open MPI, MPICH/Hydra, Slurm), else 0.
static int local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static fsdp_status open_gpu(fsdp_dev *d, int ordinal) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "device cuda: no GPU is visible (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
    if (ordinal < 0) ordinal = local_rank() % count;
    if (ordinal >= count)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "device cuda:%d: only %d GPU%s visible (cuda:0 .. cuda:%d)", ordinal,
                          count, count == 1 ? " is" : "s are", count - 1);
    CU_TRY(cudaSetDevice(ordinal), "cudaSetDevice");
    CD(d)->ordinal = ordinal;
    const char *tf32 = fsdp_tunable(FSDP_ENV_ALLOW_TF32);
    int allow_tf32 = tf32 && *tf32 && strcmp(tf32, "0") != 0;
    const fsdp_cublas_api *blas = fsdp_cublas();  // loaded here, by the first CUDA device (cuda_blas.h)
    if (!blas) return FSDP_ERR_INTERNAL;            // the reason is the last error
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        fsdp_stream *s = &d->streams[i];
        cudaStream_t cs;
        CU_TRY(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate");
        CS(s)->cu = cs;
        cublasHandle_t h;
        cublasStatus_t bs = blas->create(&h);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return fsdp_error(FSDP_ERR_INTERNAL, "device cuda: cublasCreate: %s", blas->status_string(bs));
        CS(s)->cublas = h;
        blas->set_stream(h, cs);
        blas->set_math_mode(h, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        CU_TRY(cudaMalloc(&CS(s)->workspace, CUDA_WORKSPACE_BYTES), "cudaMalloc (cuBLAS workspace)");
        blas->set_workspace(h, CS(s)->workspace, CUDA_WORKSPACE_BYTES);
    }
    return FSDP_OK;
}

static void cuda_close(fsdp_dev *d) {
    if (CD(d)->ordinal >= 0) cudaSetDevice(CD(d)->ordinal);
    for (int i = 0; i < FSDP_STREAM_COUNT; i++)
        if (CS(&d->streams[i])->cu) cudaStreamSynchronize((cudaStream_t)CS(&d->streams[i])->cu);
    cuda_nccl_close(d);  // the communicators, after the streams' collectives
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        fsdp_stream *s = &d->streams[i];
        if (CS(s)->cu) cudaStreamSynchronize((cudaStream_t)CS(s)->cu);
        if (CS(s)->cublas) fsdp_cublas_loaded()->destroy((cublasHandle_t)CS(s)->cublas);  // made only once loaded
        if (CS(s)->workspace) cudaFree(CS(s)->workspace);
        if (CS(s)->scratch) cudaFree(CS(s)->scratch), fsdp_mem_track(FSDP_MEM_WORKSPACE, CS(s)->scratch_bytes, -1);
        if (CS(s)->stage) cudaFreeHost(CS(s)->stage), fsdp_mem_track(FSDP_MEM_COMM, CS(s)->stage_bytes, -1);
        if (CS(s)->cu) cudaStreamDestroy((cudaStream_t)CS(s)->cu);
        CS(s)->cu = CS(s)->cublas = CS(s)->workspace = CS(s)->scratch = CS(s)->stage = NULL;
        CS(s)->scratch_bytes = CS(s)->stage_bytes = 0;
    }
    for (int i = 0; i < CD(d)->n_allocs; i++) {
        fsdp_mem_track((fsdp_mem_category)CD(d)->allocs[i].cat, CD(d)->allocs[i].bytes, -1);
        cudaFree(CD(d)->allocs[i].p);
    }
    free(CD(d)->allocs);
    free(d->ctx);
    d->ctx = NULL;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) d->streams[i].ctx = NULL;
}

static fsdp_status cuda_open(fsdp_dev *d, int ordinal) {
    cuda_dev *c = calloc(1, sizeof *c);
    if (!c) return fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of memory");
    c->ordinal = -1;
    d->ctx = c;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) d->streams[i].ctx = &c->streams[i];
    fsdp_status st = open_gpu(d, ordinal);
    if (st != FSDP_OK) {  // release what was made, keeping the message
        char msg[DEV_ERR_MSG];
        snprintf(msg, sizeof msg, "%s", fsdp_last_error());
        cuda_close(d);
        fsdp_error(st, "%s", msg);
    }
    return st;
}

// The accounting record of p, or -1.
static int find_alloc(const fsdp_dev *d, const void *p) {
    for (int i = CD(d)->n_allocs - 1; i >= 0; i--)
        if (CD(d)->allocs[i].p == p) return i;
    return -1;
}

static int remember(fsdp_dev *d, void *p, size_t bytes, fsdp_mem_category cat, int pinned) {
    if (CD(d)->n_allocs == CD(d)->cap_allocs) {
        int cap = CD(d)->cap_allocs ? 2 * CD(d)->cap_allocs : 256;
        cuda_alloc_rec *n = realloc(CD(d)->allocs, (size_t)cap * sizeof *n);
        if (!n) return 0;
        CD(d)->allocs = n, CD(d)->cap_allocs = cap;
    }
    CD(d)->allocs[CD(d)->n_allocs++] = (cuda_alloc_rec){.p = p, .bytes = bytes, .cat = (int)cat, .pinned = pinned};
    fsdp_mem_track(cat, bytes, +1);
    return 1;
}

static void forget(fsdp_dev *d, int i) {
    fsdp_mem_track((fsdp_mem_category)CD(d)->allocs[i].cat, CD(d)->allocs[i].bytes, -1);
    CD(d)->allocs[i] = CD(d)->allocs[--CD(d)->n_allocs];
}

static void *dev_cuda_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    void *p = NULL;
    size_t n = bytes ? (bytes + 255) & ~(size_t)255 : 256;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fsdp_error(FSDP_ERR_NOMEM, "device cuda:%d: out of memory allocating %zu bytes for %s (%zu of %zu MiB free)",
                   CD(d)->ordinal, bytes, fsdp_mem_category_name(cat), free_b >> 20, total_b >> 20);
        return NULL;
    }
    // zero-filled on return, ordered before any stream's later work (the streams do not wait for the
    // legacy stream: complete it here; allocations are made before the steps, not inside them)
    if (cudaMemset(p, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess || !remember(d, p, bytes, cat, 0)) {
        (void)cudaGetLastError();
        cudaFree(p);
        fsdp_error(FSDP_ERR_NOMEM, "device cuda:%d: clearing %zu new bytes failed", CD(d)->ordinal, bytes);
        return NULL;
    }
    return p;
}

static void dev_cuda_free(fsdp_dev *d, void *p) {
    int i = find_alloc(d, p);
    FSDP_ASSERT(i >= 0 && !CD(d)->allocs[i].pinned);  // not memory of this device
    forget(d, i);
    cudaFree(p);  // waits for the device's work (which may still use p)
}

static void *dev_cuda_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    void *p = NULL;
    size_t n = bytes ? bytes : 64;
    if (cudaHostAlloc(&p, n, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        (void)cudaGetLastError();
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of pinned host memory allocating %zu bytes for %s", bytes,
                   fsdp_mem_category_name(cat));
        return NULL;
    }
    memset(p, 0, n);
    if (!remember(d, p, bytes, cat, 1)) {
        cudaFreeHost(p);
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of memory");
        return NULL;
    }
    return p;
}

static void dev_cuda_host_free(fsdp_dev *d, void *p) {
    int i = find_alloc(d, p);
    FSDP_ASSERT(i >= 0 && CD(d)->allocs[i].pinned);
    forget(d, i);
    cudaDeviceSynchronize();  // copies in flight may still read or write p
    cudaFreeHost(p);
}

static fsdp_status dev_cuda_register(fsdp_dev *d, void *p, size_t bytes, const char *what) {
    (void)d, (void)what;
    CU_TRY(cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped), "cudaHostRegister");
    return FSDP_OK;
}

static void dev_cuda_unregister(fsdp_dev *d, void *p) {
    (void)d;
    cudaDeviceSynchronize();
    cudaHostUnregister(p);
}


static fsdp_status dev_cuda_event_create(fsdp_event *e) {
    cudaEvent_t ev;
    CU_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    e->native = ev;
    return FSDP_OK;
}

static void dev_cuda_event_destroy(fsdp_event *e) {
    if (e->native) cudaEventDestroy((cudaEvent_t)e->native);
}

// Event records and queries (where the engine orders and asks about its streams' work) also poll NCCL's
// asynchronous errors when the device has NCCL collectives.
static fsdp_status dev_cuda_event_record(fsdp_event *e, fsdp_stream *s) {
    CU_TRY(cudaEventRecord((cudaEvent_t)e->native, (cudaStream_t)CS(s)->cu), "cudaEventRecord");
    e->stream = s;
    FSDP_CHECK(dev_cuda_stream_status(s));
    return cuda_nccl_active(s->dev) ? cuda_nccl_poll(s->dev) : FSDP_OK;
}

static fsdp_status dev_cuda_stream_wait_event(fsdp_stream *s, fsdp_event *e) {
    if (!e->stream) return FSDP_OK;  // never recorded: complete
    CU_TRY(cudaStreamWaitEvent((cudaStream_t)CS(s)->cu, (cudaEvent_t)e->native, 0), "cudaStreamWaitEvent");
    return FSDP_OK;
}

// With NCCL collectives on the device the waits poll (cuda_nccl_wait: asynchronous NCCL errors, the
// watchdog's record); otherwise CUDA blocks.
static fsdp_status dev_cuda_event_synchronize(fsdp_event *e) {
    if (!e->stream) return FSDP_OK;
    if (cuda_nccl_active(e->dev)) FSDP_CHECK(cuda_nccl_wait(e->stream, e));
    else CU_TRY(cudaEventSynchronize((cudaEvent_t)e->native), "cudaEventSynchronize");
    return dev_cuda_stream_status(e->stream);
}

static fsdp_status cuda_stream_synchronize_entry(fsdp_stream *s) {
    if (!cuda_nccl_active(s->dev)) return dev_cuda_stream_synchronize(s);
    FSDP_CHECK(cuda_nccl_wait(s, NULL));
    return dev_cuda_stream_status(s);
}

// The failure noted on s, else (with NCCL collectives on the device) NCCL's asynchronous errors: polled
// wherever the engine asks a stream for its status.
static fsdp_status cuda_stream_status_entry(fsdp_stream *s) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    return cuda_nccl_active(s->dev) ? cuda_nccl_poll(s->dev) : FSDP_OK;
}

static int dev_cuda_event_query(fsdp_event *e) {
    if (!e->stream) return 1;
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->native);
    if (r == cudaErrorNotReady) return 0;
    if (r != cudaSuccess) dev_note_error(e->stream, dev_cuda_fail(r, "cudaEventQuery"));
    else if (cuda_nccl_active(e->dev)) dev_note_error(e->stream, cuda_nccl_poll(e->dev));  // (FSDP_OK: nothing)
    return 1;
}


static fsdp_status dev_cuda_copy_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    if (!rows || !row_bytes) return FSDP_OK;
    CU_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, row_bytes, rows, cudaMemcpyDefault, (cudaStream_t)CS(s)->cu),
           "cudaMemcpy2DAsync");
    return FSDP_OK;
}

static fsdp_status dev_cuda_memset(fsdp_stream *s, void *dst, int byte, size_t bytes) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    if (!bytes) return FSDP_OK;
    CU_TRY(cudaMemsetAsync(dst, byte, bytes, (cudaStream_t)CS(s)->cu), "cudaMemsetAsync");
    return FSDP_OK;
}




static void cuda_capabilities(const fsdp_dev *d, fsdp_dev_caps *out) {
    (void)d;
    out->gemm_f32 = "cublas";
    out->gemm_bf16 = "cublaslt";
}

static fsdp_status cuda_mem_info(fsdp_dev *d, size_t *free_bytes, size_t *total_bytes) {
    CU_TRY(cudaSetDevice(CD(d)->ordinal), "cudaSetDevice");
    CU_TRY(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
    return FSDP_OK;
}

static int cuda_in_flight(const fsdp_stream *s) {
    (void)s;
    return 0;  // collectives complete inside their call (staged through the host)
}

static const struct fsdp_kernels *cuda_kernels(const fsdp_dev *d, int bf16) {
    (void)d;
    return fsdp_kernels_cuda(bf16);
}

const fsdp_backend_i fsdp_backend_cuda = {
    .name = "cuda",
    .kind = FSDP_DEVICE_CUDA,
    .open = cuda_open,
    .close = cuda_close,
    .capabilities = cuda_capabilities,
    .mem_info = cuda_mem_info,
    .alloc = dev_cuda_alloc,
    .free = dev_cuda_free,
    .host_alloc = dev_cuda_host_alloc,
    .host_free = dev_cuda_host_free,
    .register_host = dev_cuda_register,
    .unregister_host = dev_cuda_unregister,
    .stream_synchronize = cuda_stream_synchronize_entry,
    .stream_status = cuda_stream_status_entry,
    .stream_in_flight = cuda_in_flight,
    .event_create = dev_cuda_event_create,
    .event_destroy = dev_cuda_event_destroy,
    .event_record = dev_cuda_event_record,
    .event_synchronize = dev_cuda_event_synchronize,
    .stream_wait_event = dev_cuda_stream_wait_event,
    .event_query = dev_cuda_event_query,
    .copy = dev_cuda_copy,
    .copy_2d = dev_cuda_copy_2d,
    .memset = dev_cuda_memset,
    .all_gather = cuda_all_gather,
    .reduce_scatter = cuda_reduce_scatter,
    .all_reduce = cuda_all_reduce,
    .broadcast = cuda_broadcast,
    .kernels = cuda_kernels,
    .comm_check = cuda_nccl_check_mode,
};


#endif  // FSDP_HAVE_CUDA
