// plan.h: predicts, before anything runs, a rank's peak memory by category and the bytes it sends per
// optimizer step, for the models and strategies of this project, from the same layout rules the
// engine uses (units, padding, shards, gathered buffers, shared gradient staging, prefetch limits,
// activation buffers with and without checkpointing). build/bin/fsdp-plan prints it.
#pragma once
#include <stdint.h>

// The block's linear layers as the plan numbers them (skip_dw, lora_targets, lora_skip): GPT-2 and the
// encoder stack: 0 QKV in-projection, 1 attention out-projection, 2 FFN in, 3 FFN out; Llama: 0 q_proj,
// 1 k_proj, 2 v_proj, 3 o_proj, 4 gate_proj, 5 up_proj, 6 down_proj (nn/llama.h's LLAMA_LORA_* bits)
#define FSDP_PLAN_MAX_LINEAR 7
#define FSDP_PLAN_SKIP_HEAD (1 << FSDP_PLAN_MAX_LINEAR)  // skip_dw: the LM head's weight gradient
#define FSDP_PLAN_SKIP_DB 8                              // lora_skip: bit FSDP_PLAN_SKIP_DB + i, layer i's dB

typedef struct {
    int gpt2;             // 1: GPT-2 (fsdp-train), 0: the seed's encoder stack (fsdp-minimal) or Llama
    int llama;            // 1: the Llama family (fsdp-train --arch llama; gpt2 0): RMSNorm, grouped-query
                          // attention with q/k/v/o_proj, the SwiGLU MLP gate/up/down_proj of width ffn
    int layers, d_model, heads, ffn;  // ffn: encoder dim_feedforward, Llama d_ff (GPT-2 uses 4 x d_model)
    int vocab, seq, max_seq;          // GPT-2 and Llama (max_seq 0: seq; Llama's rotary tables have max_seq rows)
    int kv_heads, head_dim;           // Llama: key/value heads, the per-head width hd
    int tie_embeddings;               // Llama: lm_head is embed_tokens (no (V, C) head of its own)
    int qkv_bias, o_bias, mlp_bias;   // Llama: biases on q/k/v_proj, on o_proj, on gate/up/down_proj
    int batch;            // rows per micro-step on one rank (fsdp-train --batch; fsdp-minimal: global / world / accum)
    int grad_accum;
    int world;
    int strategy;         // fsdp_strategy
    int shard_group;      // HYBRID_SHARD group size (0: the world, one node)
    int wrap;             // 0 transformer, 1 size:min_num_params, 2 none
    int64_t min_num_params;
    int backward_prefetch;  // 0 pre, 1 post, 2 none
    int forward_prefetch;
    int limit_all_gathers;
    int activation_checkpointing;
    int shared_memory;    // ranks share a node (the shared-memory collectives and gradient staging);
                          // 0: as ranks_per_host 1
    int ranks_per_host;   // ranks on each host (0: every rank on one host); a group whose ranks all lie on
                          // one host uses shared memory, one spanning hosts plain MPI. Rank r is on
                          // host r / ranks_per_host (mpirun --map-by slot); HYBRID_SHARD's default shard
                          // group is a host
    double intra_host_gbps;  // GB/s (1e9 bytes/s) one rank sends to ranks on its own host (0: 20)
    double inter_host_gbps;  // GB/s one host's NIC sends to other hosts (0: 12.5, a 100 Gb/s NIC)
    int flat_reduce_scatter;  // 1: a shard group spanning hosts with several of its ranks on each reduce-scatters
                              // flat (FSDP_COMM_ALGO=p2p or mpi); 0 (the default): hierarchically (comm_hier.c)
    int zero_copy;        // shards and gradient staging in the window's shared memory: the cpu device on
                          // shared memory (the guard device keeps them in device memory: 0)
    int param_bf16;       // MixedPrecision param_dtype bf16 (all-gathers of 2 bytes per element)
    int reduce_bf16;      // MixedPrecision reduce_dtype bf16 (gradient reductions of 2 bytes per element)
    int threads;          // OpenMP threads per rank (0: 1)
    int bf16_emulated;    // the bf16 GEMM runs emulated (no avx512_bf16 or AMX: fp32 copies, then the fp32 GEMM)
    double gemm_pack_a_bytes, gemm_pack_b_bytes;  // the device's fp32 GEMM packing scratch per thread, an A
                                                  // block and a B block (fsdp_dev_caps; 0: none in host memory)
    int det_limbs;        // --deterministic: fixed-point digits per gradient element (fsdp_det_format), 0 off:
                          // reductions of 4 x det_limbs bytes per element, a digit accumulator per shard, no
                          // gradient staging; grad_accum is then the chunks per rank
    // Frozen parameters (--freeze; fsdp_config.freeze): each unit's flat parameter is then two segments,
    // trainable then frozen, each padded to shard group x 16 and sharded on its own (wrap.c build_unit);
    // gradients, reductions and optimizer state cover the trainable segment only. NULL block_train:
    // every parameter trains (root_train and skip_dw are ignored).
    const int64_t *block_train;  // (layers,) trainable elements of each block, or NULL
    int64_t root_train;   // with block_train: trainable elements outside the blocks (GPT-2's wte, wpe, ln_f;
                          // Llama's embed_tokens, norm, lm_head; 0 for the encoder stack); blocks the wrap
                          // policy leaves unwrapped add theirs
    int skip_dw;          // with block_train: weight-gradient GEMMs no layer runs (their weight frozen in every
                          // block): bit i for the block's linear layer i (FSDP_PLAN_MAX_LINEAR's numbering),
                          // FSDP_PLAN_SKIP_HEAD the LM head (GPT-2's tied wte.weight, Llama's lm_head.weight)
    // LoRA (fsdp-train --lora-*, nn/lora.c): a rank-lora_rank adapter, A (R, in) and B (out, R), on each
    // targeted linear layer of every block, registered in the block (so in its unit, and in the wrap
    // decision's size); fsdp-train freezes every other parameter, which block_train, root_train and
    // skip_dw then say. Each adapter keeps its own activations from its first forward (with or without
    // activation checkpointing), and its six GEMMs use the same kernels' scratch. 0: no adapters.
    int lora_rank;
    int lora_targets;     // bit i: the block's linear layer i has an adapter (skip_dw's numbering)
    int lora_dropout;     // --lora-dropout > 0: each adapter also keeps dropout(x) and its gradient, (N, in) each
    int lora_skip;        // with block_train: adapter weight-gradient GEMMs no block runs: bit i layer i's dA
                          // (its A frozen in every block), bit FSDP_PLAN_SKIP_DB + i its dB
} fsdp_plan_input;

typedef struct {
    double params, grads, optimizer;  // persistent per rank (bytes)
    double unsharded;                 // peak of gathered parameters and unsharded gradients
    double activations;               // peak of activation buffers
    double communication;             // reduce staging, bf16 send copies, the shared-memory collectives' window
    double workspace;                 // GEMM packing scratch (device/cpu/sgemm_avx512.c, gemm_bf16.c)
    double total;                     // sum of the above
    double bytes_sent;                // per optimizer step, per rank, all collectives of the engine
    // per optimizer step, by link class, for collectives that send each peer its share directly
    // (pairwise: a rank's bytes to the group's ranks on other hosts cross its host's NIC):
    double intra_host_bytes;          // rank 0's bytes to ranks on its own host
    double inter_host_bytes;          // host 0's bytes through its NIC (all its ranks' bytes to other hosts)
    double comm_seconds;              // lower bound: max over the link classes of bytes / bandwidth
    int hosts;                        // world / ranks_per_host (rounded up)
    int units;
    int64_t numel;                    // model parameters
    int64_t train_numel;              // of which trainable (numel without --freeze)
} fsdp_plan;

fsdp_plan fsdp_plan_compute(const fsdp_plan_input *in);
