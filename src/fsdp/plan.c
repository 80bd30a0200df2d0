// plan.c: the memory and communication model of the engine (see plan.h). Every term mirrors an
// allocation the engine, the nn modules or the tools make; tests hold it to the measured numbers.
#include "fsdp/plan.h"

#include <string.h>

#include "fsdp/fsdp.h"

#define ALIGN 16  // FSDP_PAD_ALIGN

static int64_t round_up(int64_t x, int64_t q) { return (x + q - 1) / q * q; }
static double max2(double a, double b) { return a > b ? a : b; }

// The packing scratch of the GEMMs: the fp32 kernel's fixed panels (the device's capabilities: a B block
// and an A block per thread that runs a one-thread product, plus one shared B block for team products),
// or the bf16 kernel's, which grow to the largest packed operand (gemm_bf16.c: ceil32(columns of B) x
// ceil32(K) bf16 values, and A's rows packed 512 at a time: min(ceil32(rows), 512) x ceil32(K); fp32
// copies of both when emulated). Team products (outside parallel regions, and
// for the packed path at least 4 MFLOP) use one scratch; one-thread products use their thread's.
typedef struct {
    int64_t m, n, k;
    int in_parallel;  // attention's products, one (batch, head) per thread
} gemm_shape;

// The model's shape as the plan needs it, from the architecture's modules: the block's linear layers in
// the plan's numbering (plan.h), its parameters, the parameters outside the blocks, and the floats per
// row (of N = B x T) that a block, the Sequential's backward and the model keep.
typedef struct {
    int n_linear;                                                // the block's linear layers
    int64_t in[FSDP_PLAN_MAX_LINEAR], out[FSDP_PLAN_MAX_LINEAR];  // (n_linear,) each layer's widths
    int conv1d;           // weights stored (in, out) (GPT-2's Conv1D); else Linear's (out, in)
    int head;             // an LM head: logits (N, V) = x (N, C) W^T (GPT-2's tied wte, Llama's lm_head)
    int64_t hd;           // the attention's per-head width
    int64_t block, root;  // parameters of one block (without adapters), and outside the blocks
    int64_t block_rows;   // floats per row one block keeps for backward (fp32), besides attention's (B, H, T)
    int64_t b16_rows;     // of those, kept in bf16 under bf16 mixed precision in a block without adapters
    int64_t scratch_rows; // the block's backward scratch per row (nn_block_scratch_floats / N)
} model_shape;

// GPT-2 and the encoder stack: nn/transformer_block.c's blocks (QKV in one (3C, C) projection, biases
// everywhere, two LayerNorms); per row ln1_out, qkv (3), attention's output, r1, out and ln2_out
// (pre-LN) or r2 (post-LN): 8 C, f1 and act: 2 F, two norms' mean and rstd: 4 (out_proj's and fc2's
// outputs are not kept). bf16 keeps the FFN activation and, pre-LN (GPT-2), both norms' outputs in bf16
// (post-LN's first norm output is also a residual and stays fp32).
// Llama (nn/llama_block.c on the same buffers): per row the two RMSNorms' outputs and rstd, the q, k, v
// planes ((H + 2 KV) hd), the attention context (H hd), r1, gate, up and the SwiGLU output (3 F), out;
// bf16 keeps both norms' outputs and the SwiGLU output in bf16.
static model_shape shape_of(const fsdp_plan_input *in) {
    model_shape s;
    memset(&s, 0, sizeof s);
    int64_t C = in->d_model, V = in->vocab, maxT = in->max_seq ? in->max_seq : in->seq;
    if (in->llama) {
        int64_t H = in->heads, KV = in->kv_heads, hd = in->head_dim, F = in->ffn;
        int64_t io[7][2] = {{C, H * hd}, {C, KV * hd}, {C, KV * hd}, {H * hd, C}, {C, F}, {C, F}, {F, C}};
        int bias[7] = {in->qkv_bias, in->qkv_bias, in->qkv_bias, in->o_bias, in->mlp_bias, in->mlp_bias, in->mlp_bias};
        s.n_linear = 7;
        s.block = 2 * C;  // input_layernorm, post_attention_layernorm
        for (int i = 0; i < 7; i++) {
            s.in[i] = io[i][0], s.out[i] = io[i][1];
            s.block += io[i][0] * io[i][1] + (bias[i] ? io[i][1] : 0);
        }
        s.head = 1;
        s.hd = hd;
        s.root = V * C + C + (in->tie_embeddings ? 0 : V * C);  // embed_tokens, norm, lm_head
        s.block_rows = 4 * C + 2 + (H + 2 * KV) * hd + H * hd + 3 * F;
        s.b16_rows = F + 2 * C;
        s.scratch_rows = 3 * C + H * hd + (H + 2 * KV) * hd + F;
        return s;
    }
    int64_t F = in->gpt2 ? 4 * C : in->ffn;
    int64_t io[4][2] = {{C, 3 * C}, {C, C}, {C, F}, {F, C}};
    s.n_linear = 4;
    s.block = 4 * C;  // two LayerNorms' weights and biases
    for (int i = 0; i < 4; i++) {
        s.in[i] = io[i][0], s.out[i] = io[i][1];
        s.block += io[i][0] * io[i][1] + io[i][1];
    }
    s.conv1d = s.head = in->gpt2;
    s.hd = C / (in->heads > 0 ? in->heads : 1);
    s.root = in->gpt2 ? V * C + maxT * C + 2 * C : 0;  // wte, wpe, ln_f
    s.block_rows = 8 * C + 2 * F + 4;
    s.b16_rows = F + (in->gpt2 ? 2 * C : 0);
    s.scratch_rows = 7 * C + F;
    return s;
}

