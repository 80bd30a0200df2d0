// engine.c: the unit lifecycle (unshard, bind the original parameters, reshard), gradient
// reduction, the hooks on the model's blocks, and the sharded optimizer step.
//
// Streams (device/device.h): the model, the optimizer and norms run on the device's compute stream;
// every all-gather and reduce-scatter, with the casts and adds that belong to it, on its comm stream.
// The two meet only at events: the comm stream waits for `compute_done` before it reads what compute
// wrote (shards after the optimizer, gradients after a backward), compute waits for a unit's
// `gathered` before it uses the unit's parameters and for `comm_done` before it reads reduced
// gradients. That is how prefetch (the next unit's all-gather issued before this unit computes),
// limit_all_gathers and reduce-scatter overlap are expressed; on the CPU device the events complete
// as soon as the host waits for them.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/fault_inject.h"
#include "core/timer.h"
#include "fsdp/fsdp_internal.h"
#include "kernels/kernels.h"
#include "prof/trace.h"
#include "core/tunables.h"

// Parameters of a unit whose shard is in shared memory are read where the shards live: the fp32
// shards, or under param_dtype bf16 their rounded copies (shard_lp, shared too). The all-gather
// (fsdp_all_gather_shared) copies only parameters that straddle two ranks' shards, and none where the
// shards lie one after another.
static int params_in_place(const fsdp_state *s, const fsdp_unit *u) {
    return u->storage == SHARD_SHARED && (s->cfg.param_dtype != FSDP_BF16 || u->shard_lp);
}

// What the peers read in place: this rank's shard in the gathered dtype (elements of `esize` bytes)
static const unsigned char *gathered_shard(const fsdp_state *s, const fsdp_unit *u, size_t *esize) {
    int lp = s->cfg.param_dtype == FSDP_BF16;
    *esize = lp ? sizeof(fsdp_bf16) : sizeof(float);
    return lp ? (const unsigned char *)u->shard_lp : (const unsigned char *)u->shard;
}

// Segment g of u read in place as a whole: where the ranks' pieces of it lie one after another in
// shared memory (each rank's shard is its piece: a unit without frozen parameters, in one MPI window,
// contiguous across ranks), the segment's first element (segment,); NULL otherwise.
static const unsigned char *segment_in_place(const fsdp_state *s, const fsdp_unit *u, int g) {
    size_t es;
    const unsigned char *mine = gathered_shard(s, u, &es);
    unit_segment sg = segment_of(u, g);
    return fsdp_dev_shared_concat(s->dev, s->shard_comm, mine + (size_t)sg.local * es, es * (size_t)sg.per);
}

// Parameter i of u read in place (in the gathered dtype): in the concatenated shards
// (segment_in_place), else in this rank's shard or a peer's, or, where it straddles two shards (or is
// empty), its copy in the gathered buffer `full` (padded,). Read-only by contract: compute never
// writes parameters.
static void *param_in_place(const fsdp_state *s, const fsdp_unit *u, int i, void *full) {
    const nn_param *p = u->params[i];
    size_t es;
    const unsigned char *mine = gathered_shard(s, u, &es);
    unit_segment sg = segment_of(u, p->frozen);
    const unsigned char *whole = p->numel > 0 ? segment_in_place(s, u, p->frozen) : NULL;
    if (whole) return (void *)(whole + (size_t)(u->offsets[i] - sg.flat) * es);
    int64_t q = (u->offsets[i] - sg.flat) / sg.per;  // the rank holding its first element
    fsdp_piece pc = p->numel > 0 ? fsdp_piece_of_rank(u, i, q) : (fsdp_piece){0, 0, 0};
    if (p->numel == 0 || pc.count != p->numel) return (unsigned char *)full + (size_t)u->offsets[i] * es;
    const unsigned char *shard = q == u->shard_rank ? mine : fsdp_dev_shared_at(s->dev, s->shard_comm, mine, (int)q);
    FSDP_ASSERT(shard != NULL);
    return (void *)(shard + (size_t)pc.shard_pos * es);
}

// Points u's parameters (or their gradients) at their places in a flat buffer (NULL: unbinds them).
// Parameters gathered in bf16 (param_dtype) are bound as bf16 views; parameters read in place, at their
// places in the shards. No memory is touched.
// Frozen parameters never get a gradient view (the modules skip their weight gradients).
static void bind_params(const fsdp_state *s, fsdp_unit *u, float *flat, int grads) {
    int b16 = !grads && s->cfg.param_dtype == FSDP_BF16;
    int in_place = flat && !grads && params_in_place(s, u);
    for (int i = 0; i < u->n_params; i++) {
        nn_param *p = u->params[i];
        if (grads) {
            p->grad = flat && !p->frozen ? flat + u->offsets[i] : NULL;
        } else {
            void *at = !flat ? NULL : in_place ? param_in_place(s, u, i, flat)
                                   : b16 ? (void *)((fsdp_bf16 *)flat + u->offsets[i]) : (void *)(flat + u->offsets[i]);
            p->data = b16 ? NULL : at;
            p->data_b16 = b16 ? at : NULL;
        }
    }
}

