// cuda_nccl.c: the cuda backend's NCCL transport (cuda_nccl.h): the record of each process group the
// device's streams run collectives on, the path decided at its first collective (cuda_comm_choice.h),
// its communicator, the transport table comm.c calls (fsdp_comm_transport: enqueue on the stream set by
// cuda_nccl_begin), asynchronous errors, the watchdog's abort, and the waits that poll instead of block.
#include "device/cuda/cuda_nccl.h"

#ifdef FSDP_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_transport.h"
#include "core/tunables.h"
#include "device/cuda/cuda_comm_choice.h"
#include "device/cuda/cuda_state.h"
#ifdef FSDP_HAVE_NCCL
#include "device/cuda/cuda_nccl_api.h"
#endif

#define NCCL_MAX_GROUPS 16  // groups per device (the engine uses three: world, shard, replica)

struct cuda_nccl_group {
    fsdp_dev *dev;
    fsdp_comm *comm;
    int rank, size;        // this rank in the group, the group's ranks
    int use_nccl;          // 1: its collectives run through NCCL; 0: staged through host memory
    char label[160];       // fsdp_comm_describe's words, for messages
    const char *last;      // the last collective enqueued on it (a static string), for asynchronous errors
    void *stream;          // the cudaStream_t a collective in progress enqueues on; NULL outside one
#ifdef FSDP_HAVE_NCCL
    ncclComm_t nc;         // NULL where staged, or once aborted
#endif
};

// CD(d)->nccl
typedef struct {
    int mode;                                  // cuda_comm_mode (FSDP_DEVICE_COMM, read at the first collective)
    cuda_nccl_group *groups[NCCL_MAX_GROUPS];  // (n_groups,)
    int n_groups;
    int n_nccl;                                // of which use NCCL
} cuda_nccl_dev;

// d's record of the groups, made at its first collective (the mode read then); NULL with the error set
static cuda_nccl_dev *dev_state(fsdp_dev *d) {
    if (CD(d)->nccl) return CD(d)->nccl;
    const char *v = fsdp_tunable(FSDP_ENV_DEVICE_COMM);
    int mode = cuda_comm_mode_parse(v);
    if (mode < 0) {
        fsdp_error(FSDP_ERR_INVALID_ARG, "device cuda: FSDP_DEVICE_COMM=%s: expected auto, nccl or host", v);
        return NULL;
    }
    cuda_nccl_dev *nd = calloc(1, sizeof *nd);
    if (!nd) {
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of memory");
        return NULL;
    }
    nd->mode = mode;
    CD(d)->nccl = nd;
    return nd;
}

int cuda_nccl_active(const fsdp_dev *d) {
    const cuda_nccl_dev *nd = CD(d)->nccl;
    return nd && nd->n_nccl > 0;
}

#ifdef FSDP_HAVE_NCCL
// ---------------------------------------------------------------------------------------------
// The transport (comm_transport.h), ctx = the group's record

static cuda_nccl_group *find_group(const cuda_nccl_dev *nd, const fsdp_comm *c) {
    for (int i = 0; i < nd->n_groups; i++)
        if (nd->groups[i]->comm == c) return nd->groups[i];
    return NULL;
}

static void forget_group(cuda_nccl_dev *nd, cuda_nccl_group *g) {
    for (int i = 0; i < nd->n_groups; i++)
        if (nd->groups[i] == g) {
            nd->n_nccl -= g->use_nccl;
            nd->groups[i] = nd->groups[--nd->n_groups];
            return;
        }
}

static const fsdp_nccl_api *N;  // set by the first group that loads NCCL (fsdp_nccl's table never changes)

static ncclDataType_t nccl_dtype(fsdp_dtype dt) { return dt == FSDP_BF16 ? ncclBfloat16 : ncclFloat32; }
static ncclRedOp_t nccl_op(fsdp_reduce_op op) { return op == FSDP_AVG ? ncclAvg : ncclSum; }

static fsdp_status nccl_fail(const cuda_nccl_group *g, const char *coll, ncclResult_t r) {
    const char *detail = g->nc ? N->get_last_error(g->nc) : NULL;
    return fsdp_error(FSDP_ERR_COMM, "rank %d, %s, nccl %s: %s%s%s", g->rank, g->label, coll, N->get_error_string(r),
                      detail && *detail ? ": " : "", detail ? detail : "");
}

