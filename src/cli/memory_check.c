// memory_check.c: the up-front memory check of fsdp-train and fsdp-minimal (memory_check.h). The
// prediction is fsdp-plan's own (plan_input.c, fsdp_plan_compute), for this run's ranks and threads;
// each host's first rank reads what the host can give, and the verdict is reduced over the world so
// that every rank goes on, or every rank stops, together.
#include "cli/memory_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_input.h"
#include "core/mem_available.h"

#define MIB 1048576.0

static const char *const sources[] = {"", "MemAvailable", "cgroup memory.max", "cgroup memory.limit_in_bytes",
                                      "FSDP_TEST_MEM_AVAILABLE"};
#define N_SOURCES (int)(sizeof sources / sizeof *sources)

static int source_index(const char *s) {
    for (int i = 1; i < N_SOURCES; i++)
        if (strcmp(s, sources[i]) == 0) return i;
    return 0;
}

// bytes as MiB with one decimal and thousands separators ("11,234,567.0") into buf (cap bytes); returns buf
static const char *mib(double bytes, char *buf, size_t cap) {
    long long tenths = (long long)(bytes / MIB * 10.0 + 0.5), whole = tenths / 10;
    char digits[32], grouped[48];
    int n = snprintf(digits, sizeof digits, "%lld", whole), k = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0) grouped[k++] = ',';
        grouped[k++] = digits[i];
    }
    grouped[k] = 0;
    snprintf(buf, cap, "%s.%lld", grouped, tenths % 10);
    return buf;
}

// What would make the run fit, given what it already uses: "shard across more ranks or hosts, use
// --activation-checkpointing, a smaller --batch, or --mixed-precision bf16" (buf: cap bytes).
static const char *remedies(const fsdp_plan_input *in, char *buf, size_t cap) {
    const char *items[4];
    int n = 0;
    int replicated = in->strategy == FSDP_NO_SHARD || in->strategy == FSDP_DDP;
    items[n++] = replicated ? "shard (--strategy full_shard) across more ranks or hosts" : "shard across more ranks or hosts";
    if (!in->activation_checkpointing) items[n++] = "--activation-checkpointing";
    if (in->batch > 1) items[n++] = "a smaller --batch";
    if (!in->param_bf16) items[n++] = "--mixed-precision bf16";
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s%s", i == 0 ? "" : i == n - 1 ? (n > 2 ? ", or " : " or ") : ", ",
                                i == 1 ? "use " : "", items[i]);
    return buf;
}

// Rank 0's one line: the first refusing rank's host (rec: its {refuses, available bytes, ranks on its
// host, source}), rank r of the world.
static void say_refused(const char *prog, const fsdp_plan *p, const fsdp_plan_input *in, const double *rec, int r) {
    char b[10][64], fix[200];
    int on_host = (int)(rec[2] + 0.5), src = (int)(rec[3] + 0.5);
    char where[48];
    if (r == 0) snprintf(where, sizeof where, "this host");
    else snprintf(where, sizeof where, "the host of rank %d", r);
    fprintf(stderr,
            "%s: the run needs %s MiB per rank (fsdp-plan: parameters %s, gradients %s, optimizer %s, unsharded %s, "
            "activations %s, communication %s, workspace %s MiB) x %d rank%s on %s = %s MiB, but only %s MiB is "
            "available (%s); %s (--no-memory-check skips this check)\n",
            prog, mib(p->total, b[0], sizeof b[0]), mib(p->params, b[1], sizeof b[1]), mib(p->grads, b[2], sizeof b[2]),
            mib(p->optimizer, b[3], sizeof b[3]), mib(p->unsharded, b[4], sizeof b[4]),
            mib(p->activations, b[5], sizeof b[5]), mib(p->communication, b[6], sizeof b[6]),
            mib(p->workspace, b[7], sizeof b[7]), on_host, on_host == 1 ? "" : "s", where,
            mib(p->total * on_host, b[8], sizeof b[8]), mib(rec[1], b[9], sizeof b[9]),
            src > 0 && src < N_SOURCES ? sources[src] : "?", remedies(in, fix, sizeof fix));
}