// The element ranges [begin, end) of segment g (segment coordinates) that straddle two ranks' shards:
// the parameters param_in_place cannot read in place (none when the segment is read as a whole). At
// most one per boundary: copy (size - 1,).
static size_t straddling_ranges(const fsdp_state *s, const fsdp_unit *u, int g, size_t (*copy)[2]) {
    unit_segment sg = segment_of(u, g);
    size_t n = 0;
    if (segment_in_place(s, u, g)) return 0;
    for (int i = 0; i < u->n_params; i++) {
        const nn_param *p = u->params[i];
        if (p->frozen != g || p->numel == 0) continue;
        int64_t p0 = u->offsets[i] - sg.flat, p1 = p0 + p->numel;
        if (p0 / sg.per == (p1 - 1) / sg.per) continue;
        copy[n][0] = (size_t)p0;
        copy[n][1] = (size_t)p1;
        n++;
    }
    return n;
}

// After unit `done`'s gradient reduction (a collective every rank enters once its compute so far is
// done; `done` is resharded next): only the other units still bound in place may be read later.
static void views_fenced_by_reduction(fsdp_state *s, const fsdp_unit *done) {
    int done_counted = done->state == UNIT_UNSHARDED && params_in_place(s, done);
    s->views_unfenced = s->n_in_place_unsharded - done_counted > 0;
}

// Every change of a unit's state goes through here, keeping the state's counts of units.
static void set_state(fsdp_state *s, fsdp_unit *u, fsdp_unit_state to) {
    int in_place = params_in_place(s, u);
    if (u->block >= 0) s->n_block_unsharded += (to != UNIT_SHARDED) - (u->state != UNIT_SHARDED);
    if (in_place) s->n_in_place_unsharded += (to == UNIT_UNSHARDED) - (u->state == UNIT_UNSHARDED);
    u->state = to;
}

// Makes every rank finish reading parameters bound in place before any rank goes on (and may rewrite
// its shard: an optimizer step, a load): called where a pass ends without such a collective.
static fsdp_status fence_views(fsdp_state *s) {
    if (!s->views_unfenced) return FSDP_OK;
    s->views_unfenced = 0;
    FSDP_CHECK(fsdp_stream_synchronize(s->compute));
    return fsdp_barrier(s->shard_comm);
}

// FSDP_DEBUG=DETAIL: one line per collective the engine issues
static void log_collective(const fsdp_state *s, const fsdp_unit *u, const char *op, size_t bytes, double seconds) {
    if (s->debug < 2) return;
    fprintf(stderr, "fsdp[rank %d] step %ld unit %s %s %.2f MB %.3f ms\n", fsdp_comm_rank(s->world), s->step,
            u->name, op, (double)bytes / 1e6, seconds * 1e3);
}

// Adds the step and unit to the last error of a failed collective.
static fsdp_status with_context(const fsdp_state *s, const fsdp_unit *u, const char *op, fsdp_status st) {
    if (st == FSDP_OK) return st;
    char msg[768];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    return fsdp_error(st, "rank %d, step %ld, unit %s, %s: %s", fsdp_comm_rank(s->world), s->step, u->name, op, msg);
}

// The comm stream's later work sees everything compute has done so far.
static fsdp_status comm_after_compute(fsdp_state *s) {
    FSDP_CHECK(fsdp_event_record(s->compute_done, s->compute));
    return fsdp_stream_wait_event(s->comm_stream, s->compute_done);
}

// Compute's later work sees everything the comm stream has done so far.
static fsdp_status compute_after_comm(fsdp_state *s) {
    FSDP_CHECK(fsdp_event_record(s->comm_done, s->comm_stream));
    return fsdp_stream_wait_event(s->compute, s->comm_done);
}

fsdp_status fsdp_gather_flat(fsdp_state *s, const fsdp_unit *u, const float *src, float *dst, int trainable_only) {
    if (s->replicated) {
        size_t n = (size_t)(trainable_only ? u->grad_padded : u->padded);
        return dst != src && n ? fsdp_copy_d2d(s->compute, dst, src, sizeof(float) * n) : FSDP_OK;
    }
    for (int g = 0; g < (trainable_only ? 1 : 2); g++) {
        unit_segment sg = segment_of(u, g);
        if (!sg.per) continue;
        float *mine = dst + sg.flat + sg.begin;
        FSDP_CHECK(fsdp_copy_d2d(s->compute, mine, src + sg.local, sizeof(float) * (size_t)sg.per));
        FSDP_CHECK(fsdp_dev_all_gather(s->compute, s->shard_comm, mine, dst + sg.flat, (size_t)sg.per, FSDP_F32));
    }
    return fsdp_stream_synchronize(s->compute);
}