#define NCCL_TRY(g, coll, call)                                              \
    do {                                                                     \
        (g)->last = (coll);                                                  \
        ncclResult_t nccl_r_ = (call);                                       \
        if (nccl_r_ != ncclSuccess) return nccl_fail((g), (coll), nccl_r_); \
    } while (0)

static int t_accepts(void *ctx, const void *buf) {
    (void)buf;
    return ((const cuda_nccl_group *)ctx)->stream != NULL;  // only the cuda streams' collectives (cuda_nccl_begin)
}

static fsdp_status t_all_gather(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    cuda_nccl_group *g = ctx;
    NCCL_TRY(g, "all_gather", N->all_gather(send, recv, count, nccl_dtype(dt), g->nc, (cudaStream_t)g->stream));
    return FSDP_OK;
}

static fsdp_status t_reduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                    fsdp_reduce_op op) {
    cuda_nccl_group *g = ctx;
    NCCL_TRY(g, "reduce_scatter",
             N->reduce_scatter(send, recv, count, nccl_dtype(dt), nccl_op(op), g->nc, (cudaStream_t)g->stream));
    return FSDP_OK;
}

static fsdp_status t_all_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    cuda_nccl_group *g = ctx;
    NCCL_TRY(g, "all_reduce", N->all_reduce(buf, buf, count, nccl_dtype(dt), nccl_op(op), g->nc, (cudaStream_t)g->stream));
    return FSDP_OK;
}

static fsdp_status t_broadcast(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, int root) {
    cuda_nccl_group *g = ctx;
    NCCL_TRY(g, "broadcast", N->broadcast(buf, buf, count, nccl_dtype(dt), root, g->nc, (cudaStream_t)g->stream));
    return FSDP_OK;
}

static void destroy_comm(cuda_nccl_group *g) {
    if (g->nc) N->comm_destroy(g->nc);
    g->nc = NULL;
}

// the group is being freed (fsdp_comm_free): its communicator and record go
static void t_detach(fsdp_comm *c, void *ctx) {
    cuda_nccl_group *g = ctx;
    destroy_comm(g);
    forget_group(CD(g->dev)->nccl, g);
    free(g);
}

// the watchdog's thread: end the communicator's work without waiting for the peers
static void t_abort(fsdp_comm *c, void *ctx) {
    cuda_nccl_group *g = ctx;
    ncclComm_t nc = g->nc;
    g->nc = NULL;
    if (nc) N->comm_abort(nc);
}

static const fsdp_comm_transport nccl_transport = {
    .name = "nccl",
    .accepts = t_accepts,
    .all_gather = t_all_gather,
    .reduce_scatter = t_reduce_scatter,
    .all_reduce = t_all_reduce,
    .broadcast = t_broadcast,
    .detach = t_detach,
    .abort = t_abort,
};

// ---------------------------------------------------------------------------------------------
// A group's first collective: the cards, the decision, the communicator

static fsdp_status make_comm(cuda_nccl_group *g, const char *coll) {
    struct {
        int32_t ok, reserved;
        ncclUniqueId id;
    } boot;  // rank 0's id, broadcast over the group's host transport (as 4-byte words)
    memset(&boot, 0, sizeof boot);
    if (g->rank == 0) boot.ok = N->get_unique_id(&boot.id) == ncclSuccess;
    FSDP_CHECK(fsdp_broadcast(g->comm, &boot, sizeof boot / 4, FSDP_F32, 0));
    if (!boot.ok)
        return fsdp_error(FSDP_ERR_COMM, "rank %d, %s, %s: rank 0 could not make an NCCL unique id (ncclGetUniqueId)",
                          g->rank, g->label, coll);
    CU_TRY(cudaSetDevice(CD(g->dev)->ordinal), "cudaSetDevice");  // before ncclCommInitRank (nccl.h)
    fsdp_comm_mark_wait("ncclCommInitRank");  // blocks until every rank of the group has joined
    ncclResult_t r = N->comm_init_rank(&g->nc, g->size, boot.id, g->rank);
    fsdp_comm_mark_done();
    if (r != ncclSuccess) {
        g->nc = NULL;
        return fsdp_error(FSDP_ERR_COMM, "rank %d, %s, %s: ncclCommInitRank: %s%s", g->rank, g->label, coll,
                          N->get_error_string(r),
                          r == ncclInvalidUsage ? " (two ranks on one GPU? give each rank its own NCCL_HOSTID, or "
                                                  "use --comm host)" : "");
    }
    return FSDP_OK;
}