static double workspace_bytes(const fsdp_plan_input *in, const model_shape *s, int64_t C, int64_t V, int64_t N,
                              int64_t T) {
    const double fp32_b = in->gemm_pack_b_bytes, fp32_a = in->gemm_pack_a_bytes;
    int threads = in->threads > 0 ? in->threads : 1;
    double fp32 = (threads > 1 ? fp32_b : 0.0) + threads * (fp32_b + fp32_a);
    if (!in->param_bf16) return fp32;
    int64_t hd = s->hd;
    // weight-gradient products no layer runs: a weight frozen in every block (or the head's)
    int skip = in->block_train ? in->skip_dw : 0;
    // 3 products of each linear layer, 3 of the head, 2 of attention, 6 of each adapter
    gemm_shape g[9 * FSDP_PLAN_MAX_LINEAR + 5];
    int n = 0;
    for (int i = 0; i < s->n_linear; i++) {
        int64_t a = s->in[i], b = s->out[i];
        g[n++] = (gemm_shape){N, b, a, 0};                                          // forward
        g[n++] = (gemm_shape){N, a, b, 0};                                          // input gradient
        if (skip >> i & 1) continue;
        g[n++] = s->conv1d ? (gemm_shape){a, b, N, 0} : (gemm_shape){b, a, N, 0};  // weight gradient (Conv1D or Linear)
    }
    int64_t r = in->lora_rank;
    int lskip = in->block_train ? in->lora_skip : 0;
    for (int i = 0; i < s->n_linear && r > 0; i++) {  // the adapter's products (nn/lora.c), small ones included
        if (!(in->lora_targets >> i & 1)) continue;
        int64_t a = s->in[i], b = s->out[i];
        g[n++] = (gemm_shape){N, r, a, 0};                                              // u = x A^T
        g[n++] = (gemm_shape){N, b, r, 0};                                              // out += u B^T
        if (!(lskip >> (FSDP_PLAN_SKIP_DB + i) & 1)) g[n++] = (gemm_shape){b, r, N, 0};  // dB += dout^T u
        g[n++] = (gemm_shape){N, r, b, 0};                                              // du = dout B
        if (!(lskip >> i & 1)) g[n++] = (gemm_shape){r, a, N, 0};                        // dA += du^T x
        g[n++] = (gemm_shape){N, a, r, 0};                                              // dx (+)= du A
    }
    if (s->head) {  // the LM head (GPT-2's tied wte, Llama's lm_head or tied embed_tokens)
        g[n++] = (gemm_shape){N, V, C, 0};
        g[n++] = (gemm_shape){N, C, V, 0};
        if (!(skip & FSDP_PLAN_SKIP_HEAD)) g[n++] = (gemm_shape){V, C, N, 0};
    }
    g[n++] = (gemm_shape){T, T, hd, 1};
    g[n++] = (gemm_shape){T, hd, T, 1};
    double team_a = 0, team_b = 0, main_a = 0, main_b = 0, worker_a = 0, worker_b = 0;
    for (int i = 0; i < n; i++) {
        double a, b;
        if (in->bf16_emulated) {
            a = 4.0 * (double)g[i].m * (double)g[i].k;
            b = 4.0 * (double)g[i].n * (double)g[i].k;
        } else {
            a = 2.0 * (double)(g[i].m < 512 ? round_up(g[i].m, 32) : 512) * (double)round_up(g[i].k, 32);
            b = 2.0 * (double)round_up(g[i].n, 32) * (double)round_up(g[i].k, 32);
        }
        int small = !in->bf16_emulated && 2.0 * (double)g[i].m * (double)g[i].n * (double)g[i].k < 4e6;
        if (g[i].in_parallel) {
            worker_a = max2(worker_a, a), worker_b = max2(worker_b, b);
        } else if (threads > 1 && !small) {
            team_a = max2(team_a, a), team_b = max2(team_b, b);
        } else {
            main_a = max2(main_a, a), main_b = max2(main_b, b);
        }
    }
    double bf16 = team_a + team_b + max2(main_a, worker_a) + max2(main_b, worker_b) +
                  (threads - 1) * (worker_a + worker_b);
    return bf16 + (in->bf16_emulated ? fp32 : 0.0);
}