const fsdp_kernels *fsdp_compute_kernels(const fsdp_state *s) {
    return fsdp_dev_kernels(s->dev, s->cfg.param_dtype == FSDP_BF16);
}

nn_ctx fsdp_model_ctx(const fsdp_state *s, int training, uint64_t seed, uint64_t step) {
    nn_ctx c = {.k = fsdp_compute_kernels(s), .dev = s->dev, .stream = s->compute, .training = training,
                .act_bf16 = s->cfg.param_dtype == FSDP_BF16, .seed = seed, .step = step};
    return c;
}

fsdp_dev *fsdp_state_device(const fsdp_state *s) { return s->dev; }

// A gathered-parameter buffer for u from the preallocated pool (or the allocator if the pool is
// exhausted, which the pool's sizing rules out).
static float *take_buffer(fsdp_state *s, const fsdp_unit *u) {
    if (u->block < 0 && s->root_pool) return s->root_pool;
    for (int i = 0; u->block >= 0 && i < s->pool_n; i++)
        if (!s->pool_busy[i] && u->padded <= s->pool_floats) {
            s->pool_busy[i] = 1;
            return s->pool[i];
        }
    return fsdp_dev_alloc(s->dev, fsdp_dtype_size(s->cfg.param_dtype) * (size_t)u->padded, FSDP_MEM_UNSHARDED);
}

static void give_buffer(fsdp_state *s, float *buf) {
    if (buf == s->root_pool) return;
    for (int i = 0; i < s->pool_n; i++)
        if (s->pool[i] == buf) {
            s->pool_busy[i] = 0;
            return;
        }
    fsdp_dev_free(s->dev, buf);
}

// SHARDED -> GATHERING: starts gathering u's flat parameter into a pool buffer on the comm stream.
// respect_limit: a prefetch is skipped when limit_all_gathers block units are already unsharded.
static fsdp_status start_unshard(fsdp_state *s, fsdp_unit *u, int respect_limit) {
    if (u->state != UNIT_SHARDED) return FSDP_OK;
    int lp = s->cfg.param_dtype == FSDP_BF16;
    if (s->replicated && !lp) {
        u->full = u->shard;  // replicated: the shard is the whole flat parameter
        set_state(s, u, UNIT_UNSHARDED);
        return FSDP_OK;
    }
    if (!s->replicated && respect_limit && s->cfg.limit_all_gathers > 0 &&
        s->n_block_unsharded >= s->cfg.limit_all_gathers)
        return FSDP_OK;
    u->full = take_buffer(s, u);
    if (!u->full) return FSDP_ERR_NOMEM;
    set_state(s, u, UNIT_GATHERING);
    FSDP_CHECK(comm_after_compute(s));  // the shard as the last optimizer step left it
    fsdp_stream *cs = s->comm_stream;
    if (s->replicated) {  // param_dtype bf16: a bf16 copy of the replica
        s->k->f32_to_bf16(cs, (fsdp_bf16 *)u->full, u->shard, (size_t)u->padded);
        return fsdp_event_record(u->gathered, cs);
    }
    if (fsdp_fault_desync(fsdp_comm_rank(s->world), u->index, s->step)) {  // test hook: a stray collective
        double stray = 0.0;
        FSDP_CHECK(with_context(s, u, "stray all_reduce before its all_gather (FSDP_TEST_DESYNC)",
                                fsdp_all_reduce(s->shard_comm, &stray, 1, FSDP_F32, FSDP_SUM)));
    }
    size_t bytes = (lp ? sizeof(uint16_t) : sizeof(float)) * (size_t)u->padded;
    fsdp_trace_begin(respect_limit ? "all_gather (prefetch)" : "all_gather", FSDP_SPAN_COMM, u->name);
    fsdp_trace_add_bytes(bytes);
    double t0 = fsdp_now_sec();
    fsdp_status st;
    if (u->storage == SHARD_OFFLOADED) fsdp_offload_prefetch(u->shard, sizeof(float) * (size_t)u->shard_numel);
    st = FSDP_OK;
    for (int g = 0; g < 2 && st == FSDP_OK; g++) {  // the trainable segment, then the frozen one
        unit_segment sg = segment_of(u, g);
        if (!sg.per) continue;
        if (params_in_place(s, u)) {  // the peers' shards are read where they live (bind_params)
            size_t copy[fsdp_comm_size(s->shard_comm)][2];  // the straddling parameters: one per boundary at most
            size_t n = straddling_ranges(s, u, g, copy);
            const void *send = lp ? (const void *)(u->shard_lp + sg.local) : (const void *)(u->shard + sg.local);
            void *recv = lp ? (void *)((fsdp_bf16 *)u->full + sg.flat) : (void *)(u->full + sg.flat);
            if (lp && u->lp_pass != s->pass)  // rounded at the pass's first gather of u
                s->k->f32_to_bf16(cs, u->shard_lp + sg.local, u->shard + sg.local, (size_t)sg.per);
            st = fsdp_dev_all_gather_shared(cs, s->shard_comm, send, recv, (size_t)sg.per, lp ? FSDP_BF16 : FSDP_F32,
                                            (const size_t (*)[2])copy, n);
        } else if (lp) {  // `full` is a bf16 buffer: each rank's shard rounded to bf16, then gathered
            fsdp_bf16 *gathered = (fsdp_bf16 *)u->full + sg.flat;  // (segment,)
            fsdp_bf16 *mine = u->shard_lp ? u->shard_lp + sg.local : gathered + sg.begin;
            s->k->f32_to_bf16(cs, mine, u->shard + sg.local, (size_t)sg.per);
            st = fsdp_dev_all_gather(cs, s->shard_comm, mine, gathered, (size_t)sg.per, FSDP_BF16);
        } else {
            float *mine = u->full + sg.flat + sg.begin;
            st = fsdp_copy_d2d(cs, mine, u->shard + sg.local, sizeof(float) * (size_t)sg.per);
            if (st == FSDP_OK) st = fsdp_dev_all_gather(cs, s->shard_comm, mine, u->full + sg.flat, (size_t)sg.per, FSDP_F32);
        }
    }
    if (lp && params_in_place(s, u)) u->lp_pass = s->pass;  // rounded once a pass: its re-gathers read it again
    if (st == FSDP_OK) st = fsdp_event_record(u->gathered, cs);
    fsdp_trace_end();
    log_collective(s, u, "all_gather", bytes, fsdp_now_sec() - t0);
    return with_context(s, u, "all_gather", st);
}

