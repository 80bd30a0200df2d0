// trace.h: a low-overhead span recorder that writes one Chrome trace JSON file (Trace Event Format:
// opens in Perfetto and chrome://tracing) with one track per rank, plus per-rank totals.
//
// Off by default: until fsdp_trace_enable, every recording call is a single branch. Recording is
// per process and lives on the thread that called fsdp_trace_enable; calls from other threads
// (e.g. OpenMP workers) are no-ops, so instrumented code may run anywhere.
//
//   fsdp_trace_enable(rank, 1 << 20);
//   fsdp_trace_begin("forward", FSDP_SPAN_COMPUTE, "h.3");
//   fsdp_trace_begin("all_gather", FSDP_SPAN_COMM, "12.6 MB");
//   fsdp_trace_add_bytes(bytes);              // onto the innermost open span
//   fsdp_trace_end();                          // all_gather
//   fsdp_trace_end();                          // forward
//   fsdp_trace_write(world, "trace.json");    // collective; rank 0 writes the file
//   fsdp_trace_report(stdout, group_size);
#pragma once
#include <stddef.h>
#include <stdio.h>

#include "comm/comm.h"
#include "core/status.h"

typedef enum { FSDP_SPAN_COMPUTE = 0, FSDP_SPAN_COMM = 1, FSDP_SPAN_OTHER = 2 } fsdp_span_kind;
#define FSDP_SPAN_NKINDS 3

#define FSDP_TRACE_DETAIL_MAX 47  // bytes of `detail` kept per span
#define FSDP_TRACE_MAX_DEPTH 64   // deeper spans are not recorded (begin/end still pair up)
#define FSDP_TRACE_MAX_COLLECTIVES 64  // distinct COMM names in the totals; more go to "(other)"

// Starts (or restarts, discarding what was recorded) recording on the calling thread; `rank` is the
// pid of this process's events. capacity: completed spans kept; when full, the oldest are dropped
// and counted. capacity 0 keeps totals only. Fails with FSDP_ERR_INVALID_ARG (rank < 0) or
// FSDP_ERR_NOMEM, leaving tracing off.
fsdp_status fsdp_trace_enable(int rank, size_t capacity);
// Stops recording and frees the buffers; the totals and spans are gone. Call enable, disable and
// write on the recording thread.
void fsdp_trace_disable(void);
int fsdp_trace_enabled(void);  // 1 on the recording thread while enabled

// Spans nest. `name` must be a string literal or otherwise outlive the trace; `detail` is copied
// (its first FSDP_TRACE_DETAIL_MAX bytes; may be NULL), e.g. the unit name "h.3" or "12.6 MB".
// An fsdp_trace_end without an open span is ignored.
void fsdp_trace_begin(const char *name, fsdp_span_kind kind, const char *detail);
void fsdp_trace_end(void);
// Adds `bytes` to the innermost open span (shown in the event's args; summed per collective).
void fsdp_trace_add_bytes(size_t bytes);

// Totals so far on this rank. seconds[k]: time in spans of kind k, counting only the outermost
// span of each kind so that nesting does not double count. wall: seconds since enable.
typedef struct {
    double wall;
    double seconds[FSDP_SPAN_NKINDS];
    size_t spans;    // completed spans (kept or dropped)
    size_t kept;     // spans in the buffer now
    size_t dropped;  // spans dropped for capacity or depth
} fsdp_trace_totals;
void fsdp_trace_get_totals(fsdp_trace_totals *out);  // all zero when disabled

// Per collective name (spans of kind COMM, every one of them, nested or not): calls, bytes from
// fsdp_trace_add_bytes and seconds, in order of first appearance.
typedef struct {
    const char *name;
    size_t calls;
    size_t bytes;
    double seconds;
} fsdp_trace_collective;
// Copies up to `max` entries into `out` (may be NULL when max is 0); returns how many there are.
size_t fsdp_trace_get_collectives(fsdp_trace_collective *out, size_t max);

// Collective over `comm`: every rank's completed spans go to rank 0, which writes `path` (through a
// temporary file and a rename). Timestamps are microseconds from the earliest enable time over the
// ranks (CLOCK_MONOTONIC, shared by the ranks of one host). Ranks with tracing off contribute no
// events but must still call. Spans still open are not written. Every rank returns the same
// status. Recording pauses while it runs, so collectives it makes are not traced.
fsdp_status fsdp_trace_write(fsdp_comm *comm, const char *path);

// A short text report of this rank's totals: compute and comm share of the wall time since enable,
// and per collective name: calls, MB, seconds, algorithm bandwidth bytes / seconds / 1e9 GB/s and
// bus bandwidth = algbw * (N-1)/N with N = `world_size` (the group size of the collectives).
void fsdp_trace_report(FILE *f, int world_size);
