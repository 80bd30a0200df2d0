// device.h: the device layer. Everything the engine (fsdp/), the modules (nn/), the optimizer
// (optim/), checkpoints and the tools do to parameter, gradient, optimizer-state and activation
// memory goes through this interface: allocation, copies, memsets, kernels and collectives, all
// enqueued on a stream. Above this layer nothing dereferences device memory.
//
// Devices (fsdp_dev_open):
//   "cpu"    host memory, every call runs to completion when it is made, except collectives
//            (device/device_comm.h), which stay in flight on their stream as MPI requests; streams and
//            events order them: the zero-cost reference.
//   "guard"  the CPU device for tests: device memory lives in mappings that stay PROT_NONE except
//            while a call of this layer (a kernel, a copy, a memset, a collective) runs, so a host
//            access from above the layer faults at once; the fault handler names the allocation
//            (category, size, offset) and prints a backtrace.
//   "cuda"   one GPU ("cuda:N", or the local rank's): cuBLAS(Lt) and own kernels on CUDA streams
//            (built where the CUDA toolkit is found: FSDP_CUDA=AUTO).
// Each device is a backend (device/backend_impl.h: a table of functions plus its state) in its own
// folder, device/cpu/, device/guard/, device/cuda/, which owns its kernels. Code above this layer never
// asks which backend it has: it asks for capabilities (fsdp_dev_capabilities).
//
// Rules a backend author (and every caller) relies on:
// - Ownership. fsdp_dev_alloc memory belongs to the device; only this layer's calls read or write
//   it. It is zero-filled on return (the CUDA device will memset it on the allocating stream) and
//   64-byte aligned. fsdp_dev_free may be called while work that uses the buffer is still queued on
//   a stream of the same device: the device defers the release until that work is done.
// - Host memory handed to copies (src of h2d, dst of d2h) may be ordinary memory; d2h into it is
//   complete when fsdp_stream_synchronize (or fsdp_event_synchronize of a later event) returns.
//   fsdp_dev_host_alloc gives pinned memory where that matters (CUDA: faster, asynchronous).
// - Streams. Work on one stream runs in the order it was enqueued. Work on two streams is ordered
//   only by events: record an event on the producer stream, make the consumer stream wait for it.
//   Every device has at least two streams: FSDP_STREAM_COMPUTE and FSDP_STREAM_COMM. A stream is
//   used by one thread at a time. On the CPU device a later operation on a stream completes the
//   collectives in flight there whose buffers it reads or writes (kernels: all of them) before it runs,
//   so results are those of in-order execution, and waiting for an event means completing it now.
// - Registered memory (fsdp_dev_register): host memory that kernels and collectives of the device
//   may access directly (offload file mappings: CUDA will cudaHostRegister them; the guard device
//   protects them like its own memory). Page-aligned, registered whole.
// - Scalars (a loss, a sum of squares) are written by kernels into device buffers; the host reads
//   them with a d2h copy where it needs the value (the training log, clipping), once per step.
// - Host-shared memory. fsdp_dev_host_addressable() is 1 only for the plain CPU device: only then
//   may the engine place shards in MPI shared-memory windows (zero-copy collectives). The guard and
//   CUDA devices keep all state in device memory and collectives copy through their own buffers.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/status.h"

typedef struct fsdp_dev fsdp_dev;        // one device (opaque)
typedef struct fsdp_stream fsdp_stream;  // an ordered queue of device work (opaque)
typedef struct fsdp_event fsdp_event;    // a point in a stream's work (opaque)
struct fsdp_kernels;

typedef enum { FSDP_DEVICE_CPU = 0, FSDP_DEVICE_GUARD = 1, FSDP_DEVICE_CUDA = 2 } fsdp_device_kind;
typedef enum { FSDP_STREAM_COMPUTE = 0, FSDP_STREAM_COMM = 1, FSDP_STREAM_COUNT = 2 } fsdp_stream_id;

// Opens a device by name: "cpu", "guard", "cuda", "cuda:N" (case-insensitive). NULL or "" means $FSDP_DEVICE, else "cpu".
// An unknown name is an error naming it and the choices. A process may open several devices; each
// open is closed once.
fsdp_status fsdp_dev_open(const char *name, fsdp_dev **out);
// NULL is fine. Completes the streams' work and frees what the device still holds (the guard device's
// arena with every allocation in it); CPU memory still allocated stays the owners' to free. Never for
// fsdp_dev_default().
void fsdp_dev_close(fsdp_dev *d);
// The process's default device, opened on first use from $FSDP_DEVICE (never closed; never NULL:
// an invalid $FSDP_DEVICE aborts with a message naming it).
fsdp_dev *fsdp_dev_default(void);
const char *fsdp_dev_name(const fsdp_dev *d);  // "cpu", "guard", "cuda"
fsdp_device_kind fsdp_dev_kind(const fsdp_dev *d);  // for tests and messages: the layer's callers ask for capabilities
int fsdp_dev_host_addressable(const fsdp_dev *d);  // fsdp_dev_capabilities' host_addressable

