// fsdp.h: Fully Sharded Data Parallel over a model made of blocks (the FSDP core).
//
// fsdp_wrap() groups the model's parameters into units by an auto-wrap policy; each unit has one
// flat parameter (its parameters concatenated, padded to a multiple of the shard-group size times an
// alignment), of which rank r keeps shard r in fp32 (the master copy), with its gradient shard; the
// optimizer only ever sees shards. Around each block's forward and backward the engine unshards
// (all-gathers) the block's unit, binds the original parameters (names and shapes unchanged:
// use_orig_params) to views of the gathered buffer, and afterwards reshards it and reduce-scatters
// its gradients. The root unit holds what no block unit took and stays unsharded from the start of
// forward to the end of backward.
#pragma once
#include <stdint.h>

#include "comm/comm.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "nn/sequential.h"
#include "optim/muon.h"
#include "optim/optim.h"

typedef enum {
    FSDP_FULL_SHARD,     // params, grads, optimizer state sharded; params regathered for backward
    FSDP_SHARD_GRAD_OP,  // params kept unsharded from forward to the end of backward
    FSDP_NO_SHARD,       // replicated params, all-reduced grads (each unit a bucket)
    FSDP_HYBRID_SHARD,   // FULL_SHARD inside groups of shard_group_size ranks, replicated across groups
    FSDP_DDP,            // replicated params, bucketed all-reduce of grads as backward proceeds
} fsdp_strategy;

typedef enum { FSDP_WRAP_TRANSFORMER, FSDP_WRAP_SIZE, FSDP_WRAP_NONE, FSDP_WRAP_CALLBACK } fsdp_wrap_policy;

typedef enum { FSDP_PREFETCH_NONE, FSDP_PREFETCH_BACKWARD_PRE, FSDP_PREFETCH_BACKWARD_POST } fsdp_backward_prefetch;

// Returns non-zero to make block `index` (of `block_type`, with `numel` parameters) its own unit.
typedef int (*fsdp_wrap_fn)(void *user, const char *block_type, int index, int64_t numel);

typedef struct {
    fsdp_dev *device;            // where shards, gathered units and gradients live (NULL: fsdp_dev_default());
                                 // the model's activations must use the same device (nn_ctx.dev)
    fsdp_strategy strategy;
    fsdp_wrap_policy wrap;
    int64_t min_num_params;      // FSDP_WRAP_SIZE: blocks with at least this many parameters
    fsdp_wrap_fn wrap_fn;        // FSDP_WRAP_CALLBACK
    void *wrap_user;
    int shard_group_size;        // FSDP_HYBRID_SHARD: 0 = ranks sharing a node
    fsdp_backward_prefetch backward_prefetch;
    int forward_prefetch;
    int limit_all_gathers;       // at most this many block units unsharded at once (0 = no limit)
    int sync_module_states;      // broadcast rank 0's initial parameters
    const char *offload_dir;     // keep master shards, gradient shards and AdamW state in mmap'ed files here
    int cpu_offload;             // CPUOffload(offload_params=True): parameters and gradients in host memory and
                                 // the optimizer on the host. On the host devices (cpu, guard) they already
                                 // are: a no-op until the CUDA device exists.
    // MixedPrecision. The master shards, their gradients and the optimizer stay fp32 whatever is set.
    fsdp_dtype param_dtype;      // FSDP_BF16: units are all-gathered in bf16 (half the bytes) and compute
                                 // sees bf16 parameter values; matrix products take bf16 operands (with
                                 // fsdp_compute_kernels' table), LayerNorm, softmax and the loss stay fp32
    fsdp_dtype reduce_dtype;     // FSDP_BF16: gradients reduce-scatter (all-reduce) as bf16 on the wire,
                                 // summed in fp32, rounded to bf16 once, added to the fp32 gradient shard
    // Deterministic mode (docs/deterministic.md): gradients are summed in fixed point, exactly, so the
    // gradient shards, their norm and so every update are the same bits on any world size, as long as
    // the caller feeds the same det_chunks chunks of the global batch, one per micro-step, each with a
    // loss gradient of its own mean (scale 1: the engine divides the sum by det_chunks), and keys
    // dropout on the chunk. no_sync is refused; reduce_dtype does not apply (the sums are exact).
    int deterministic;
    int det_chunks;              // chunks (micro-steps over all ranks) per optimizer step
    // Frozen parameters (requires_grad=False; docs/finetuning.md): a comma-separated list of globs
    // (fnmatch) on parameter names, e.g. "h.0.*,wpe.weight", or NULL. Each must match at least one
    // parameter. Matching parameters (and any with nn_param.frozen already set) are sharded and gathered
    // as usual but get no gradient, no reduction and no optimizer state.
    const char *freeze;
} fsdp_config;

