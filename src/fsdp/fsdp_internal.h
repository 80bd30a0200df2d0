// fsdp_internal.h: the engine's data structures, shared by the files of src/fsdp/.
#pragma once
#include "ckpt/safetensors.h"
#include "device/device.h"
#include "device/device_comm.h"
#include "fsdp/fsdp.h"

// A unit's parameters move through three states (engine.c); every transition is in engine.c:
//
//   SHARDED --start_unshard--> GATHERING --fsdp_unshard (compute waits on `gathered`)--> UNSHARDED
//      ^                          |                                                        |
//      +------ fsdp_reshard ------+--------------------------------------------------------+
//
// SHARDED: only the fp32 shard exists, `full` is NULL. GATHERING: `full` holds a pool buffer that an
// all-gather on the comm stream is filling; `gathered` completes when it is full. UNSHARDED: `full`
// is complete and the original parameters are bound to views of it (use_orig_params).
// Gradients have their own state: GRAD_NONE (no unsharded gradient), GRAD_BOUND (full_grad bound to
// the parameters' .grad, this micro-step's backward accumulates into it), GRAD_PENDING (no_sync:
// full_grad holds gradients of earlier micro-steps, reduced at the next synced one).
typedef enum { UNIT_SHARDED = 0, UNIT_GATHERING, UNIT_UNSHARDED } fsdp_unit_state;
typedef enum { GRAD_NONE = 0, GRAD_BOUND, GRAD_PENDING } fsdp_grad_state;
// Where the unit's shard and gradient shard live; unit_free (wrap.c) releases them by this kind.
typedef enum {
    SHARD_DEVICE = 0,  // fsdp_dev_alloc
    SHARD_SHARED,      // shard in the shard group's MPI shared memory (zero-copy all-gather; the CPU
                       // device only), with shard_lp beside it under param_dtype bf16
    SHARD_OFFLOADED,   // shard and shard_grad are --offload-dir file mappings registered with the device
} fsdp_shard_storage;

struct fsdp_unit {
    int index;
    int block;               // the block it wraps, or -1 for the root unit
    char name[64];
    int n_params;
    nn_param **params;       // (n_params,) in flat order
    int64_t *offsets;        // (n_params,) each parameter's first element in the flat parameter
    // The flat parameter has two segments, each padded and sharded on its own: the trainable
    // parameters first, [0, grad_padded), then the frozen ones (nn_param.frozen), [grad_padded, padded).
    // A rank's shard is its piece of each: [0, grad_shard) trainable, [grad_shard, shard_numel) frozen.
    // Only the trainable segment has gradients, reductions and optimizer state. Without frozen
    // parameters grad_padded == padded and grad_shard == shard_numel.
    int64_t numel;           // sum of the parameters' sizes
    int64_t train_numel;     // sum of the trainable parameters' sizes
    int64_t padded;          // flat size: both segments, each rounded up to shard_size * FSDP_PAD_ALIGN
    int64_t grad_padded;     // the trainable segment's padded size (the unsharded gradient's size)
    int64_t shard_numel;     // elements per rank (padded / shard_size; padded when replicated)
    int64_t grad_shard;      // of which trainable (grad_padded / shard_size): the gradient shard's size
    int shard_rank;          // this rank's shard (its rank in the shard group; 0 when replicated)
    int64_t shard_begin;     // this rank's first element of the trainable segment
    int64_t frozen_begin;    // this rank's first element of the frozen segment (counted from grad_padded)
    // Device memory unless storage says otherwise. Host code never dereferences these.
    float *shard;            // (shard_numel,) fp32 master parameters          FSDP_MEM_PARAMS
    float *shard_grad;       // (grad_shard,) reduced gradients (NULL when 0)   FSDP_MEM_GRADS
    int shard_grad_zero;     // shard_grad holds the zeros fsdp_zero_grad wrote and nothing was reduced into
                             // it since: the next reduction stores its result there instead of adding it
    float *full;             // (padded,) gathered parameters, NULL when SHARDED  FSDP_MEM_UNSHARDED
                             // (fsdp_bf16 values under param_dtype bf16)
    float *full_grad;        // (grad_padded,) this rank's unreduced gradients, or NULL  FSDP_MEM_UNSHARDED
    fsdp_bf16 *shard_lp;     // (shard_numel,) bf16 copy of the shard for a param_dtype bf16 all-gather
                             // from shared memory (zero-copy), or NULL                  FSDP_MEM_COMM
    long lp_pass;            // the pass (fsdp_state.pass) whose first gather of this unit rounded shard_lp
    fsdp_unit_state state;
    fsdp_grad_state grad;
    fsdp_shard_storage storage;
    int grad_staged;         // full_grad is one of the state's shared staging buffers (not owned)
    fsdp_event *gathered;    // recorded on the comm stream after this unit's all-gather
    int64_t opt_offset;      // where the unit's trainable shard (grad_shard elements) sits in the optimizer state
    int order_pos;           // position in the recorded forward order, -1 before it is known
    float *det_acc;          // (limbs, grad_shard) deterministic mode: the gradient's fixed-point digit
                             // sums over this step's chunks, or NULL                  FSDP_MEM_GRADS
};

