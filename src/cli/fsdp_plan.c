// fsdp_plan.c: predicts a rank's peak memory by category and the bytes it sends per step, before
// anything runs (fsdp/plan.h has the model; tests hold it to measured runs).
//   fsdp-plan train FLAGS...    fsdp-train's flags (train_flags.c: the same names, defaults and help), the
//                               model (GPT-2 or Llama) resolved as fsdp-train resolves it (train_arch.c)
//   fsdp-plan minimal FLAGS...  fsdp-minimal's flags (minimal_flags.c)
// plus the planner's own: --world-size, --no-shared-memory, --ranks-per-host, --intra-host-gbps,
// --inter-host-gbps (--device is a tool flag). --freeze and --lora-rank build the model's parameter
// list (names and shapes, no data; with fsdp-train's adapters attached and the base frozen) to lay out
// each unit's trainable and frozen segments as fsdp_wrap will.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"
#include "cli/minimal_flags.h"
#include "cli/model_config.h"
#include "cli/plan_input.h"
#include "cli/train_arch.h"
#include "cli/train_flags.h"
#include "core/tunables.h"
#include "data/tokenizer.h"
#include "fsdp/plan.h"

#define PLAN_NFLAGS 5

// The planner's own flags, appended to the tool's table at args[n..n + PLAN_NFLAGS).
typedef struct {
    int world, no_shm, ranks_per_host;
    float intra_gbps, inter_gbps;
} plan_flags;

static int add_plan_flags(cli_arg *args, int n, plan_flags *pf) {
    args[n] = (cli_arg){"--world-size", ARG_INT, &pf->world, "fsdp-plan: the ranks the run starts (mpirun -np)", 1, 1e7, NULL};
    args[n + 1] = (cli_arg){"--no-shared-memory", ARG_BOOL, &pf->no_shm,
                            "fsdp-plan: every rank on its own host (no shared memory; as --ranks-per-host 1)", 1, 0, NULL};
    args[n + 2] = (cli_arg){"--ranks-per-host", ARG_INT, &pf->ranks_per_host,
                            "fsdp-plan: ranks on each host, rank r on host r / N (0: all on one host); shared memory "
                            "only inside a host, HYBRID_SHARD's default shard group is a host", 0, 1e7, NULL};
    args[n + 3] = (cli_arg){"--intra-host-gbps", ARG_FLOAT, &pf->intra_gbps,
                            "fsdp-plan: GB/s (1e9 bytes/s) one rank sends to ranks on its own host", 0.001, 1e6, NULL};
    args[n + 4] = (cli_arg){"--inter-host-gbps", ARG_FLOAT, &pf->inter_gbps,
                            "fsdp-plan: GB/s one host's NIC sends to other hosts (12.5: 100 Gb/s, 50: 400 Gb/s)",
                            0.001, 1e6, NULL};
    return n + PLAN_NFLAGS;
}