fsdp_config fsdp_config_default(void);  // FULL_SHARD, transformer wrap, BACKWARD_PRE, limit 2, fp32
const char *fsdp_strategy_name(fsdp_strategy s);

// What the engine needs to know about a model: its parameters (in registration order), its blocks
// (each block's parameters are the ones whose names start with the block's prefix) and the
// Sequential whose hooks it drives.
typedef struct {
    nn_params *params;
    nn_sequential *blocks;
    const char *block_type;     // "TransformerEncoderLayer", "GPT2Block"
    const char *block_prefix;   // printf format of block i's name prefix: "%d." or "h.%d."
    int weights_in_out;         // the blocks' 2-D weights are stored [in, out] (GPT-2's Conv1D), else [out, in]
                                // (Linear): which side is the output, for Muon's shape scale
} fsdp_model_desc;

typedef struct fsdp_unit fsdp_unit;
typedef struct fsdp_state fsdp_state;

// Builds units and shards. Parameter values are NOT initialised here: call fsdp_init_params or
// fsdp_load_params next. Memory: shards only (no rank ever holds the whole model).
fsdp_status fsdp_wrap(fsdp_state **out, fsdp_model_desc model, fsdp_config cfg, fsdp_comm *world);
// fsdp_config.freeze's rule, for tools that lay a model out without wrapping it (fsdp-plan): marks the
// parameters each comma-separated glob (fnmatch) of `list` matches as frozen (NULL: none); a glob that
// matches no parameter, or an empty one, is FSDP_ERR_INVALID_ARG naming it.
fsdp_status fsdp_freeze_matching(nn_params *ps, const char *list);
void fsdp_free_state(fsdp_state *s);

// Fills each rank's shards with the values a one-process init would give (counter-based RNG).
fsdp_status fsdp_init_params(fsdp_state *s, uint64_t seed);
// sync_module_states: every replica of a shard takes rank 0's values (NO_SHARD and DDP: broadcast
// over the world; HYBRID_SHARD: across groups). Under FULL_SHARD and SHARD_GRAD_OP each element has
// exactly one owner, so there is nothing to synchronise. fsdp_init_params calls it when
// config.sync_module_states is set.
fsdp_status fsdp_sync_module_states(fsdp_state *s);
// Reads each rank's shard slices of every parameter from a full state dict (safetensors, by name; a
// name may carry alt_prefix, e.g. "transformer."): path is a .safetensors file or a Hugging Face
// model directory (model.safetensors, or the shards its model.safetensors.index.json lists: see
// ckpt/st_source.h), each rank reading only its own elements' byte ranges. strict: a parameter missing from the file, or a
// tensor in the file that is no parameter, is an error listing them (Hugging Face's attn.bias /
// attn.masked_bias buffers and a tied lm_head.weight are not counted). Not strict: missing parameters
// keep their current values and both lists go to `report` (may be NULL). Every rank validates every
// tensor, so a bad file fails on all ranks alike. Adapter parameters (nn_param.adapter) the file lacks
// are not missing: they keep their values (a base model's file has none).
fsdp_status fsdp_load_params(fsdp_state *s, const char *path, const char *alt_prefix, int strict, char *report,
                             size_t report_cap);
// Gathers the full parameters (or gradients: trainable parameters only) and writes them from rank 0
// as safetensors.
fsdp_status fsdp_save_full(fsdp_state *s, const char *path, int grads);
// The parameters fsdp_load_adapters and fsdp_save_params touch (nn_param.adapter tells them apart).
typedef enum { FSDP_PARAMS_ALL, FSDP_PARAMS_ADAPTERS, FSDP_PARAMS_BASE } fsdp_param_set;
// Writes the set's parameters as name_prefix + name (NULL: none), e.g. LoRA adapters alone under PEFT's
// "base_model.model.transformer." (fsdp_save_full's metadata and staging).
fsdp_status fsdp_save_params(fsdp_state *s, const char *path, fsdp_param_set set, const char *name_prefix);
// Reads every adapter parameter (nn_param.adapter) from a file holding exactly those (names bare or
// with alt_prefix): a missing adapter or any other tensor is an error listing them. (fsdp_load_params
// of a base-weights file leaves adapters it lacks at their values.)
fsdp_status fsdp_load_adapters(fsdp_state *s, const char *path, const char *alt_prefix);
// Adds scale x (B A) to the weight W of each entry, as PEFT's merge: A (r, in), B (out, r), W (out, in),
// or (in, out) with in_out (Conv1D, adding the transpose); then zeroes B, so the model computes the same
// function. Every rank gathers the units concerned; collective.
typedef struct {
    const char *weight, *a, *b;  // parameter names
    float scale;
    int in_out;
} fsdp_low_rank_merge;
fsdp_status fsdp_merge_low_rank(fsdp_state *s, const fsdp_low_rank_merge *merges, int n);
// Metadata (string key -> value, copied) that every file the state writes from now on carries next to
// its own keys: fsdp_save_full's state dict, a sharded checkpoint's index, a full checkpoint's two
// files. The tools record the model's configuration and their settings this way. keys, values: (n,)
fsdp_status fsdp_set_file_metadata(fsdp_state *s, int n, const char *const *keys, const char *const *values);

