// comm_p2p.h: the point-to-point transport (comm_p2p.c): reduce-scatters and all-reduces over MPI
// point-to-point messages, summed here in rank order (the shared-memory transport's bits), for MPI
// groups without shared memory. Not part of the public API.
#pragma once
#include "comm/comm_group.h"

extern const fsdp_comm_transport comm_p2p_transport;  // reduce-scatter, all-reduce; both in flight

typedef struct comm_p2p comm_p2p;  // one reduction in flight

// Starts: all_reduce 0: out (count,) = scale * sum over ranks in rank order of send (size, count) block
// `rank`; all_reduce 1: out (count,) = scale * the rank-order sum of every rank's send (count,), where
// out == send (in place). bf16 payloads are summed in fp32 and rounded once (comm_sum_bf16).
fsdp_status comm_p2p_start(fsdp_comm *c, int all_reduce, const void *send, void *out, size_t count, fsdp_dtype dt,
                           float scale, comm_p2p **p);
fsdp_status comm_p2p_test(comm_p2p *p, int *done);  // progresses: posts further rounds, sums arrived ones
fsdp_status comm_p2p_wait(comm_p2p *p);             // completes (p stays allocated)
void comm_p2p_free(comm_p2p *p);                    // cancels what is still pending (after an error)
// start + wait + free
fsdp_status comm_p2p_run(fsdp_comm *c, int all_reduce, const void *send, void *out, size_t count, fsdp_dtype dt,
                         float scale);
void comm_p2p_release_group(fsdp_comm *c);  // frees c->p2p (the tags' counter, the kept scratch)
