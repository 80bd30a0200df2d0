// training_flags.c: the training flags fsdp-train and fsdp-minimal share (training_flags.h).
#include "cli/training_flags.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_threads.h"  // CLI_THREADS_MAX
#include "core/status.h"

void cli_training_flags(cli_training_options *t, cli_arg *table) {
    fsdp_muon_config md = fsdp_muon_defaults();
    t->optimizer = FSDP_OPTIM_ADAMW;
    t->muon_lr = md.lr, t->muon_momentum = md.momentum, t->muon_nesterov = md.nesterov;
    t->muon_ns_steps = md.ns_steps, t->muon_weight_decay = md.weight_decay, t->muon_ns_dtype = 0;
    const cli_arg shared[CLI_TRAINING_NFLAGS] = {
        {"--batch", ARG_INT, &t->batch, "per-rank micro-batch (sequences); a step sees world x --grad-accum x --batch", 1, 1e6, NULL},
        {"--global-batch", ARG_INT, &t->global_batch, "sequences per optimizer step over all ranks: sets --batch to N / (world x --grad-accum), which must divide it; not with --batch (0: use --batch)", 0, 1e9, NULL},
        {"--grad-accum", ARG_INT, &t->grad_accum, "micro-steps per optimizer step", 1, 1e6, NULL},
        {"--no-sync", ARG_BOOL, &t->no_sync, "accumulate unsharded gradients locally and reduce once per step (no_sync on all but the last micro-step)", 1, 0, NULL},
        {"--steps", ARG_INT, &t->steps, "optimizer steps in total (a --resume continues up to it)", 0, 1e9, NULL},
        {"--lr", ARG_FLOAT, &t->lr, "AdamW learning rate (the peak, under a warmup/decay schedule)", 0, 1e3, NULL},
        {"--weight-decay", ARG_FLOAT, &t->weight_decay, "AdamW weight decay", 0, 1e3, NULL},
        {"--clip-grad-norm", ARG_FLOAT, &t->clip, "clip gradients to this global L2 norm (0: off); the log shows the norm", 0, 1e9, NULL},
        {"--seed", ARG_INT, &t->seed, "seed for init, dropout and the random draws (a generated input, sampling)", 0, 2147483647, NULL},
        {"--init", ARG_STRING, &t->init_path, "initial weights: a safetensors file (PyTorch names, Hugging Face's for GPT-2) or a Hugging Face model directory (config.json with model.safetensors, or the shards of model.safetensors.index.json); the model's sizes are read from it", 1, 0, NULL},
        {"--save", ARG_STRING, &t->save_path, "write the weights here after the last step (rank 0, which prints what it wrote); fsdp-train: a path not ending in .safetensors is a Hugging Face model directory (config.json + model.safetensors, or shards + index: --save-shard-size, --save-dtype)", 1, 0, NULL},
        {"--dump-grads", ARG_STRING, &t->dump_grads_path, "write the first step's full parameter gradients (after clipping) here", 1, 0, NULL},
        {"--threads", ARG_INT, &t->threads, "OpenMP threads per rank (0: OMP_NUM_THREADS, else the affinity cores / ranks sharing them)", 0, CLI_THREADS_MAX, NULL},
        {"--no-memory-check", ARG_BOOL, &t->no_memory_check, "skip the check, made before anything is built, that fsdp-plan's per-rank memory prediction for this run times the ranks on this host fits in what the host has available (MemAvailable, or a lower cgroup limit); a run predicted not to fit is otherwise refused with the numbers (exit 2). Not made with --device cuda, --offload-dir or fsdp-train's --eval-only", 1, 0, NULL},
        {"--optimizer", ARG_CHOICE, &t->optimizer, "adamw: AdamW on every parameter; muon: Muon (Keller Jordan's muon.py) on every 2-D weight of the transformer blocks, each orthogonalized once per step by one owner rank, AdamW (--lr, --weight-decay) on the rest (docs/muon.md)", 1, 0, "adamw|muon"},
        {"--muon-lr", ARG_FLOAT, &t->muon_lr, "Muon's learning rate (the peak: it follows the --lr schedule's factor)", 0, 1e3, NULL},
        {"--muon-momentum", ARG_FLOAT, &t->muon_momentum, "Muon's momentum beta: m = lerp(m, g, 1 - beta)", 0, 0.999999, NULL},
        {"--muon-nesterov", ARG_BOOL, &t->muon_nesterov, "Muon's Nesterov update u = lerp(g, m, beta) (default on; --no-muon-nesterov: u = m)", 1, 0, NULL},
        {"--muon-ns-steps", ARG_INT, &t->muon_ns_steps, "Muon's quintic Newton-Schulz steps", 0, 100, NULL},
        {"--muon-weight-decay", ARG_FLOAT, &t->muon_weight_decay, "Muon's decoupled weight decay: p *= 1 - muon_lr x wd", 0, 1e3, NULL},
        {"--muon-ns-dtype", ARG_CHOICE, &t->muon_ns_dtype, "Muon's Newton-Schulz precision: fp32 (bf16, the reference's faster choice, is not implemented yet: an error)", 1, 0, "fp32|bf16"},
        {"--config", ARG_STRING, &t->config_path, "read flags from this file, one 'flag value' a line (# comments); the command line overrides it", 1, 0, NULL},
    };
    memcpy(table, shared, sizeof shared);
}

