// comm_path.h: which transport runs a collective (comm_path.c, the one place that chooses), as a
// function of (group, kind, count, dtype, and for a device transport the buffer) only: the same on
// every rank. Not part of the public API.
#pragma once
#include "comm/comm_group.h"

// The transport for a collective of `kind` on c (an MPI group of size > 1): count per rank for
// all-gathers and reduce-scatters, the buffer's for all-reduces and broadcasts; buf: its send buffer
// (the device transport's `accepts` sees it). *ctx = the context to pass it.
// The device transport installed on c when it takes this collective (it runs the kind and accepts buf),
// else NULL; *ctx = its context. Any group size (a group of one rank included).
const fsdp_comm_transport *comm_device_route(const fsdp_comm *c, fsdp_coll_kind kind, const void *buf, void **ctx);
const fsdp_comm_transport *comm_route(const fsdp_comm *c, fsdp_coll_kind kind, const void *buf, size_t count,
                                      fsdp_dtype dt, void **ctx);
// 1 when t's nonblocking form of this collective stays in flight; 0: the blocking form runs instead
// (no start, or MPI's collectives for a call that must be split or a bf16 sum)
int comm_route_in_flight(const fsdp_comm_transport *t, fsdp_coll_kind kind, size_t count, fsdp_dtype dt);