// -> UNSHARDED: compute waits for the gather, then the original parameters are bound to it.
fsdp_status fsdp_unshard(fsdp_state *s, fsdp_unit *u) {
    FSDP_CHECK(start_unshard(s, u, 0));
    if (u->state == UNIT_GATHERING) {
        double t0 = fsdp_now_sec();
        fsdp_status st = fsdp_stream_wait_event(s->compute, u->gathered);
        s->comm_wait_seconds += fsdp_now_sec() - t0;
        FSDP_CHECK(with_context(s, u, "all_gather", st));
        set_state(s, u, UNIT_UNSHARDED);
    }
    bind_params(s, u, u->full, 0);
    if (params_in_place(s, u)) {
        s->views_unfenced = 1;
        int lag_ms = fsdp_fault_slow_views_ms(fsdp_comm_rank(s->shard_comm));  // test hook: a lagging reader
        if (lag_ms) nanosleep(&(struct timespec){lag_ms / 1000, (long)(lag_ms % 1000) * 1000000L}, NULL);
    }
    return FSDP_OK;
}

// -> SHARDED. A prefetch nobody used is completed first (its buffer goes back to the pool).
void fsdp_reshard(fsdp_state *s, fsdp_unit *u) {
    if (u->state == UNIT_SHARDED) return;
    if (u->state == UNIT_GATHERING) fsdp_event_synchronize(u->gathered);
    if (u->full != u->shard) {
        // the next user of the buffer may be an all-gather on the comm stream: it starts after compute
        // is done with this one (comm_after_compute at every start_unshard)
        give_buffer(s, u->full);
    }
    u->full = NULL;
    set_state(s, u, UNIT_SHARDED);
    bind_params(s, u, NULL, 0);
}

// Readies a reused gradient buffer for this backward without clearing what the backward stores anyway:
// the parameters whose modules store their first gradient (nn_param.grad_overwrite: a Linear's weight,
// most of a block) are marked fresh; the rest of the buffer (other parameters, padding) is zeroed.
// Call after the views are bound.
static fsdp_status clear_grads_lazily(fsdp_state *s, fsdp_unit *u) {
    int64_t from = 0;  // where the run still to be zeroed starts
    for (int i = 0; i < u->n_params; i++) {
        nn_param *p = u->params[i];
        if (p->frozen || !p->grad_overwrite) continue;
        int64_t at = u->offsets[i];
        FSDP_ASSERT(at >= from);  // trainable parameters lie in order in the gradient buffer
        if (at > from) FSDP_CHECK(fsdp_dev_memset(s->compute, u->full_grad + from, 0, sizeof(float) * (size_t)(at - from)));
        from = at + p->numel;
        p->grad_fresh = 1;
    }
    if (u->grad_padded > from)
        FSDP_CHECK(fsdp_dev_memset(s->compute, u->full_grad + from, 0, sizeof(float) * (size_t)(u->grad_padded - from)));
    return FSDP_OK;
}