int cli_training_add_optimizer_flags(const cli_arg *table, cli_arg *args, int n) {
    static const char *const names[CLI_OPTIMIZER_NFLAGS] = {"--optimizer", "--muon-lr", "--muon-momentum",
        "--muon-nesterov", "--muon-ns-steps", "--muon-weight-decay", "--muon-ns-dtype"};
    for (int i = 0; i < CLI_OPTIMIZER_NFLAGS; i++) args[n++] = cli_training_flag(table, names[i]);
    return n;
}

void cli_training_muon_summary(fsdp_state *fs, int summary, int rank, double run_steps) {
    fsdp_muon_stats ms = fsdp_muon_get_stats(fs);
    if (!summary || ms.matrices == 0) return;
    printf("muon rank %d: matrices %d owned %d ns_calls %ld ns_flops %.0f momentum_floats %lld "
           "exchange_bytes_per_step %.0f\n", rank, ms.matrices, ms.owned, ms.ns_calls, ms.ns_flops,
           (long long)ms.momentum_numel, ms.exchange_bytes / run_steps);
    fflush(stdout);
}

cli_arg cli_training_flag(const cli_arg *table, const char *name) {
    for (int i = 0; i < CLI_TRAINING_NFLAGS; i++)
        if (strcmp(table[i].name, name) == 0) return table[i];
    FSDP_ASSERT(!"cli_training_flag: not a shared training flag");
    return table[0];
}

int cli_training_resolve_batch(const char *prog, cli_training_options *t, cli_fsdp_options *f, const cli_arg *args,
                               int nargs, int argc, char **argv, int world, int print) {
    int given_batch = cli_given(args, nargs, argc, argv, "--batch");
    if (f->deterministic)
        return cli_det_resolve(prog, print, f, given_batch, cli_given(args, nargs, argc, argv, "--grad-accum"),
                               t->no_sync, &t->batch, &t->global_batch, &t->grad_accum, world);
    return cli_batch_resolve(prog, print, given_batch, &t->batch, &t->global_batch, t->grad_accum, world);
}

int cli_training_optimizer(const char *prog, const cli_training_options *t, const cli_fsdp_options *f,
                           const cli_arg *args, int nargs, int argc, char **argv, int rank, fsdp_optimizer_config *out) {
    static const char *const muon_flags[] = {"--muon-lr", "--muon-momentum", "--muon-nesterov", "--muon-ns-steps",
                                             "--muon-weight-decay", "--muon-ns-dtype"};
    static const char *const strategy_flag[] = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "ddp"};
    int muon = t->optimizer == FSDP_OPTIM_MUON;
    char line[240] = "";
    for (size_t i = 0; !muon && i < sizeof muon_flags / sizeof *muon_flags; i++)
        if (cli_given(args, nargs, argc, argv, muon_flags[i]))
            snprintf(line, sizeof line, "%s applies only to --optimizer muon (got --optimizer adamw)", muon_flags[i]);
    if (!muon && !line[0] && !t->muon_nesterov)  // the --no- form, which cli_given does not see
        snprintf(line, sizeof line, "--no-muon-nesterov applies only to --optimizer muon (got --optimizer adamw)");
    const char *with = !muon                     ? NULL
                       : t->muon_ns_dtype == 1   ? "--muon-ns-dtype bf16"
                       : f->deterministic        ? "--deterministic"
                       : f->cpu_offload          ? "--cpu-offload"
                       : f->offload_dir          ? "--offload-dir"
                       : f->ckpt.dir             ? "--ckpt-dir (Muon's momentum is not checkpointed yet)"
                       : f->ckpt.resume          ? "--resume (Muon's momentum is not checkpointed yet)"
                                                 : NULL;
    if (!line[0] && with) snprintf(line, sizeof line, "--optimizer muon is not implemented yet with %s", with);
    if (!line[0] && muon && (f->strategy == FSDP_NO_SHARD || f->strategy == FSDP_DDP))
        snprintf(line, sizeof line, "--optimizer muon is not implemented yet with --strategy %s (expected full_shard, "
                 "shard_grad_op or hybrid_shard)", strategy_flag[f->strategy]);
    if (line[0]) {
        if (rank == 0) fprintf(stderr, "%s: %s\n", prog, line);
        return -1;
    }
    fsdp_adamw_config ac = fsdp_adamw_defaults();
    ac.lr = t->lr;
    ac.weight_decay = t->weight_decay;
    *out = fsdp_optimizer_adamw(ac);
    out->kind = muon ? FSDP_OPTIM_MUON : FSDP_OPTIM_ADAMW;
    out->muon.lr = t->muon_lr;
    out->muon.momentum = t->muon_momentum;
    out->muon.nesterov = t->muon_nesterov;
    out->muon.ns_steps = t->muon_ns_steps;
    out->muon.weight_decay = t->muon_weight_decay;
    return 0;
}