static int usage(FILE *out) {
    fprintf(out, "usage: fsdp-plan train FLAGS...    (fsdp-train's flags, plus --world-size N, --no-shared-memory,\n"
                 "                                    --ranks-per-host N, --intra-host-gbps X, --inter-host-gbps Y)\n"
                 "       fsdp-plan minimal FLAGS...  (fsdp-minimal's flags, plus the same)\n"
                 "Predicts per-rank memory and communication of the run those flags start; "
                 "`fsdp-plan train --help` lists them.\n");
    return out == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    fsdp_tunables_warn_unknown("fsdp-plan");  // a misspelt FSDP_* variable (the plan reads FSDP_COMM_ALGO)
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return usage(stdout);
    int train = !strcmp(argv[1], "train");
    if (!train && strcmp(argv[1], "minimal")) {
        fprintf(stderr, "fsdp-plan: %s: name the tool first: fsdp-plan train FLAGS (fsdp-train's) or fsdp-plan minimal "
                "FLAGS (fsdp-minimal's); the old --model gpt2|encoder form is gone\n", argv[1]);
        return 2;
    }
    // the subcommand's own argv: argv[1] ("train"/"minimal") takes the program's place
    int pargc = argc - 1;
    char **pargv = argv + 1;
    const char *prog = train ? "fsdp-plan train" : "fsdp-plan minimal";
    fsdp_plan_input in;
    memset(&in, 0, sizeof in);
    plan_flags pf = {1, 0, 0, 20.0f, 12.5f};
    int nargs = 0;
    train_options t;
    minimal_options m;
    cli_arg args[(TRAIN_FLAGS_MAX > MINIMAL_FLAGS_MAX ? TRAIN_FLAGS_MAX : MINIMAL_FLAGS_MAX) + PLAN_NFLAGS];
    nargs = train ? train_flags(&t, args) : minimal_flags(&m, args);
    nargs = add_plan_flags(args, nargs, &pf);
    int parsed = cli_parse(prog, train ? TRAIN_SUMMARY : MINIMAL_SUMMARY, args, nargs, pargc, pargv);
    if (parsed) return parsed > 0 ? 0 : 2;
    // the model: as fsdp-train resolves it (train_arch.c: --arch or what --init / --resume records, the
    // files' configuration, an --init file's shapes); the encoder stack's from a file's recorded one
    static const cli_config_field encoder_fields[] = {
        {"num_layers", "--layers"}, {"d_model", "--d-model"}, {"nhead", "--heads"}, {"dim_feedforward", "--ffn"}};
    cli_model_config mc = {prog, "transformer_encoder", encoder_fields, 4, args, nargs, pargc, pargv};
    cli_training_options *run = train ? &t.training : &m.training;
    if (train) {
        int resolved = train_arch_resolve(prog, &t, args, nargs, pargc, pargv);
        if (resolved) return 2;
    } else if (cli_config_from_inputs(&mc, run->init_path, &m.fsdp.ckpt)) {
        return 2;
    }
    const cli_fsdp_options *f = train ? &t.fsdp : &m.fsdp;
    fsdp_config cfg;
    if (pf.no_shm && pf.ranks_per_host > 1) {
        fprintf(stderr, "%s: --no-shared-memory is one rank per host: drop it or --ranks-per-host %d\n", prog,
                pf.ranks_per_host);
        return 2;
    }
    int world = pf.world, no_shm = pf.no_shm;
    if (cli_plan_fsdp(prog, f, no_shm, &in, &cfg)) return 2;
    if (cli_training_resolve_batch(prog, run, train ? &t.fsdp : &m.fsdp, args, nargs, pargc, pargv, world, 1)) return 2;
    if (train) {
        if (t.tokenizer_dir) {  // the model's vocabulary, as fsdp-train takes it from the tokenizer
            fsdp_tokenizer *tok = NULL;
            if (fsdp_tokenizer_open(t.tokenizer_dir, &tok) != FSDP_OK) {
                fprintf(stderr, "%s: --tokenizer: %s\n", prog, fsdp_last_error());
                return 2;
            }
            int n = fsdp_tokenizer_vocab(tok);
            fsdp_tokenizer_free(tok);
            if (!cli_given(args, nargs, pargc, pargv, "--vocab")) t.vocab = run->init_path && t.vocab > n ? t.vocab : n;
            if (t.vocab < n) {
                fprintf(stderr, "%s: --vocab %d is smaller than --tokenizer %s's %d token ids\n", prog, t.vocab,
                        t.tokenizer_dir, n);
                return 2;
            }
        }
    } else {
        m.config = mc;
    }
    if (run->no_sync) fprintf(stderr, "%s: note: --no-sync is not modelled (the prediction is the synced run's)\n", prog);
    cli_plan_ranks ranks = {world, no_shm, pf.ranks_per_host, pf.intra_gbps, pf.inter_gbps, 0};
    int64_t *block_train = NULL;  // (layers,) with --freeze or LoRA
    if (cli_plan_finish(prog, train ? &t : NULL, train ? NULL : &m, &ranks, 1, &in, &block_train)) return 2;
    const train_lora_options *lora = train && t.lora.rank > 0 ? &t.lora : NULL;  // fsdp-train's adapters, or none
    int per_host = in.ranks_per_host;
    fsdp_plan p = fsdp_plan_compute(&in);
    free(block_train);
    in.block_train = NULL;
    double mib = 1048576.0;
    char trainable[160] = "";
    if (p.train_numel < p.numel)
        snprintf(trainable, sizeof trainable, " (%lld trainable, %lld frozen)", (long long)p.train_numel,
                 (long long)(p.numel - p.train_numel));
    if (lora) {  // which adapters: fsdp-train's --lora-* as resolved
        size_t len = strlen(trainable);
        snprintf(trainable + len, sizeof trainable - len, ", LoRA rank %d on %s%s", t.lora.rank, t.lora.targets,
                 in.lora_dropout ? " with dropout" : "");
    }
    printf("fsdp-plan: %s, %lld parameters%s, %d rank(s) x %d thread(s), %s, %d units%s, batch %d per rank x %d "
           "micro-steps, param %s, reduce %s\n",
           in.llama ? "Llama" : in.gpt2 ? "GPT-2" : "encoder stack", (long long)p.numel, trainable, in.world, in.threads, fsdp_strategy_name(cfg.strategy), p.units,
           in.activation_checkpointing ? ", activation checkpointing" : "", in.batch, in.grad_accum,
           in.param_bf16 ? "bf16" : "fp32", in.det_limbs ? "exact (--deterministic)" : in.reduce_bf16 ? "bf16" : "fp32");
    printf("per-rank peak memory (MiB):\n");
    printf("  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n  %-28s %10.1f\n",
           "parameters (shards)", p.params / mib, "gradients (shards)", p.grads / mib, "optimizer (AdamW m, v)",
           p.optimizer / mib, "unsharded buffers (peak)", p.unsharded / mib, "activations (peak)", p.activations / mib,
           "communication buffers", p.communication / mib);
    printf("  %-28s %10.1f\n  %-28s %10.1f\n", "GEMM workspace", p.workspace / mib, "total", p.total / mib);
    printf("sent per optimizer step per rank: %.1f MiB\n", p.bytes_sent / mib);
    printf("hosts: %d x %d rank(s); per optimizer step:\n", p.hosts, per_host);
    printf("  %-36s %12.1f MiB  (%g GB/s: %.4f s)\n", "intra-host, sent by one rank", p.intra_host_bytes / mib,
           pf.intra_gbps, p.intra_host_bytes / (pf.intra_gbps * 1e9));
    printf("  %-36s %12.1f MiB  (%g GB/s: %.4f s)\n", "inter-host, sent by one host's NIC", p.inter_host_bytes / mib,
           pf.inter_gbps, p.inter_host_bytes / (pf.inter_gbps * 1e9));
    printf("communication time per step >= %.4f s: a lower bound, the busier link class at full bandwidth (bytes / "
           "bandwidth), with no latency, no congestion, and the link classes (and compute) overlapping perfectly; "
           "collectives modelled as pairwise (each rank sends each peer its share directly)\n",
           p.comm_seconds);
    printf("prediction: parameters %.0f gradients %.0f optimizer %.0f unsharded_peak %.0f activations_peak %.0f "
           "communication %.0f workspace %.0f total %.0f bytes_sent_per_step %.0f hosts %d ranks_per_host %d "
           "intra_host_bytes_per_step %.0f inter_host_bytes_per_step %.0f comm_seconds_lower_bound %.6f\n",
           p.params, p.grads, p.optimizer, p.unsharded, p.activations, p.communication, p.workspace, p.total,
           p.bytes_sent, p.hosts, per_host, p.intra_host_bytes, p.inter_host_bytes, p.comm_seconds);
    return 0;
}