fsdp_status fsdp_bind_grads(fsdp_state *s, fsdp_unit *u) {
    if (!u->grad_padded) return FSDP_OK;  // every parameter frozen: no gradient at all
    if (u->grad == GRAD_NONE && s->staging[0] && s->sync && u->block >= 0 && !s->cfg.deterministic) {
        // this micro-step's gradients go straight into shared memory: the reduce-scatter reads them in
        // place. Two buffers alternate, so a buffer is only rewritten after every rank has passed the
        // next unit's reduce-scatter, i.e. finished reading it.
        u->full_grad = s->staging[s->next_staging];
        s->next_staging ^= 1;
        u->grad_staged = 1;
    }
    if (u->grad == GRAD_NONE && s->cfg.deterministic && (u->block < 0 ? s->det_root_grad != NULL : s->det_grad[0] != NULL)) {
        // preallocated (deterministic.c): block units alternate between two buffers, as with staging; on
        // the CPU device a unit's digits are made (fixed_quantize) before the next unit's backward starts
        u->full_grad = u->block < 0 ? s->det_root_grad : s->det_grad[s->next_staging];
        if (u->block >= 0) s->next_staging ^= 1;
        u->grad_staged = 1;
    }
    if (!u->full_grad) {
        u->full_grad = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)u->grad_padded, FSDP_MEM_UNSHARDED);
        if (!u->full_grad) return FSDP_ERR_NOMEM;
    }
    int reused = u->grad == GRAD_NONE && u->grad_staged;  // staged or preallocated: holds the last step's values
    u->grad = GRAD_BOUND;
    bind_params(s, u, u->full_grad, 1);
    return reused ? clear_grads_lazily(s, u) : FSDP_OK;
}