// The check for fsdp-train's options t or fsdp-minimal's m (the other NULL), resolved; threads per rank.
static int check(const char *prog, const train_options *t, const minimal_options *m, int threads, fsdp_comm *world) {
    const cli_fsdp_options *f = t ? &t->fsdp : &m->fsdp;
    const cli_training_options *run = t ? &t->training : &m->training;
    if (run->no_memory_check || f->offload_dir || (t && t->eval_only)) return 0;
    int N = fsdp_comm_size(world);
    fsdp_comm *node = NULL;  // this host's ranks
    if (fsdp_comm_split_node(world, &node) != FSDP_OK) return 0;
    int on_host = fsdp_comm_size(node);
    // the tools' shared memory spans a host (FSDP_COMM_NO_SHM turns it off); hosts of unequal size: as none
    int no_shm = N > 1 && (N % on_host != 0 || (on_host > 1 && !strstr(fsdp_comm_backend(node), "shm")));
    cli_plan_ranks ranks = {N, no_shm, on_host, 0.0, 0.0, threads};
    fsdp_plan_input in;
    memset(&in, 0, sizeof in);
    fsdp_config cfg;
    int64_t *block_train = NULL;  // (layers,) with --freeze or LoRA
    if (cli_plan_fsdp(prog, f, no_shm, &in, &cfg)) {  // a flag error, printed: the tool would stop on it too
        fsdp_comm_free(node);
        return 2;
    }
    fsdp_dev_caps caps;
    fsdp_dev_capabilities(cfg.device, &caps);
    if (!caps.host_memory) {  // the device's memory is not the host's (cuda): the host's limit does not bound it
        fsdp_comm_free(node);
        return 0;
    }
    if (cli_plan_finish(prog, t, m, &ranks, 0, &in, &block_train)) {  // the tool reports it, later
        fsdp_comm_free(node);
        return 0;
    }
    fsdp_plan p = fsdp_plan_compute(&in);
    free(block_train);
    in.block_train = NULL;
    // what the host can give, read by its first rank so that its ranks agree (the others add 0)
    int first = fsdp_comm_rank(node) == 0;
    fsdp_mem_available_info mem = {-1.0, ""};
    if (first) mem = fsdp_mem_available();
    double avail = first ? mem.bytes : 0.0, source = first ? source_index(mem.source) : 0.0;
    fsdp_status st = fsdp_all_reduce_double(node, &avail);
    if (st == FSDP_OK) st = fsdp_all_reduce_double(node, &source);
    fsdp_comm_free(node);
    double mine = st == FSDP_OK && avail >= 0.0 && p.total * on_host > avail;  // this host refuses
    double refusing = mine;
    if (fsdp_all_reduce_double(world, &refusing) != FSDP_OK || refusing < 0.5) return 0;
    // refused: rank 0 names the first refusing rank's host
    double rec[4] = {mine, avail, on_host, source};
    double *all = malloc(sizeof rec * (size_t)N);  // (N, 4) every rank's rec
    int R = fsdp_comm_rank(world);
    // the doubles travel as pairs of fp32 elements (an all-gather copies bytes)
    if (all && fsdp_all_gather(world, rec, all, 2 * 4, FSDP_F32) == FSDP_OK && R == 0) {
        int r = 0;
        while (r < N - 1 && all[4 * r] < 0.5) r++;
        say_refused(prog, &p, &in, all + 4 * r, r);
    } else if (R == 0) {
        say_refused(prog, &p, &in, rec, 0);
    }
    free(all);
    return 2;
}

int cli_memory_check_train(const train_options *o, fsdp_comm *world) {
    return check("fsdp-train", o, NULL, o->thread_choice.threads, world);
}

int cli_memory_check_minimal(const minimal_options *o, int threads, fsdp_comm *world) {
    minimal_options m = *o;  // the batch resolved here as fsdp-minimal resolves it later, silently
    const cli_model_config *c = &o->config;
    if (cli_training_resolve_batch("fsdp-minimal", &m.training, &m.fsdp, c->args, c->nargs, c->argc, c->argv,
                                   fsdp_comm_size(world), 0))
        return 0;
    return check("fsdp-minimal", NULL, &m, threads, world);
}
