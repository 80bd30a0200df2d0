// fsdp_internal.h: the engine's data structures, shared by the files of src/fsdp/.
#pragma once
#include "ckpt/safetensors.h"
#include "fsdp/fsdp.h"

struct fsdp_unit {
    int index;
    int block;               // the block it wraps, or -1 for the root unit
    char name[64];
    int n_params;
    nn_param **params;       // (n_params,) in flat order
    int64_t *offsets;        // (n_params,) each parameter's first element in the flat parameter
    int64_t numel;           // sum of the parameters' sizes
    int64_t padded;          // flat size: numel rounded up to shard_size * FSDP_PAD_ALIGN
    int64_t shard_numel;     // elements per rank (padded / shard_size; padded when replicated)
    int64_t shard_begin;     // this rank's first flat element
    float *shard;            // (shard_numel,) fp32 master parameters          FSDP_MEM_PARAMS
    float *shard_grad;       // (shard_numel,) reduced gradients               FSDP_MEM_GRADS
    float *full;             // (padded,) gathered parameters, NULL when resharded  FSDP_MEM_UNSHARDED
                             // (fsdp_bf16 values under param_dtype bf16)
    float *full_grad;        // (padded,) this rank's unreduced gradients, or NULL  FSDP_MEM_UNSHARDED
    int grad_pending;        // full_grad holds gradients not yet reduced (no_sync)
    int64_t opt_offset;      // where the unit's shard sits in the optimizer state
    fsdp_comm_request *gather;  // an all-gather into `full` started early (prefetch), or NULL
    int shard_shared;        // shard lives in the shard group's shared memory (zero-copy all-gather)
    int offloaded;           // shard and shard_grad are mappings under --offload-dir
    int grad_staged;         // full_grad is one of the state's shared staging buffers
    int order_pos;           // position in the recorded forward order, -1 before it is known
    fsdp_bf16 *shard_lp;     // (shard_numel,) bf16 copy of the shard for a param_dtype bf16 all-gather
                             // from shared memory (zero-copy), or NULL                  FSDP_MEM_COMM
};

#define FSDP_PAD_ALIGN 16  // shards are multiples of 16 floats (64 bytes)

struct fsdp_state {
    fsdp_config cfg;
    fsdp_model_desc model;
    fsdp_comm *world;
    fsdp_comm *shard_comm;    // ranks that split a unit's flat parameter (world, or the hybrid group)
    fsdp_comm *replica_comm;  // HYBRID_SHARD: ranks holding the same shard (NULL otherwise)
    int owns_shard_comm;
    int replicated;           // NO_SHARD and DDP: every rank holds everything
    int n_units;
    fsdp_unit *units;         // (n_units,) block units in block order, root last
    int *block_unit;          // (blocks,) unit index of block i, or -1 when the root holds it
    fsdp_unit *root;          // NULL when every parameter is in a block unit
    nn_hooks hooks;
    int sync;                 // the current micro-step reduces gradients
    float *reduce_buf;        // (max shard_numel,) reduce-scatter destination  FSDP_MEM_COMM
    fsdp_adamw opt;
    int have_opt;
    // execution order of block units, recorded in the first forward; backward runs it in reverse
    int *order;               // (n_units,) unit indices
    int order_len;
    int order_known;          // 1 once a whole forward has been recorded
    double comm_wait_seconds; // time spent waiting for collectives the engine issued
    float *opt_map[2];        // --offload-dir: the mapped AdamW moments (m, v), or NULL
    // preallocated unshard buffers, so the peak is the same every step: `pool_n` buffers of the
    // largest block unit (as many as can be unsharded at once) and one for the root unit
    float *pool[64];          // (pool_n,) each (max block padded,) of param_dtype
    int pool_busy[64];
    int pool_n;
    int64_t pool_floats;
    float *root_pool;         // (root padded,) of param_dtype, or NULL
    int debug;                // FSDP_DEBUG: 0 off, 1 INFO, 2 DETAIL
    long step;                // optimizer steps taken (for messages)
    float *staging[2];        // (max padded,) shared gradient buffers for zero-copy reduce-scatter, or NULL
    int64_t staging_numel;
    int next_staging;
    int n_file_meta;
    char **file_meta;         // (2*n_file_meta,) key, value, ...: metadata every file written carries
};

// The piece of parameter i of unit u held by the rank whose shard starts at flat element
// shard_begin: elements [elem_begin, elem_begin + count) of the parameter, at shard_pos in that shard.
typedef struct {
    int64_t elem_begin, count, shard_pos;
} fsdp_piece;

static inline fsdp_piece fsdp_piece_at(const fsdp_unit *u, int i, int64_t shard_begin) {
    fsdp_piece pc = {0, 0, 0};
    int64_t p0 = u->offsets[i], p1 = p0 + u->params[i]->numel;
    int64_t s0 = shard_begin, s1 = s0 + u->shard_numel;
    int64_t a = p0 > s0 ? p0 : s0, b = p1 < s1 ? p1 : s1;
    if (a < b) {
        pc.elem_begin = a - p0;
        pc.count = b - a;
        pc.shard_pos = a - s0;
    }
    return pc;
}

// offload.c: zero-filled shared mappings of scratch files under dir (unlinked at once)
float *fsdp_offload_map(const char *dir, int rank, const char *what, int index, size_t bytes);
void fsdp_offload_unmap(float *p, size_t bytes);
void fsdp_offload_prefetch(const float *p, size_t bytes);

// params_io.c: an fp32 buffer (largest unit's padded size,) for gathering one unit at a time   FSDP_MEM_UNSHARDED
float *fsdp_alloc_unit_buffer(const fsdp_state *s);

// engine.c
fsdp_status fsdp_unshard(fsdp_state *s, fsdp_unit *u);
void fsdp_reshard(fsdp_state *s, fsdp_unit *u);
fsdp_status fsdp_bind_grads(fsdp_state *s, fsdp_unit *u);
fsdp_status fsdp_reduce_grads(fsdp_state *s, fsdp_unit *u);
// Gathers a per-shard array of the unit (its shard, shard_grad, or an optimizer moment slice; src:
// (shard_numel,)) into the full flat layout dst (padded,).
fsdp_status fsdp_gather_flat(fsdp_state *s, const fsdp_unit *u, const float *src, float *dst);

// Adds the fsdp_set_file_metadata pairs to a file being written.
fsdp_status fsdp_add_file_metadata(const fsdp_state *s, st_writer *w);