// This rank's card (cuda_comm_choice.h)
static void fill_card(fsdp_dev *d, fsdp_comm *c, cuda_rank_card *card) {
    memset(card, 0, sizeof *card);
    snprintf(card->host, sizeof card->host, "%s", fsdp_comm_host(c));
    const char *host_id = getenv("NCCL_HOSTID");
    if (host_id) snprintf(card->host_id, sizeof card->host_id, "%s", host_id);
    if (cudaDeviceGetPCIBusId(card->gpu, (int)sizeof card->gpu, CD(d)->ordinal) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(card->gpu, sizeof card->gpu, "cuda:%d", CD(d)->ordinal);
    }
    card->gpu[sizeof card->gpu - 1] = 0;
    const fsdp_nccl_api *api = fsdp_nccl();
    if (api) N = api;
    card->nccl = api != NULL;
}

static fsdp_status decide(fsdp_dev *d, cuda_nccl_dev *nd, fsdp_comm *c, const char *coll, cuda_nccl_group **out) {
    if (nd->n_groups == NCCL_MAX_GROUPS)
        return fsdp_error(FSDP_ERR_INTERNAL, "device cuda: more than %d process groups ran collectives on it",
                          NCCL_MAX_GROUPS);
    cuda_nccl_group *g = calloc(1, sizeof *g);
    int n = fsdp_comm_size(c);
    cuda_rank_card *cards = calloc((size_t)n, sizeof *cards);  // (n,)
    if (!g || !cards) {
        free(g), free(cards);
        return fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of memory");
    }
    g->dev = d, g->comm = c, g->rank = fsdp_comm_rank(c), g->size = n;
    fsdp_comm_describe(c, g->label, sizeof g->label);
    cuda_rank_card mine;
    fill_card(d, c, &mine);
    fsdp_status st = fsdp_all_gather(c, &mine, cards, sizeof mine / 4, FSDP_F32);  // host memory: host transport
    char msg[512];
    int path = st == FSDP_OK ? cuda_comm_choose((cuda_comm_mode)nd->mode, cards, n, g->rank, g->label, coll, msg,
                                                sizeof msg)
                             : -1;
    free(cards);
    if (st == FSDP_OK && path < 0) st = fsdp_error(FSDP_ERR_INVALID_ARG, "%s", msg);
    g->use_nccl = path > 0;
    if (st == FSDP_OK && g->use_nccl) st = make_comm(g, coll);
    // installed where staged too: the group's fsdp_comm_free then reaches this record (t_detach)
    if (st == FSDP_OK) st = fsdp_comm_set_device_transport(c, &nccl_transport, g);
    if (st != FSDP_OK) {
        destroy_comm(g);
        free(g);
        return st;
    }
    nd->groups[nd->n_groups++] = g;
    nd->n_nccl += g->use_nccl;
    *out = g;
    return FSDP_OK;
}

cuda_nccl_group *cuda_nccl_begin(fsdp_stream *s, fsdp_comm *c, const char *coll, fsdp_status *st) {
    *st = FSDP_OK;
    cuda_nccl_dev *nd = dev_state(s->dev);
    if (!nd) {
        *st = FSDP_ERR_INVALID_ARG;
        return NULL;
    }
    // host: staged; auto: NCCL only between ranks (a group of one is the identity either way)
    if (nd->mode == CUDA_COMM_HOST || (nd->mode == CUDA_COMM_AUTO && fsdp_comm_size(c) == 1)) return NULL;
    cuda_nccl_group *g = find_group(nd, c);
    if (!g && (*st = decide(s->dev, nd, c, coll, &g)) != FSDP_OK) return NULL;
    if (!g->use_nccl) return NULL;
    if (!g->nc) {
        *st = fsdp_error(FSDP_ERR_COMM, "rank %d, %s, nccl %s: the communicator was aborted after an earlier failure",
                         g->rank, g->label, coll);
        return NULL;
    }
    *st = dev_take_error(s);  // a failure noted on s comes first
    if (*st != FSDP_OK) return NULL;
    g->stream = CS(s)->cu;
    return g;
}

// ncclCommGetAsyncError of g: FSDP_OK, or the failure (g's communicator aborted)
static fsdp_status poll_group(cuda_nccl_group *g) {
    if (!g->nc) return FSDP_OK;
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = N->comm_get_async_error(g->nc, &async);
    if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) return FSDP_OK;
    ncclResult_t bad = r != ncclSuccess ? r : async;
    char msg[512];
    snprintf(msg, sizeof msg, "rank %d, %s, nccl %s: asynchronous error: %s (%s); the communicator is aborted",
             g->rank, g->label, g->last ? g->last : "?", N->get_error_string(bad), N->get_last_error(g->nc));
    t_abort(g->comm, g);
    return fsdp_error(FSDP_ERR_COMM, "%s", msg);
}