// One training micro-step: call begin before the model's forward, end_backward after its backward.
// sync = 0 is no_sync: gradients accumulate unsharded and are reduced at the next synced micro-step.
fsdp_status fsdp_begin_forward(fsdp_state *s, int sync);
fsdp_status fsdp_end_backward(fsdp_state *s);
void fsdp_zero_grad(fsdp_state *s);
// A forward without backward (evaluation, sampling): units are gathered and released as in training,
// no gradients are bound; end_eval reshards whatever the strategy kept.
fsdp_status fsdp_begin_eval(fsdp_state *s);
fsdp_status fsdp_end_eval(fsdp_state *s);

// Global L2 norm of the sharded gradients (what clip_grad_norm_ computes on the unsharded model).
fsdp_status fsdp_grad_norm(fsdp_state *s, double *norm);
void fsdp_scale_grads(fsdp_state *s, float factor);
// The optimizer over the shards. FSDP_OPTIM_ADAMW: AdamW on every trainable parameter. FSDP_OPTIM_MUON
// (docs/muon.md): Muon on every trainable 2-D weight of the blocks (its [out, in] matrix: the transpose
// of a weight stored [in, out], fsdp_model_desc.weights_in_out; LoRA adapters excepted), AdamW on the
// rest. Each matrix has one owner in the shard group (largest Newton-Schulz FLOPs first, to the least
// loaded rank, ties to the lower rank and the earlier matrix), which alone keeps its momentum (whole) and
// orthogonalizes it. Per unit holding matrices, a step all-gathers the unit's gradient shards (fp32) into
// a staging buffer of the unit's trainable size, each owner turns its matrices' gradients there into
// updates and zeroes the rest, and a sum reduce-scatter hands every rank the updates of its shard: 2 x
// (N - 1) / N x 4 bytes per trainable element of such a unit sent by each rank. Muon's learning rate
// follows the schedule: muon.lr x (lr / adamw.lr) at a step given lr (muon.lr when adamw.lr is 0).
// Not yet (refused with an error): NO_SHARD and DDP, deterministic mode, offload_dir, cpu_offload.
typedef enum { FSDP_OPTIM_ADAMW, FSDP_OPTIM_MUON } fsdp_optimizer_kind;
typedef struct {
    fsdp_optimizer_kind kind;
    fsdp_adamw_config adamw;  // every parameter (ADAMW), or those Muon does not take (MUON)
    fsdp_muon_config muon;    // MUON's matrices
} fsdp_optimizer_config;
fsdp_optimizer_config fsdp_optimizer_adamw(fsdp_adamw_config cfg);  // kind ADAMW with cfg
const char *fsdp_optimizer_name(fsdp_optimizer_kind kind);          // "adamw", "muon"
fsdp_status fsdp_optimizer_create(fsdp_state *s, fsdp_optimizer_config cfg);
// One step at learning rate lr (AdamW's; see above for Muon's). Collective under Muon (the exchange).
fsdp_status fsdp_optimizer_step(fsdp_state *s, float lr);
// What Muon did on this rank since fsdp_optimizer_create (zeros under AdamW).
typedef struct {
    int matrices;          // Muon's matrices in the model
    int owned;             // of which this rank owns (shard-group rank)
    int64_t momentum_numel;  // this rank's momentum elements (its owned matrices, whole)
    long ns_calls;         // Newton-Schulz passes run on this rank (one per owned matrix per step)
    double ns_flops;       // their FLOPs (fsdp_muon_ns_flops)
    double exchange_bytes; // bytes this rank sent in Muon's all-gathers and reduce-scatters (ring model)
} fsdp_muon_stats;
fsdp_muon_stats fsdp_muon_get_stats(const fsdp_state *s);