#define FSDP_PAD_ALIGN 16  // shards are multiples of 16 floats (64 bytes)

struct fsdp_state {
    fsdp_config cfg;
    fsdp_dev *dev;            // cfg.device, or the process's default device
    const fsdp_kernels *k;    // the device's fp32 table: the engine's own kernels (casts, adds, optimizer)
    fsdp_stream *compute;     // the device's compute stream: the model, the optimizer, norms
    fsdp_stream *comm_stream; // the device's comm stream: all-gathers, reduce-scatters and their casts
    fsdp_event *compute_done; // recorded on compute before the comm stream reads what compute wrote
    fsdp_event *comm_done;    // recorded on comm before compute reads what the comm stream wrote
    double *norm_acc;         // (1,) device: the sum of squares of the gradient shards
    fsdp_model_desc model;
    fsdp_comm *world;
    fsdp_comm *shard_comm;    // ranks that split a unit's flat parameter (world, or the hybrid group)
    fsdp_comm *replica_comm;  // HYBRID_SHARD: ranks holding the same shard (NULL otherwise)
    int owns_shard_comm;
    char groups_line[320];    // the layout of the groups over nodes, for fsdp_print_summary ("" on one process)
    int replicated;           // NO_SHARD and DDP: every rank holds everything
    int n_units;
    fsdp_unit *units;         // (n_units,) block units in block order, root last
    int *block_unit;          // (blocks,) unit index of block i, or -1 when the root holds it
    fsdp_unit *root;          // NULL when every parameter is in a block unit
    nn_hooks hooks;
    int sync;                 // the current micro-step reduces gradients
    long pass;                // forward and eval passes begun (fsdp_begin_forward, fsdp_begin_eval): shards
                              // are written only between passes, so a rounded shard_lp stays valid in one
    int views_unfenced;       // parameters were bound in place (peers' shared shards) since the last
                              // collective every rank entered after its reads (engine.c: fence_views)
    // kept by engine.c's state transitions (set_state), so no per-unit hook scans every unit
    int n_block_unsharded;    // block units not SHARDED (gathering or unsharded): limit_all_gathers counts these
    int n_in_place_unsharded; // units UNSHARDED with their parameters bound in place (params_in_place)
    float *reduce_buf;        // (max grad_shard,) reduce-scatter destination  FSDP_MEM_COMM
    fsdp_adamw opt;
    int have_opt;
    struct muon_state *muon;  // --optimizer muon (muon_step.c), or NULL
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
    float *staging[2];        // (max block grad_padded,) shared gradient buffers for zero-copy reduce-scatter, or NULL
    int64_t staging_numel;
    int next_staging;
    int n_file_meta;
    char **file_meta;         // (2*n_file_meta,) key, value, ...: metadata every file written carries
    // deterministic mode (deterministic.c)
    fsdp_fixed_format det_fmt;
    float *det_send;          // (limbs * max grad_padded,) a unit's gradient digits, blocked per rank  FSDP_MEM_COMM
    float *det_recv;          // (limbs * max grad_shard,) the digit sums of this rank's block         FSDP_MEM_COMM
    int64_t *det_words;       // (FSDP_XSUM_WORDS,) device: exact sum of squares                   FSDP_MEM_OTHER
    float *det_grad[2];       // (max block grad_padded,) each: block units' unsharded gradients, alternating,
                              // so no backward maps fresh memory                              FSDP_MEM_UNSHARDED
    float *det_root_grad;     // (root grad_padded,) the root unit's unsharded gradient, or NULL (no root,
                              // or every root parameter frozen)                               FSDP_MEM_UNSHARDED
};

// A unit's segments (see fsdp_unit): 0 trainable, 1 frozen.
typedef struct {
    int64_t flat;   // the segment's first element in the flat parameter
    int64_t local;  // its first element in a rank's shard
    int64_t per;    // its elements per rank
    int64_t begin;  // this rank's first element within the segment
} unit_segment;

static inline unit_segment segment_of(const fsdp_unit *u, int g) {
    if (g == 0) return (unit_segment){0, 0, u->grad_shard, u->shard_begin};
    return (unit_segment){u->grad_padded, u->grad_shard, u->shard_numel - u->grad_shard, u->frozen_begin};
}

// The piece of parameter i of unit u held by shard-group rank q (this rank: fsdp_piece_at):
// elements [elem_begin, elem_begin + count) of the parameter, at shard_pos in that rank's shard.
typedef struct {
    int64_t elem_begin, count, shard_pos;
} fsdp_piece;

static inline fsdp_piece fsdp_piece_of_rank(const fsdp_unit *u, int i, int64_t q) {
    fsdp_piece pc = {0, 0, 0};
    unit_segment sg = segment_of(u, u->params[i]->frozen);  // the segment the parameter lies in
    int64_t p0 = u->offsets[i] - sg.flat, p1 = p0 + u->params[i]->numel;
    int64_t s0 = q * sg.per, s1 = s0 + sg.per;
    int64_t a = p0 > s0 ? p0 : s0, b = p1 < s1 ? p1 : s1;
    if (a < b) {
        pc.elem_begin = a - p0;
        pc.count = b - a;
        pc.shard_pos = sg.local + a - s0;
    }
    return pc;
}