// Scratch of one point-to-point reduction over g ranks whose block (this rank's part) is `block`
// elements of esize bytes: 2 rounds in flight x (g - 1) messages of min(block, 1 MiB) (comm_p2p.c).
static double p2p_bytes(int64_t g, int64_t block, double esize) {
    double chunk = (double)(1 << 20) / esize;
    double m = (double)block < chunk ? (double)block : chunk;
    return 2.0 * (double)(g - 1) * m * esize;
}

fsdp_plan fsdp_plan_compute(const fsdp_plan_input *in) {
    fsdp_plan p;
    memset(&p, 0, sizeof p);
    model_shape shape = shape_of(in);
    int64_t C = in->d_model, L = in->layers, H = in->heads;
    int64_t V = in->vocab, T = in->seq, maxT = in->max_seq ? in->max_seq : in->seq;
    int64_t block = shape.block;
    int64_t lora_rows = 0;  // activation elements per row of N, all of one block's adapters
    for (int i = 0; i < shape.n_linear && in->lora_rank > 0; i++) {
        if (!(in->lora_targets >> i & 1)) continue;
        block += (int64_t)in->lora_rank * (shape.in[i] + shape.out[i]);  // A (R, in), B (out, R)
        lora_rows += 2 * (int64_t)in->lora_rank + (in->lora_dropout ? 2 * shape.in[i] : 0);  // u, du; xd, dx
    }
    int64_t root = shape.root;
    p.numel = L * block + root;
    int replicated = in->strategy == FSDP_NO_SHARD || in->strategy == FSDP_DDP;
    int world = in->world > 0 ? in->world : 1;
    int P = !in->shared_memory ? 1 : in->ranks_per_host > 0 && in->ranks_per_host < world ? in->ranks_per_host : world;
    p.hosts = (world + P - 1) / P;
    int G = replicated ? 1 : (in->strategy == FSDP_HYBRID_SHARD ? (in->shard_group > 0 ? in->shard_group : P) : world);
    if (G > world) G = world;
    // the wrap decision is on a block's whole size, frozen parameters included (wrap.c wrap_block)
    int wrapped = in->wrap == 0 || (in->wrap == 1 && block >= in->min_num_params);
    int64_t n_block_units = wrapped ? L : 0;
    int64_t q = (int64_t)G * ALIGN;
    // Each unit's flat parameter (wrap.c build_unit): the trainable segment, padded to q (its size,
    // grad_padded, is the unsharded gradient's; grad_padded / G the gradient shard's and the optimizer's),
    // then the frozen one, padded on its own; padded (both) / G is the parameter shard. Sums and maxima
    // over the block units; without frozen parameters grad_padded == padded.
    int64_t blocks_train = 0;                        // trainable elements of all blocks
    int64_t blocks_padded = 0, blocks_grad = 0;      // sums of padded, grad_padded
    int64_t max_block_padded = 0, max_block_grad = 0;
    int64_t max_segment = 0;                         // the largest segment of any unit (all-gathered alone)
    for (int64_t b = 0; b < L; b++) {
        int64_t t = in->block_train ? in->block_train[b] : block;
        blocks_train += t;
        if (!wrapped) continue;
        int64_t gp = round_up(t, q), fp = round_up(block - t, q);
        blocks_padded += gp + fp;
        blocks_grad += gp;
        if (gp + fp > max_block_padded) max_block_padded = gp + fp;
        if (gp > max_block_grad) max_block_grad = gp;
        if (gp > max_segment) max_segment = gp;
        if (fp > max_segment) max_segment = fp;
    }
    // the root unit: the parameters outside the blocks, and the blocks when they are not wrapped
    int64_t root_numel = root + (wrapped ? 0 : L * block);
    int64_t root_t = (in->block_train ? in->root_train : root) + (wrapped ? 0 : blocks_train);
    int64_t root_grad = round_up(root_t, q), root_padded = root_grad + round_up(root_numel - root_t, q);
    if (root_grad > max_segment) max_segment = root_grad;
    if (root_padded - root_grad > max_segment) max_segment = root_padded - root_grad;
    p.train_numel = blocks_train + (in->block_train ? in->root_train : root);
    int64_t local = blocks_padded / G + root_padded / G;  // parameter shard elements
    int64_t grad_local = blocks_grad / G + root_grad / G;  // of which trainable: gradient and optimizer elements
    p.units = (int)n_block_units + (root_numel > 0);
    p.params = 4.0 * local;
    p.grads = 4.0 * grad_local;
    p.optimizer = 8.0 * grad_local;
    int64_t max_unit = max_block_grad > root_grad ? max_block_grad : root_grad;  // the largest unsharded gradient
    int64_t max_shard = max_unit / G;  // the largest gradient shard (the reduce buffer's size)
    p.communication = 4.0 * (max_shard ? max_shard : 1);
    int K = in->det_limbs;  // deterministic.c: digit accumulators, and the digits sent and received
    if (K > 0) p.grads += 4.0 * K * grad_local;
    // which groups use shared memory: those whose ranks all lie on one host (comm_shm_setup), for
    // rank 0: its shard group [0, G) and its replica group {0, G, 2G, ..} (HYBRID_SHARD), or the world
    int shm_world = in->shared_memory && p.hosts == 1;
    int shm_shard = in->shared_memory && G > 1 && G <= P;
    int zero_copy = shm_shard && in->zero_copy;
    int shared_shards = !replicated && zero_copy && G > 1;  // a one-rank shard group has no shared memory
    if (in->param_bf16 && shared_shards) p.communication += 2.0 * local;  // each unit's bf16 send copy
    // Collectives whose operands are not in shared memory go through the group's window (comm_shm.c):
    // two halves of the largest message, 64-byte rounded; across nodes a bf16 reduction gathers
    // every rank's payload into one scratch (comm.c) instead. ge: bytes per gradient element.
    double ge = K > 0 ? 4.0 * K : in->reduce_bf16 ? 2.0 : 4.0;
    if (K > 0) p.communication += 4.0 * K * (double)((max_unit ? max_unit : 1) + (max_shard ? max_shard : 1));
    int R = replicated ? 1 : world / G;
    // a shard group spanning hosts with m > 1 of its ranks on each reduce-scatters and all-gathers
    // hierarchically: hier_m = m
    int hier_m = !replicated && in->shared_memory && !in->flat_reduce_scatter && G > P && P > 1 && G % P == 0 ? P : 0;
    int shm_replica = in->shared_memory && R > 1 && p.hosts == 1;
    // Without shared memory, reduce-scatters (and bf16 all-reduces) run point to point (comm_p2p.c): a
    // scratch of 2 rounds x (g - 1) peers x one message of min(block, 1 MiB), kept by each group for its
    // next reduction (so a shard group's and a replica group's add up);
    // fp32 all-reduces go through MPI_Allreduce (no scratch of ours).
    double window = 0.0, p2p_scratch = 0.0;
    if (replicated && world > 1) {  // each unit's gradients, all-reduced over the world
        if (shm_world) window += 2.0 * round_up((int64_t)(ge * max_unit), 64);
        else if (in->reduce_bf16) p2p_scratch = max2(p2p_scratch, p2p_bytes(world, (max_unit + world - 1) / world, ge));
    }
    if (!replicated && G > 1 && zero_copy && K > 0) {  // deterministic: every unit's digits through the window
        window += 2.0 * round_up((int64_t)(ge * max_unit), 64);
    } else if (!replicated && G > 1 && zero_copy) {  // reduce-scatters: block units' gradients are staged in shared memory, the root's are not
        if (root_grad) window += 2.0 * round_up((int64_t)(ge * root_grad), 64);
    } else if (!replicated && G > 1 && shm_shard) {  // every unit's reduce-scatter and all-gather goes through the window
        double pe = in->param_bf16 ? 2.0 : 4.0;
        window += max2(2.0 * round_up((int64_t)(ge * max_unit), 64), 2.0 * round_up((int64_t)(pe * (max_segment / G)), 64));
    } else if (!replicated && G > 1 && hier_m) {  // hierarchical reduce-scatters (comm_hier.c): the host's
        // window holds two halves of one host segment (m blocks), the kept partial sums (hosts, block), and the
        // group across hosts keeps its point-to-point scratch; the all-gathers need no buffer of their own
        window += 2.0 * round_up((int64_t)(ge * (double)(hier_m * max_shard)), 64);
        p2p_scratch = max2(p2p_scratch, ge * (double)(G / hier_m) * (double)max_shard +
                                            p2p_bytes(G / hier_m, max_shard, ge));
    } else if (!replicated && G > 1) {  // plain MPI: the point-to-point reduce-scatter's scratch
        p2p_scratch = max2(p2p_scratch, p2p_bytes(G, max_shard, ge));
    }
    if (!replicated && R > 1) {  // HYBRID_SHARD: each unit's reduced shard, all-reduced over the replicas
        if (shm_replica) window += 2.0 * round_up((int64_t)(ge * max_shard), 64);
        else if (in->reduce_bf16) p2p_scratch += p2p_bytes(R, (max_shard + R - 1) / R, ge);  // its own group's, kept too
    }
    p.communication += window + p2p_scratch;

    // gathered parameters and unsharded gradients at their peak (backward)
    double unit_bytes = 4.0 * (double)max_block_padded;  // a gathered block unit (both segments)
    double root_bytes = 4.0 * (double)root_padded;
    double unit_grad_bytes = 4.0 * (double)max_block_grad, root_grad_bytes = 4.0 * (double)root_grad;
    // two alternating gradient buffers: shared staging, or the deterministic mode's own (none when every
    // block is frozen)
    int staging = (!replicated && zero_copy && G > 1 && max_block_grad > 0) || (K > 0 && max_block_grad > 0);
    double grads_unsharded = staging ? 2 * unit_grad_bytes : unit_grad_bytes;  // two shared buffers, or one private
    if (replicated) {  // parameters are the shards; one unit's gradients at a time, the root's throughout
        p.unsharded = grads_unsharded + root_grad_bytes;
        // param_dtype bf16: a bf16 copy of every unit, kept from forward to backward
        if (in->param_bf16) p.unsharded += 0.5 * (n_block_units * unit_bytes + root_bytes);
    } else {
        int prefetch = (in->backward_prefetch != 2 || in->forward_prefetch) && in->limit_all_gathers != 1;
        double params_gathered = in->strategy == FSDP_SHARD_GRAD_OP ? n_block_units * unit_bytes
                                                                    : (prefetch ? 2 : 1) * unit_bytes;
        double param_scale = in->param_bf16 ? 0.5 : 1.0;  // gathered parameters in param_dtype
        p.unsharded = param_scale * (root_bytes + params_gathered) + root_grad_bytes + grads_unsharded;
    }

    // activations (fp32): each block's buffers (nn/transformer_block.c ensure_buffers; shape_of says
    // what they hold), the Sequential's backward buffers (nn/sequential.c) and the model's own
    // (nn/gpt2.c, nn/llama.c), or the tool's input (fsdp-minimal)
    int64_t B = in->batch, N = B * T;
    double per_block = 4.0 * (double)(N * shape.block_rows + B * H * T);  // attention: (B, H, T) row stats
    // bf16 mixed precision keeps the activations that only feed matrix products in bf16 (blocks without
    // adapters, nn/transformer_block.c block_b16)
    if (in->param_bf16 && in->lora_rank <= 0) per_block -= 2.0 * (double)(N * shape.b16_rows);
    double blocks = in->activation_checkpointing ? per_block + 4.0 * (double)(N * C) * (double)(L - 1)
                                                 : per_block * (double)L;
    double sequential = 4.0 * (double)(2 * N * C + N * shape.scratch_rows);  // two (N, C) gradients, the scratch
    // GPT-2: emb, lnf_out, dx, demb (N, C), logits (N, V), lnf mean and rstd, losses, ce_stats (2), idx and
    // targets; Llama the same with one norm statistic, and its rotary tables' cos and sin (max_seq, hd/2)
    double model = in->gpt2    ? 4.0 * (double)(N * (4 * C + V + 5) + 2 * N)
                   : in->llama ? 4.0 * (double)(N * (4 * C + V + 4) + 2 * N + maxT * shape.hd)
                               : 4.0 * (double)(N * C * (in->grad_accum + 1));
    // the adapters' u, du (N, R) and with dropout xd, dx (N, in), kept per adapter in every block
    // (nn/lora.c ensure_buffers), recomputation or not
    double adapters = 4.0 * (double)(N * lora_rows) * (double)L;
    p.activations = blocks + sequential + model + adapters;
    p.workspace = workspace_bytes(in, &shape, C, V, N, T);
    p.total = p.params + p.grads + p.optimizer + p.unsharded + p.activations + p.communication + p.workspace;

    // bytes each rank sends per optimizer step (as fsdp_comm_stats counts them)
    double frac = G > 1 ? (double)(G - 1) / G : 0.0;
    int gathers = in->strategy == FSDP_SHARD_GRAD_OP ? 1 : 2;
    double pe = in->param_bf16 ? 2.0 : 4.0;  // bytes per element on the wire
    // all-gathers move both segments (padded elements), reductions the trainable one (grad_padded)
    double gathered_n = (double)blocks_padded * gathers + (double)root_padded;
    double reduced_n = (double)blocks_grad + (double)root_grad;
    double shard_bytes, replica_bytes = 0.0;
    double hier_inter = 0.0;  // hierarchical: the shard group's bytes to other hosts  // rank 0's bytes per step in its shard group (or the world), replica group
    if (replicated) {
        // every all-reduce sends 2 (n - 1) / n of the buffer: shared memory, MPI_Allreduce (fp32), and the
        // point-to-point reduce-scatter + all-gather that bf16 takes without shared memory (comm_p2p.c)
        double ar = world <= 1 ? 0.0 : 2.0 * (world - 1) / world;
        shard_bytes = ar * ge * reduced_n * in->grad_accum;
        G = world;  // the group the all-reduces run over
    } else {
        double gathered = gathered_n, reduced = reduced_n;
        double ag = frac * pe * gathered, rs = frac * ge * reduced;
        if (hier_m) {  // per block: hosts blocks to each other local rank, one to each other host (comm_hier.c)
            double hosts_g = (double)(G / hier_m), blocks_g = (hier_m - 1) * hosts_g + hosts_g - 1;
            hier_inter = (hosts_g - 1) / G * (ge * reduced + pe * gathered) * in->grad_accum;
            rs = blocks_g / G * ge * reduced;
            ag = blocks_g / G * pe * gathered;
        }
        double rf = 2.0 * (R - 1) / R;  // as the all-reduce above
        double replica = R > 1 ? rf * ge * reduced_n / G : 0.0;
        shard_bytes = (ag + rs) * in->grad_accum;
        replica_bytes = replica * in->grad_accum;
    }
    p.bytes_sent = shard_bytes + replica_bytes;

    // By link class. Every collective is modelled as pairwise: each rank sends every peer of the group
    // the same share (all-gather, reduce-scatter, bf16 all-to-all; an all-reduce as a reduce-scatter then
    // an all-gather), so of a rank's bytes in a group of g ranks, (g - m) / (g - 1) go to other hosts,
    // m the group's ranks on its own host. Host 0 holds ranks [0, P); rank r's shard group is
    // [r/G*G, r/G*G + G), its replica group {r % G + k G}. A hierarchical shard group (hier_m) sends
    // exactly hier_inter to other hosts.
    double inter = 0.0, rank0_cross = 0.0;
    int64_t host_ranks = P < world ? P : world;
    for (int64_t r = 0; r < host_ranks; r++) {
        double cross = 0.0;
        if (G > 1) {
            int64_t lo = r / G * G, hi = lo + G;  // shard group [lo, hi) on host 0 = [0, P)
            int64_t m = (hi < P ? hi : P) - lo;
            cross += hier_m ? hier_inter : shard_bytes * (double)(G - m) / (double)(G - 1);
        }
        if (R > 1) {
            int64_t j = r % G, m = (P - j + G - 1) / G;  // replicas j, j + G, .. below P
            if (m > R) m = R;
            cross += replica_bytes * (double)(R - m) / (double)(R - 1);
        }
        if (r == 0) rank0_cross = cross;
        inter += cross;
    }
    p.inter_host_bytes = inter;
    p.intra_host_bytes = p.bytes_sent - rank0_cross;
    double intra_bw = (in->intra_host_gbps > 0 ? in->intra_host_gbps : 20.0) * 1e9;
    double inter_bw = (in->inter_host_gbps > 0 ? in->inter_host_gbps : 12.5) * 1e9;
    p.comm_seconds = max2(p.intra_host_bytes / intra_bw, p.inter_host_bytes / inter_bw);
    return p;
}