// Reduces this micro-step's unsharded gradients into the gradient shard (average over all ranks),
// or keeps them for later under no_sync (GRAD_PENDING). The reduction runs on the comm stream.
fsdp_status fsdp_reduce_grads(fsdp_state *s, fsdp_unit *u) {
    for (int i = 0; i < u->n_params; i++) {  // a fresh view no backward wrote: no gradient, i.e. zeros
        nn_param *p = u->params[i];
        if (!p->grad_fresh) continue;
        p->grad_fresh = 0;
        if (p->grad) FSDP_CHECK(fsdp_dev_memset(s->compute, p->grad, 0, sizeof(float) * (size_t)p->numel));
    }
    bind_params(s, u, NULL, 1);
    if (u->grad == GRAD_NONE) return FSDP_OK;
    if (!s->sync) {
        u->grad = GRAD_PENDING;
        return FSDP_OK;
    }
    const fsdp_kernels *k = s->k;
    fsdp_stream *cs = s->comm_stream;
    const char *op = s->replicated ? "all_reduce" : "reduce_scatter";
    int det = s->cfg.deterministic;
    int lp = s->cfg.reduce_dtype == FSDP_BF16 && !det;
    size_t bytes = (det ? sizeof(float) * (size_t)s->det_fmt.limbs : lp ? sizeof(uint16_t) : sizeof(float)) *
                   (size_t)u->grad_padded;
    FSDP_CHECK(comm_after_compute(s));  // the backward's gradients
    fsdp_trace_begin(op, FSDP_SPAN_COMM, u->name);
    fsdp_trace_add_bytes(bytes);
    double t0 = fsdp_now_sec();
    fsdp_status st;
    if (det) {  // fixed-point digits, summed exactly (deterministic.c)
        st = det_reduce_grads(s, u);
    } else if (lp) {  // bf16 on the wire: the gradients become bf16 in place, then fp32 sums of bf16 payloads
        k->f32_to_bf16_in_place(cs, u->full_grad, (size_t)u->grad_padded);
        fsdp_bf16 *g = (fsdp_bf16 *)u->full_grad, *r = (fsdp_bf16 *)s->reduce_buf;  // (grad_padded,), (grad_shard,)
        if (s->replicated) {
            st = fsdp_dev_all_reduce(cs, s->world, g, (size_t)u->grad_padded, FSDP_BF16, FSDP_AVG);
            r = g;
        } else {
            st = fsdp_dev_reduce_scatter(cs, s->shard_comm, g, r, (size_t)u->grad_shard, FSDP_BF16, FSDP_AVG);
            if (st == FSDP_OK && s->replica_comm)
                st = fsdp_dev_all_reduce(cs, s->replica_comm, r, (size_t)u->grad_shard, FSDP_BF16, FSDP_AVG);
        }
        if (st == FSDP_OK && u->shard_grad_zero) k->bf16_to_f32(cs, u->shard_grad, r, (size_t)u->grad_shard);
        else if (st == FSDP_OK) k->add_inplace_b16(cs, u->shard_grad, r, (size_t)u->grad_shard);
    } else if (s->replicated) {
        st = fsdp_dev_all_reduce(cs, s->world, u->full_grad, (size_t)u->grad_padded, FSDP_F32, FSDP_AVG);
        if (st == FSDP_OK && u->shard_grad_zero)
            st = fsdp_copy_d2d(cs, u->shard_grad, u->full_grad, sizeof(float) * (size_t)u->grad_padded);
        else if (st == FSDP_OK)
            k->add_inplace(cs, u->shard_grad, u->full_grad, (size_t)u->grad_padded);
    } else {  // a zeroed shard takes the sums outright (0 + x is x): one pass less over it
        float *sums = u->shard_grad_zero ? u->shard_grad : s->reduce_buf;  // (grad_shard,)
        st = fsdp_dev_reduce_scatter(cs, s->shard_comm, u->full_grad, sums, (size_t)u->grad_shard, FSDP_F32, FSDP_AVG);
        if (st == FSDP_OK && s->replica_comm)
            st = fsdp_dev_all_reduce(cs, s->replica_comm, sums, (size_t)u->grad_shard, FSDP_F32, FSDP_AVG);
        if (st == FSDP_OK && sums != u->shard_grad) {
            k->add_inplace(cs, u->shard_grad, sums, (size_t)u->grad_shard);
        } else if (st == FSDP_OK) {
            // Without the add, the comm stream's later work is still ordered after this reduction, as the
            // add's kernel ordered it: one reduction (its unsharded gradients, its buffers) in flight at
            // a time, which is what fsdp-plan accounts for. A no-op on an in-order stream.
            st = fsdp_event_record(s->comm_done, cs);
            if (st == FSDP_OK) st = fsdp_stream_wait_event(cs, s->comm_done);
        }
    }
    u->shard_grad_zero = 0;
    fsdp_trace_end();
    log_collective(s, u, op, bytes, fsdp_now_sec() - t0);
    FSDP_CHECK(with_context(s, u, op, st));
    views_fenced_by_reduction(s, u);
    // the add above ran after the collective on the same stream; a freed buffer is released once the
    // device is done with it (device.h)
    if (!u->grad_staged) fsdp_dev_free(s->dev, u->full_grad);
    u->full_grad = NULL;
    u->grad_staged = 0;
    u->grad = GRAD_NONE;
    return FSDP_OK;
}

static fsdp_unit *unit_of_block(fsdp_state *s, int block) {
    int i = s->block_unit[block];
    return i < 0 ? NULL : &s->units[i];
}

static int keeps_params_for_backward(const fsdp_state *s) {
    return s->cfg.strategy == FSDP_SHARD_GRAD_OP || s->replicated;
}

// The unit that runs after u in forward (dir = +1) or in backward (dir = -1), once the order is known.
static fsdp_unit *next_unit(fsdp_state *s, const fsdp_unit *u, int dir) {
    if (u->order_pos < 0) return NULL;
    int pos = u->order_pos + dir;
    return pos >= 0 && pos < s->order_len ? &s->units[s->order[pos]] : NULL;
}

static void record_order(fsdp_state *s, fsdp_unit *u) {
    if (s->order_known || u->order_pos >= 0) return;
    u->order_pos = s->order_len;
    s->order[s->order_len++] = u->index;
}

static const char *block_label(const fsdp_state *s, const fsdp_unit *u, int block, char *buf, size_t cap) {
    if (u) return u->name;
    snprintf(buf, cap, s->model.block_prefix, block);
    return buf;
}

static fsdp_status hook_pre_forward(void *user, int block) {
    fsdp_state *s = user;
    fsdp_unit *u = unit_of_block(s, block);
    char label[64];
    if (u) {
        record_order(s, u);
        FSDP_CHECK(fsdp_unshard(s, u));
        fsdp_unit *next = s->cfg.forward_prefetch && s->order_known ? next_unit(s, u, +1) : NULL;
        if (next) FSDP_CHECK(start_unshard(s, next, 1));
    }
    fsdp_trace_begin("forward", FSDP_SPAN_COMPUTE, block_label(s, u, block, label, sizeof label));
    return FSDP_OK;
}

static fsdp_status hook_post_forward(void *user, int block) {
    fsdp_state *s = user;
    fsdp_unit *u = unit_of_block(s, block);
    fsdp_trace_end();
    if (u && !keeps_params_for_backward(s)) fsdp_reshard(s, u);
    return FSDP_OK;
}