static inline fsdp_piece fsdp_piece_at(const fsdp_unit *u, int i) {
    return fsdp_piece_of_rank(u, i, u->shard_rank);
}

// offload.c: zero-filled shared mappings of scratch files under dir (unlinked at once), registered with
// the device (its kernels and copies read and write them in place)
float *fsdp_offload_map(fsdp_dev *dev, const char *dir, int rank, const char *what, int index, size_t bytes);
void fsdp_offload_unmap(fsdp_dev *dev, float *p, size_t bytes);
void fsdp_offload_prefetch(const float *p, size_t bytes);

// params_io.c: a device fp32 buffer (largest unit's padded size,) for gathering one unit at a time
// FSDP_MEM_UNSHARDED
float *fsdp_alloc_unit_buffer(const fsdp_state *s);

// File I/O through bounded host staging (params_io.c): checkpoints and state dicts move between files
// and device memory FSDP_STAGE_FLOATS values at a time, so no rank ever holds a model-sized host copy.
#define FSDP_STAGE_FLOATS ((size_t)1 << 18)  // 1 MiB of fp32
typedef struct {
    fsdp_state *s;
    float *host;  // (FSDP_STAGE_FLOATS,) pinned host staging, FSDP_MEM_OTHER
} fsdp_stage;
fsdp_status fsdp_stage_open(fsdp_state *s, fsdp_stage *g);
void fsdp_stage_close(fsdp_stage *g);
// Streams src (count,) device fp32 into the writer's data (st_writer_stream_data).
fsdp_status fsdp_stage_write(fsdp_stage *g, st_writer *w, const float *src, int64_t count);
// The same, written as dtype: FSDP_F32, or FSDP_BF16 rounded to nearest even (the kernels' f32_to_bf16).
fsdp_status fsdp_stage_write_as(fsdp_stage *g, st_writer *w, const float *src, int64_t count, fsdp_dtype dtype);
// After rank 0 wrote (or failed to write) path with status st (st of other ranks: FSDP_OK): every rank
// returns rank 0's outcome, with its message. Collective.
fsdp_status fsdp_share_write_status(fsdp_state *s, fsdp_status st, const char *path);
// dst (count,) device = elements [first, first+count) of the file's tensor `name` (shape checked as
// st_read_f32_range does).
fsdp_status fsdp_stage_read(fsdp_stage *g, const st_file *f, const char *name, int ndim, const int64_t *shape,
                            int64_t first, int64_t count, float *dst);

// engine.c
fsdp_status engine_install_hooks(fsdp_state *s);  // called last by fsdp_wrap
fsdp_status fsdp_unshard(fsdp_state *s, fsdp_unit *u);
void fsdp_reshard(fsdp_state *s, fsdp_unit *u);
fsdp_status fsdp_bind_grads(fsdp_state *s, fsdp_unit *u);
fsdp_status fsdp_reduce_grads(fsdp_state *s, fsdp_unit *u);
// Gathers a per-shard array of the unit into the full flat layout: its shard (src (shard_numel,), dst
// (padded,)), or with trainable_only its shard_grad or an optimizer moment slice (src (grad_shard,),
// dst (grad_padded,)).
fsdp_status fsdp_gather_flat(fsdp_state *s, const fsdp_unit *u, const float *src, float *dst, int trainable_only);

// muon_step.c: Muon's sharded step (fsdp.h's fsdp_optimizer_config)
fsdp_status muon_setup(fsdp_state *s, const fsdp_optimizer_config *cfg);  // s->muon, before AdamW's state
void muon_free(fsdp_state *s);
// The size AdamW's state must have under Muon: this rank's trainable shard elements less its pieces of
// Muon's matrices (AdamW's moments are laid out compactly, unit by unit, piece by piece, over the rest).
int64_t muon_adamw_numel(const fsdp_state *s);
// The step of unit u (collective over the shard group when u holds matrices): Muon on its matrices'
// pieces, AdamW on its other pieces (at their compact places); *done = 1 (the caller runs nothing else).
fsdp_status muon_step_unit(fsdp_state *s, fsdp_unit *u, float lr, int *done);

// deterministic.c (all no-ops unless cfg.deterministic; see there)
fsdp_status det_setup(fsdp_state *s);  // the format and buffers, called by fsdp_wrap after the units
void det_free(fsdp_state *s);
void det_zero(fsdp_state *s);                              // zero the digit accumulators (compute stream)
fsdp_status det_reduce_grads(fsdp_state *s, fsdp_unit *u);  // quantize + reduce (comm stream)
void det_finalize(fsdp_state *s);                           // shard_grad from the digits (compute stream)
fsdp_status det_grad_norm(fsdp_state *s, double *norm);

// Adds the fsdp_set_file_metadata pairs to a file being written.
fsdp_status fsdp_add_file_metadata(const fsdp_state *s, st_writer *w);