// What a device can do, for the code above the layer.
typedef struct {
    int host_addressable;    // device memory is the process's own memory (the cpu device)
    int host_memory;         // device memory is the host's RAM (cpu, guard): the host's memory bounds it,
                             // and offloading to the host (CPUOffload) has nothing to move
    int zero_copy_shared;    // shards may live in MPI shared-memory windows and be gathered in place
                             // (fsdp_dev_all_gather_shared; the engine's zero-copy path)
    int runs_at_call;        // copies, memsets and kernels have run when their call returns (host devices)
    const char *gemm_f32;    // the path of the fp32 matrix products: "avx512", "openblas", "cublas"
    const char *gemm_bf16;   // and of the bf16 ones: "amx", "avx512bf16", "emulate", "cublaslt"
    int gemm_bf16_emulated;  // bf16 products computed through fp32 copies (the planner counts those)
    // The packing scratch of the fp32 products in host memory, per thread that runs one: a block of A
    // and a block of B, bytes (the planner's); 0 where the device keeps none in host memory.
    size_t gemm_pack_a_bytes, gemm_pack_b_bytes;
} fsdp_dev_caps;

// The capabilities now (the GEMM paths as selected so far: FSDP_GEMM, FSDP_GEMM_BF16).
void fsdp_dev_capabilities(const fsdp_dev *d, fsdp_dev_caps *out);
// The device's memory: what it could still allocate and its size, in bytes (cpu and guard: the
// host's, core/mem_available.h; cuda: cudaMemGetInfo).
fsdp_status fsdp_dev_mem_info(fsdp_dev *d, size_t *free_bytes, size_t *total_bytes);

// Device memory: zero-filled, 64-byte aligned, accounted under `cat` (core/alloc.h). NULL (with
// fsdp_error set) when out of memory. bytes == 0 gives a valid minimal buffer.
void *fsdp_dev_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
void fsdp_dev_free(fsdp_dev *d, void *p);  // NULL is fine
// Pinned host memory for staging (zero-filled, accounted under `cat`).
void *fsdp_dev_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
void fsdp_dev_host_free(fsdp_dev *d, void *p);
// Host memory the device may access in place (see the rules above). p page-aligned.
fsdp_status fsdp_dev_register(fsdp_dev *d, void *p, size_t bytes, const char *what);
void fsdp_dev_unregister(fsdp_dev *d, void *p);

// Streams and events.
fsdp_stream *fsdp_dev_stream(fsdp_dev *d, fsdp_stream_id which);
fsdp_dev *fsdp_stream_device(const fsdp_stream *s);
fsdp_status fsdp_stream_synchronize(fsdp_stream *s);  // the host waits for all work queued so far
// Collectives started on s and not complete yet (CPU device; 0 on devices that complete them inside the
// call): for tests and the profiler.
int fsdp_stream_in_flight(const fsdp_stream *s);
fsdp_status fsdp_event_create(fsdp_dev *d, fsdp_event **out);
void fsdp_event_destroy(fsdp_event *e);
fsdp_status fsdp_event_record(fsdp_event *e, fsdp_stream *s);    // e completes when s's work so far has
fsdp_status fsdp_stream_wait_event(fsdp_stream *s, fsdp_event *e);  // s's later work waits for e
fsdp_status fsdp_event_synchronize(fsdp_event *e);                // the host waits for e
int fsdp_event_query(fsdp_event *e);                              // 1 when complete (never blocks)

// Copies and memset, enqueued on s. dst/src: `bytes` bytes. d2d buffers may be device or registered.
fsdp_status fsdp_copy_h2d(fsdp_stream *s, void *dst, const void *src, size_t bytes);
fsdp_status fsdp_copy_d2h(fsdp_stream *s, void *dst, const void *src, size_t bytes);
fsdp_status fsdp_copy_d2d(fsdp_stream *s, void *dst, const void *src, size_t bytes);
fsdp_status fsdp_dev_memset(fsdp_stream *s, void *dst, int byte, size_t bytes);
// Strided 2-D copies (rows of row_bytes, pitches in bytes), for gathering pieces without host loops.
fsdp_status fsdp_copy_d2h_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows);

// Reads `bytes` bytes at a device address into host memory and waits for them: the synchronous read a
// caller uses for a scalar (a loss, a norm) it needs now. dst: host (bytes,); src: device (bytes,).
fsdp_status fsdp_dev_read(fsdp_stream *s, void *dst, const void *src, size_t bytes);

// The kernel table of the device: kernels are called as k->fn(stream, ...) (kernels/kernels.h).
// bf16 = 1 gives the mixed-precision table (bf16 operands in every matrix product).
const struct fsdp_kernels *fsdp_dev_kernels(const fsdp_dev *d, int bf16);

// For the layer's own files (device_*.c, kernels bound to a device, device collectives): brackets a
// call that touches device memory. The guard device opens its mappings on the outermost enter and
// closes them on the matching leave; the CPU device does nothing. Nests; not for code above the layer.
void fsdp_dev_enter(fsdp_dev *d);
void fsdp_dev_leave(fsdp_dev *d);