// Sharded checkpoints. A checkpoint directory holds shard_NNNNN.safetensors per rank (each parameter's
// and its AdamW moments' pieces that rank held, as 1-D tensors "<name>", "exp_avg.<name>",
// "exp_avg_sq.<name>"), and index.safetensors (for each parameter its shape "shape.<name>" and pieces
// "pieces.<name>" = rows of (rank, first element, count); metadata: world size, strategy, trainer state,
// each shard file's CRC-32, the fsdp_set_file_metadata pairs), then the marker DONE, written last by
// rank 0 after every rank finished. Frozen parameters (nn_param.frozen) have no moments: a checkpoint
// saved with them frozen resumes with the same parameters frozen (with them trainable, the missing
// "exp_avg.<name>" is an error naming it).
// Loading works on any world size and strategy: each rank reads only the ranges it now holds.
typedef struct {
    int64_t step;          // optimizer steps completed
    int64_t seed;
    int64_t global_batch;  // sequences per optimizer step when saved (data position carries over if equal)
    char run_id[24];       // the run (lineage) the checkpoint belongs to, "" for none (ckpt/ckpt_dir.h)
    int64_t resumed_from;  // the step the process that saved it started from (0: a fresh start)
} fsdp_trainer_state;
fsdp_status fsdp_checkpoint_save(fsdp_state *s, const char *dir, const fsdp_trainer_state *ts);
// A full checkpoint instead: model.safetensors (the full state dict, PyTorch names, loadable by torch
// with strict=True) and optimizer.safetensors ("exp_avg.<name>", "exp_avg_sq.<name>"; metadata: the
// trainer state), both gathered to rank 0 one unit at a time, then DONE.
fsdp_status fsdp_checkpoint_save_full(fsdp_state *s, const char *dir, const fsdp_trainer_state *ts);
// Loads either kind (a directory with model.safetensors is a full checkpoint). Fails (on every rank,
// with the model untouched) unless every file is present, checksums match and every tensor fits.
fsdp_status fsdp_checkpoint_load(fsdp_state *s, const char *dir, fsdp_trainer_state *ts);
// Checks that dir is complete (DONE present) and that the files DONE lists match their CRC-32s.
fsdp_status fsdp_verify_marker(const char *dir);

// The kernel table the model's forward and backward should run with: the device's bf16 table under
// param_dtype bf16 (bf16 operands in every matrix product), its fp32 table otherwise.
const fsdp_kernels *fsdp_compute_kernels(const fsdp_state *s);
// The context the model's forward and backward run with: the state's device, its compute stream and
// fsdp_compute_kernels; training, seed and step as given.
nn_ctx fsdp_model_ctx(const fsdp_state *s, int training, uint64_t seed, uint64_t step);
fsdp_dev *fsdp_state_device(const fsdp_state *s);

// Deterministic mode: the fixed-point format that sums `contributions` values exactly.
fsdp_fixed_format fsdp_det_format(int contributions);
// The mean of every rank's per_rank values (mine: (per_rank,)), summed in chunk order whatever the
// world size: chunk (rank r, micro-step m) is r * per_rank + m when rank_major, else m * world + r.
// Collective over world.
fsdp_status fsdp_det_mean(fsdp_comm *world, const double *mine, int per_rank, int rank_major, double *mean);

// Layout and memory
int fsdp_unit_count(const fsdp_state *s);
int64_t fsdp_local_numel(const fsdp_state *s);       // sum of this rank's shard sizes
int64_t fsdp_local_grad_numel(const fsdp_state *s);  // of which trainable: its gradient and optimizer elements
void fsdp_print_summary(const fsdp_state *s, FILE *f);  // like fsdp.summarize().print_summary()
fsdp_comm *fsdp_shard_comm(const fsdp_state *s);
// Bytes of state (master shards, gradient shards, AdamW moments) this process now keeps in
// --offload-dir file mappings rather than anonymous memory; 0 without --offload-dir.
size_t fsdp_offload_bytes(void);
// Seconds this rank has spent blocked in collectives (all of the engine's groups) since wrap: the
// communication that compute did not hide.
double fsdp_exposed_comm_seconds(const fsdp_state *s);
// Bytes this rank has sent in collectives (all of the engine's groups) since wrap.
double fsdp_comm_bytes_sent(const fsdp_state *s);
fsdp_comm *fsdp_world_comm(const fsdp_state *s);
// HYBRID_SHARD: the group of ranks holding the same shard (one per shard group); NULL otherwise.
fsdp_comm *fsdp_replica_comm(const fsdp_state *s);
// fsdp_comm_bytes_sent split by group: *shard (the shard group's collectives, and the world's where it
// is another group) and *replica (HYBRID_SHARD's cross-group all-reduces, else 0); they sum to it.
void fsdp_comm_bytes_by_group(const fsdp_state *s, double *shard, double *replica);

// use_orig_params: iterate named parameters with this rank's piece of each.
typedef struct {
    const char *name;
    int ndim;
    const int64_t *shape;
    int64_t numel;
    int64_t shard_offset;  // first element of the parameter held by this rank
    int64_t shard_numel;   // how many (0 when the rank holds none of it)
    float *shard_data;     // (shard_numel,) device: this rank's values of those elements
    float *shard_grad;     // (shard_numel,) device: and their gradients (NULL for a frozen parameter)
} fsdp_named_param;
int fsdp_named_param_count(const fsdp_state *s);
fsdp_named_param fsdp_named_param_at(const fsdp_state *s, int i);