static fsdp_status hook_pre_backward(void *user, int block) {
    fsdp_state *s = user;
    fsdp_unit *u = unit_of_block(s, block);
    char label[64];
    if (u) {
        s->order_known = 1;  // a whole forward has run
        FSDP_CHECK(fsdp_unshard(s, u));
        FSDP_CHECK(fsdp_bind_grads(s, u));
        fsdp_unit *next = s->cfg.backward_prefetch == FSDP_PREFETCH_BACKWARD_PRE ? next_unit(s, u, -1) : NULL;
        if (next) FSDP_CHECK(start_unshard(s, next, 1));
    }
    fsdp_trace_begin("backward", FSDP_SPAN_COMPUTE, block_label(s, u, block, label, sizeof label));
    return FSDP_OK;
}

static fsdp_status hook_post_backward(void *user, int block) {
    fsdp_state *s = user;
    fsdp_unit *u = unit_of_block(s, block);
    fsdp_trace_end();
    if (!u) return FSDP_OK;
    fsdp_unit *next = s->cfg.backward_prefetch == FSDP_PREFETCH_BACKWARD_POST ? next_unit(s, u, -1) : NULL;
    if (next) FSDP_CHECK(start_unshard(s, next, 1));
    FSDP_CHECK(fsdp_reduce_grads(s, u));
    fsdp_reshard(s, u);
    return FSDP_OK;
}

fsdp_status engine_install_hooks(fsdp_state *s) {
    s->hooks.user = s;
    s->hooks.pre_forward = hook_pre_forward;
    s->hooks.post_forward = hook_post_forward;
    s->hooks.pre_backward = hook_pre_backward;
    s->hooks.post_backward = hook_post_backward;
    s->model.blocks->hooks = &s->hooks;
    s->sync = 1;
    const char *dbg = fsdp_tunable(FSDP_ENV_DEBUG);
    s->debug = !dbg ? 0 : strcmp(dbg, "DETAIL") == 0 ? 2 : strcmp(dbg, "INFO") == 0 ? 1 : 0;
    if (s->debug >= 2) {
        fsdp_comm_set_sequence_check(s->world, 1);
        fsdp_comm_set_sequence_check(s->shard_comm, 1);
        if (s->replica_comm) fsdp_comm_set_sequence_check(s->replica_comm, 1);
    }
    s->order = calloc((size_t)(s->n_units ? s->n_units : 1), sizeof(int));
    if (!s->order) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < s->n_units; i++) s->units[i].order_pos = -1;
    return FSDP_OK;
}

fsdp_status fsdp_begin_forward(fsdp_state *s, int sync) {
    if (!sync && s->cfg.deterministic)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "deterministic mode: no_sync is not supported (every chunk's "
                          "gradients are reduced exactly as it ends)");
    s->sync = sync;
    s->pass++;
    if (!s->root) return FSDP_OK;
    FSDP_CHECK(fsdp_unshard(s, s->root));
    return fsdp_bind_grads(s, s->root);
}

fsdp_status fsdp_begin_eval(fsdp_state *s) {
    s->sync = 1;
    s->pass++;
    return s->root ? fsdp_unshard(s, s->root) : FSDP_OK;
}

fsdp_status fsdp_end_eval(fsdp_state *s) {
    for (int i = 0; i < s->n_units; i++) fsdp_reshard(s, &s->units[i]);
    return fence_views(s);
}

fsdp_status fsdp_end_backward(fsdp_state *s) {
    if (s->root) {
        FSDP_CHECK(fsdp_reduce_grads(s, s->root));
        fsdp_reshard(s, s->root);
    }
    FSDP_CHECK(fence_views(s));
    for (int i = 0; i < s->n_units; i++)
        if (s->units[i].state != UNIT_SHARDED)
            return fsdp_error(FSDP_ERR_INTERNAL, "unit %s still unsharded after backward", s->units[i].name);
    FSDP_CHECK(compute_after_comm(s));  // the optimizer reads the reduced gradient shards
    if (s->cfg.deterministic) det_finalize(s);
    return FSDP_OK;
}

void fsdp_zero_grad(fsdp_state *s) {
    for (int i = 0; i < s->n_units; i++) {
        fsdp_unit *u = &s->units[i];
        if (u->grad_shard) fsdp_dev_memset(s->compute, u->shard_grad, 0, sizeof(float) * (size_t)u->grad_shard);
        u->shard_grad_zero = u->grad_shard > 0;
    }
    if (s->cfg.deterministic) det_zero(s);
}