fsdp_status cuda_nccl_end(cuda_nccl_group *g, fsdp_status st) {
    g->stream = NULL;
    return st != FSDP_OK ? st : poll_group(g);
}

fsdp_status cuda_nccl_poll(fsdp_dev *d) {
    cuda_nccl_dev *nd = CD(d)->nccl;
    for (int i = 0; nd && i < nd->n_groups; i++)
        if (nd->groups[i]->use_nccl) FSDP_CHECK(poll_group(nd->groups[i]));
    return FSDP_OK;
}

fsdp_status cuda_nccl_wait(fsdp_stream *s, fsdp_event *ev) {
    const struct timespec pause = {0, 20000};  // 20 us between queries
    fsdp_comm_mark_wait("nccl (the GPU's collectives)");
    fsdp_status st = FSDP_OK;
    for (;;) {
        cudaError_t e = ev ? cudaEventQuery((cudaEvent_t)ev->native) : cudaStreamQuery((cudaStream_t)CS(s)->cu);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) {
            st = dev_cuda_fail(e, ev ? "cudaEventQuery" : "cudaStreamQuery");
            break;
        }
        if ((st = cuda_nccl_poll(s->dev)) != FSDP_OK) break;
        nanosleep(&pause, NULL);
    }
    fsdp_comm_mark_done();
    return st;
}

fsdp_status cuda_nccl_check_mode(const fsdp_dev *d, const char *mode) {
    (void)d;
    int m = cuda_comm_mode_parse(mode);
    if (m < 0) return fsdp_error(FSDP_ERR_INVALID_ARG, "expected auto, nccl or host, got '%s'", mode);
    if (m == CUDA_COMM_NCCL && !fsdp_nccl()) {
        char why[512];
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s", why);
    }
    return FSDP_OK;
}

void cuda_nccl_close(fsdp_dev *d) {
    cuda_nccl_dev *nd = CD(d)->nccl;
    if (!nd) return;
    for (int i = 0; i < nd->n_groups; i++) {
        cuda_nccl_group *g = nd->groups[i];
        fsdp_comm_set_device_transport(g->comm, NULL, NULL);
        destroy_comm(g);
        free(g);
    }
    free(nd);
    CD(d)->nccl = NULL;
}

#else  // CUDA without NCCL: every group staged; --comm nccl an error

cuda_nccl_group *cuda_nccl_begin(fsdp_stream *s, fsdp_comm *c, const char *coll, fsdp_status *st) {
    *st = FSDP_OK;
    cuda_nccl_dev *nd = dev_state(s->dev);
    if (!nd) *st = FSDP_ERR_INVALID_ARG;
    else if (nd->mode == CUDA_COMM_NCCL) {
        char group[160];
        fsdp_comm_describe(c, group, sizeof group);
        *st = fsdp_error(FSDP_ERR_INVALID_ARG, "rank %d, %s, %s: --comm nccl: this build has no NCCL (nccl.h and "
                         "libnccl.so.2 were not found when it was configured); --comm host stages through host memory",
                         fsdp_comm_rank(c), group, coll);
    }
    return NULL;
}

fsdp_status cuda_nccl_end(cuda_nccl_group *g, fsdp_status st) { return st; }
fsdp_status cuda_nccl_poll(fsdp_dev *d) { return FSDP_OK; }
fsdp_status cuda_nccl_wait(fsdp_stream *s, fsdp_event *ev) { return FSDP_OK; }

fsdp_status cuda_nccl_check_mode(const fsdp_dev *d, const char *mode) {
    int m = cuda_comm_mode_parse(mode);
    if (m < 0) return fsdp_error(FSDP_ERR_INVALID_ARG, "expected auto, nccl or host, got '%s'", mode);
    if (m == CUDA_COMM_NCCL)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "this build has no NCCL (nccl.h and libnccl.so.2 were not found when "
                          "it was configured; NCCL_ROOT points CMake at them)");
    return FSDP_OK;
}

void cuda_nccl_close(fsdp_dev *d) {
    free(CD(d)->nccl);
    CD(d)->nccl = NULL;
}

#endif  // FSDP_HAVE_NCCL
#endif  // FSDP_HAVE_CUDA
