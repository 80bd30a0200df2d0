// comm_hier.h: the hierarchical transport (comm_hier.c): reduce-scatters and all-gathers for MPI groups
// laid out host by host with several ranks per host (within each host through shared memory, across
// hosts point to point or through MPI). Not part of the public API.
#pragma once
#include "comm/comm_group.h"

extern const fsdp_comm_transport comm_hier_transport;  // all-gather, reduce-scatter; both in flight

typedef struct comm_hier comm_hier;  // one collective in flight

// Collective over c (no shared memory of its own): sets c->hier where the layout allows (rank = host *
// L + local index, the same L > 1 everywhere, more than one host), else leaves it NULL.
fsdp_status comm_hier_setup(fsdp_comm *c);
void comm_hier_free_groups(fsdp_comm *c);          // frees c->hier (fsdp_comm_free)
int comm_hier_ranks_per_host(const fsdp_comm *c);  // L where c has a hierarchy, else 0
int comm_hier_hosts(const fsdp_comm *c);           // H where c has a hierarchy, else 0
// 1 when an all-gather of count elements per rank fits the hierarchical form (one MPI call per step);
// c has a hierarchy
int comm_hier_gather_fits(const fsdp_comm *c, size_t count);
// Starts: out (count,) = scale * sum over ranks of send (size, count) block `rank` (comm_hier.c's order).
// The shared-memory step runs here; the point-to-point one is left in flight.
fsdp_status comm_hier_start(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale,
                            comm_hier **h);
// Starts: recv (size, count) = every rank's send (count,) in rank order (send may be recv's block `rank`)
fsdp_status comm_hier_gather_start(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   comm_hier **h);
fsdp_status comm_hier_test(comm_hier *h, int *done);
fsdp_status comm_hier_wait(comm_hier *h);
void comm_hier_free(comm_hier *h);
// start + wait + free
fsdp_status comm_hier_run(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale);
fsdp_status comm_hier_gather_run(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