fsdp_status fsdp_grad_norm(fsdp_state *s, double *norm) {
    if (s->cfg.deterministic) return det_grad_norm(s, norm);
    double sq = 0.0;
    FSDP_CHECK(fsdp_dev_memset(s->compute, s->norm_acc, 0, sizeof(double)));
    for (int i = 0; i < s->n_units; i++)
        if (s->units[i].grad_shard)
            s->k->sum_squares(s->compute, s->norm_acc, s->units[i].shard_grad, (size_t)s->units[i].grad_shard);
    FSDP_CHECK(fsdp_dev_read(s->compute, &sq, s->norm_acc, sizeof(double)));  // clipping needs it now
    if (!s->replicated) FSDP_CHECK(fsdp_all_reduce_double(s->shard_comm, &sq));
    *norm = sqrt(sq);
    return FSDP_OK;
}

void fsdp_scale_grads(fsdp_state *s, float factor) {
    for (int i = 0; i < s->n_units; i++)
        if (s->units[i].grad_shard)
            s->k->scale(s->compute, s->units[i].shard_grad, factor, (size_t)s->units[i].grad_shard);
}

fsdp_optimizer_config fsdp_optimizer_adamw(fsdp_adamw_config cfg) {
    fsdp_optimizer_config c = {.kind = FSDP_OPTIM_ADAMW, .adamw = cfg, .muon = fsdp_muon_defaults()};
    return c;
}

const char *fsdp_optimizer_name(fsdp_optimizer_kind kind) { return kind == FSDP_OPTIM_MUON ? "muon" : "adamw"; }

fsdp_status fsdp_optimizer_create(fsdp_state *s, fsdp_optimizer_config oc) {
    fsdp_adamw_config cfg = oc.adamw;
    if (s->have_opt) return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_optimizer_create: the optimizer exists already");
    int64_t n = fsdp_local_grad_numel(s);  // this rank's trainable shard elements: the optimizer state's size
    if (oc.kind == FSDP_OPTIM_MUON) {  // AdamW's state then covers only the elements Muon does not take
        FSDP_CHECK(muon_setup(s, &oc));
        n = muon_adamw_numel(s);
    }
    if (s->cfg.offload_dir) {  // the moments in mapped files too
        size_t bytes = sizeof(float) * (size_t)n;
        int R = fsdp_comm_rank(s->world);
        memset(&s->opt, 0, sizeof s->opt);
        s->opt.cfg = cfg;
        s->opt.n = n;
        s->opt_map[0] = fsdp_offload_map(s->dev, s->cfg.offload_dir, R, "exp_avg", 0, bytes);
        s->opt_map[1] = s->opt_map[0] ? fsdp_offload_map(s->dev, s->cfg.offload_dir, R, "exp_avg_sq", 0, bytes) : NULL;
        if (!s->opt_map[1]) return FSDP_ERR_IO;
        s->opt.m = s->opt_map[0];
        s->opt.v = s->opt_map[1];
        fsdp_mem_track(FSDP_MEM_OPTIM, 2 * bytes, +1);
    } else {
        FSDP_CHECK(fsdp_adamw_create(&s->opt, cfg, n, s->dev));
    }
    s->have_opt = 1;
    return FSDP_OK;
}

fsdp_status fsdp_optimizer_step(fsdp_state *s, float lr) {
    s->step++;
    fsdp_trace_begin("optimizer", FSDP_SPAN_COMPUTE, NULL);
    fsdp_adamw_begin_step(&s->opt);
    for (int i = 0; i < s->n_units; i++) {
        fsdp_unit *u = &s->units[i];
        if (!u->grad_shard) continue;  // every parameter frozen
        int next = i + 1;  // the next unit the optimizer updates
        while (next < s->n_units && !s->units[next].grad_shard) next++;
        if (u->storage == SHARD_OFFLOADED && next < s->n_units) {  // page in its state meanwhile
            const fsdp_unit *nx = &s->units[next];
            size_t bytes = sizeof(float) * (size_t)nx->grad_shard;  // its trainable segment: the first in the shard
            fsdp_offload_prefetch(nx->shard, bytes);
            fsdp_offload_prefetch(nx->shard_grad, bytes);
            fsdp_offload_prefetch(s->opt.m + nx->opt_offset, bytes);
            fsdp_offload_prefetch(s->opt.v + nx->opt_offset, bytes);
        }
        int done = 0;
        if (s->muon) {
            fsdp_status st = muon_step_unit(s, u, lr, &done);
            if (st != FSDP_OK) {
                fsdp_trace_end();
                return with_context(s, u, "muon step", st);
            }
        }
        if (!done) fsdp_adamw_update(s->k, s->compute, &s->opt, lr, u->shard, u->shard_grad, u->opt_offset, u->grad_shard);
    }
    fsdp_trace_end();
    return FSDP_OK;
}
