// cuda_nccl.h: the cuda backend's NCCL transport (cuda_nccl.c), for its collectives (cuda_comm.c) and its
// table (cuda_device.c). CUDA builds only; with or without NCCL in the build (without: every group is
// staged, and --comm nccl is a one-line error).
//
// One record per (device, process group): the first collective of a cuda stream on a group decides its
// path for good (cuda_comm_choice.h: every rank's card gathered over the group's host transport), and
// where it is NCCL makes the group's communicator (rank 0's unique id broadcast over the group's host
// transport, cudaSetDevice, ncclCommInitRank) and installs the transport on the group
// (fsdp_comm_set_device_transport; also where staged, so the group's fsdp_comm_free reaches the record).
// A collective then runs through comm.c (the sequence check of FSDP_DEBUG=DETAIL, the statistics, the
// watchdog's record of the enqueue) into the transport, which enqueues it on the stream the engine passed
// and returns: nothing blocks the host. AVG is ncclAvg; bf16 is ncclBfloat16 (NCCL sums bf16 in bf16
// along its ring: docs/cuda.md, "NCCL").
#pragma once
#include "device/backend_impl.h"

typedef struct cuda_nccl_group cuda_nccl_group;  // opaque: one group's record

// Where the collective `coll` on s's device over c goes: a group whose collectives run through NCCL is
// returned with s's stream set as the one to enqueue on (run the collective with comm.h's call on c, then
// cuda_nccl_end); NULL with *st FSDP_OK: staged; NULL with *st an error (mode nccl where it cannot run,
// NCCL's init failing): one line naming the rank, the group and the collective.
cuda_nccl_group *cuda_nccl_begin(fsdp_stream *s, fsdp_comm *c, const char *coll, fsdp_status *st);
// After comm.h's call on the group returned st: clears the stream, checks NCCL's asynchronous error.
fsdp_status cuda_nccl_end(cuda_nccl_group *g, fsdp_status st);

// 1 when d has a group whose collectives run through NCCL.
int cuda_nccl_active(const fsdp_dev *d);
// ncclCommGetAsyncError of each of d's communicators: the first failure, one line naming the rank, the
// group and the last collective enqueued on it (the communicator is aborted: its peers' work is lost).
fsdp_status cuda_nccl_poll(fsdp_dev *d);
// Waits for s's work (ev NULL) or for the event ev (recorded on s) without blocking inside CUDA: queries,
// polling NCCL's asynchronous errors between queries, with the wait marked for the watchdog
// (fsdp_comm_mark_wait) so a collective whose peers are gone is reported, not waited for forever.
fsdp_status cuda_nccl_wait(fsdp_stream *s, fsdp_event *ev);
// --comm's value (auto, nccl, host) checked against this build and this machine: nccl without NCCL in
// the build, or with a library that does not load, is an error saying so.
fsdp_status cuda_nccl_check_mode(const fsdp_dev *d, const char *mode);
// At the device's close, after its streams' work: every communicator destroyed, every transport removed.
void cuda_nccl_close(fsdp_dev *d);
