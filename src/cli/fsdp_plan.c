// fsdp_plan.c: predicts a rank's peak memory by category and the bytes it sends per step, before
// anything runs (fsdp/plan.h has the model; tests hold it to measured runs).
#include <stdio.h>
#include <string.h>

#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"
#include "fsdp/plan.h"
#include "kernels/kernels.h"

int main(int argc, char **argv) {
    fsdp_plan_input in;
    memset(&in, 0, sizeof in);
    int model = 0, no_shm = 0;
    in.layers = 6, in.d_model = 512, in.heads = 8, in.ffn = 2048, in.vocab = 256, in.seq = 256, in.batch = 8;
    in.grad_accum = 1, in.world = 2, in.threads = 1;
    cli_fsdp_options f;
    cli_fsdp_defaults(&f);
    cli_arg args[] = {
        {"--model", ARG_CHOICE, &model, "gpt2 (fsdp-train) or encoder (fsdp-minimal's TransformerEncoderLayer stack)", 1, 0, "gpt2|encoder"},
        {"--layers", ARG_INT, &in.layers, "blocks", 1, 1e6, NULL},
        {"--d-model", ARG_INT, &in.d_model, "width", 1, 1e7, NULL},
        {"--heads", ARG_INT, &in.heads, "attention heads", 1, 1e6, NULL},
        {"--ffn", ARG_INT, &in.ffn, "encoder dim_feedforward (GPT-2: 4 x d_model)", 1, 1e8, NULL},
        {"--vocab", ARG_INT, &in.vocab, "GPT-2 vocabulary", 1, 1e8, NULL},
        {"--seq", ARG_INT, &in.seq, "sequence length", 1, 1e7, NULL},
        {"--max-seq", ARG_INT, &in.max_seq, "GPT-2 positions (0: --seq)", 0, 1e7, NULL},
        {"--batch", ARG_INT, &in.batch, "sequences per rank per micro-step", 1, 1e7, NULL},
        {"--grad-accum", ARG_INT, &in.grad_accum, "micro-steps per optimizer step", 1, 1e6, NULL},
        {"--world-size", ARG_INT, &in.world, "ranks", 1, 1e7, NULL},
        {"--threads", ARG_INT, &in.threads, "OpenMP threads per rank (fsdp-train --threads)", 1, 4096, NULL},
        {"--strategy", ARG_CHOICE, &f.strategy, "FSDP sharding strategy", 1, 0, "full_shard|shard_grad_op|no_shard|hybrid_shard|ddp"},
        {"--wrap", ARG_STRING, &f.wrap, "auto-wrap policy: transformer, size:N or none", 1, 0, NULL},
        {"--shard-group-size", ARG_INT, &f.shard_group_size, "hybrid_shard group (0: the world, one node)", 0, 1e7, NULL},
        {"--backward-prefetch", ARG_CHOICE, &f.backward_prefetch, "backward prefetch", 1, 0, "pre|post|none"},
        {"--forward-prefetch", ARG_BOOL, &f.forward_prefetch, "forward prefetch", 1, 0, NULL},
        {"--limit-all-gathers", ARG_INT, &f.limit_all_gathers, "units unsharded at once (0: no limit)", 0, 1e6, NULL},
        {"--activation-checkpointing", ARG_BOOL, &f.activation_checkpointing, "activation checkpointing", 1, 0, NULL},
        {"--mixed-precision", ARG_CHOICE, &f.mixed_precision, "param_dtype", 1, 0, "fp32|bf16"},
        {"--reduce-dtype", ARG_CHOICE, &f.reduce_dtype, "reduce_dtype (param: follow --mixed-precision)", 1, 0, "param|fp32|bf16"},
        {"--no-shared-memory", ARG_BOOL, &no_shm, "ranks on different nodes (no shared gradient staging)", 1, 0, NULL},
        {"--device", ARG_STRING, &f.device, "the run's --device: cpu, or guard (state in device memory: no zero-copy shared shards or gradient staging)", 1, 0, NULL},
    };
    int parsed = cli_parse("fsdp-plan", "Predicts per-rank memory and communication of an fsdp.c run.", args,
                           (int)(sizeof args / sizeof args[0]), argc, argv);
    if (parsed) return parsed > 0 ? 0 : 2;
    fsdp_config cfg;
    if (cli_fsdp_config("fsdp-plan", &f, &cfg)) return 2;
    in.gpt2 = model == 0;
    in.strategy = cfg.strategy;
    in.shard_group = cfg.shard_group_size;
    in.wrap = cfg.wrap == FSDP_WRAP_TRANSFORMER ? 0 : cfg.wrap == FSDP_WRAP_SIZE ? 1 : 2;
    in.min_num_params = cfg.min_num_params;
    in.backward_prefetch = f.backward_prefetch;
    in.forward_prefetch = f.forward_prefetch;
    in.limit_all_gathers = f.limit_all_gathers;
    in.activation_checkpointing = f.activation_checkpointing;
    in.shared_memory = !no_shm;
    in.zero_copy = fsdp_dev_host_addressable(cfg.device);
    in.param_bf16 = cfg.param_dtype == FSDP_BF16;
    in.reduce_bf16 = cfg.reduce_dtype == FSDP_BF16;
    in.bf16_emulated = strcmp(cpu_gemm_bf16_name(), "emulate") == 0;  // this machine's bf16 GEMM
    if (in.strategy == FSDP_HYBRID_SHARD && in.shard_group > 0 && in.world % in.shard_group) {
        fprintf(stderr, "fsdp-plan: --shard-group-size %d must divide --world-size %d\n", in.shard_group, in.world);
        return 2;
    }
    fsdp_plan p = fsdp_plan_compute(&in);
    double mib = 1048576.0;
    printf("fsdp-plan: %s, %lld parameters, %d rank(s), %s, %d units%s, param %s, reduce %s\n",
           in.gpt2 ? "GPT-2" : "encoder stack", (long long)p.numel, in.world, fsdp_strategy_name(cfg.strategy), p.units,
           in.activation_checkpointing ? ", activation checkpointing" : "", in.param_bf16 ? "bf16" : "fp32",
           in.reduce_bf16 ? "bf16" : "fp32");
    printf("per-rank peak memory (MiB):\n");
    printf("  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n",
           "parameters (shards)", p.params / mib, "gradients (shards)", p.grads / mib, "optimizer (AdamW m, v)",
           p.optimizer / mib, "unsharded buffers (peak)", p.unsharded / mib, "activations (peak)", p.activations / mib,
           "communication buffers", p.communication / mib);
    printf("  %-28s %10.1f\n  %-28s %10.1f\n", "GEMM workspace", p.workspace / mib, "total", p.total / mib);
    printf("sent per optimizer step per rank: %.1f MiB\n", p.bytes_sent / mib);
    printf("prediction: parameters %.0f gradients %.0f optimizer %.0f unsharded_peak %.0f activations_peak %.0f "
           "communication %.0f workspace %.0f total %.0f bytes_sent_per_step %.0f\n",
           p.params, p.grads, p.optimizer, p.unsharded, p.activations, p.communication, p.workspace, p.total,
           p.bytes_sent);
    return 0;
}
