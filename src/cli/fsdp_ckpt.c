// fsdp_ckpt.c: inspect and transform checkpoints without a model or MPI.
//   fsdp-ckpt info DIR|FILE.safetensors      layout, names, shapes, dtypes, world size, step, the model
//                                            configuration and settings the run recorded
//   fsdp-ckpt verify DIR                     completion marker and every shard's CRC-32
//   fsdp-ckpt consolidate DIR OUT.safetensors    sharded -> one full state dict (PyTorch names),
//                                            streaming: memory about one tensor; OUT without .safetensors:
//                                            a Hugging Face model directory (ckpt/hf_writer.h)
//   fsdp-ckpt reshard DIR OUT_DIR --world-size M  rewrite for M ranks (each tensor split evenly)
//   fsdp-ckpt convert DIR OUT_DIR --dtype bf16    rewrite with bf16 tensors (loads back as fp32; an export:
//                                            --resume refuses it without --allow-lowp-resume)
// Transformed files keep the configuration and settings metadata (cli/model_config.h). An output that
// would write into the source or into a checkpoint, or that --resume would read, is refused before
// anything is written (ckpt/ckpt_output.h, exit 2); reshard and convert write into a staging directory
// renamed into place once complete, opening as many files at a time as RLIMIT_NOFILE allows.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_output.h"
#include "ckpt/crc32.h"
#include "ckpt/hf_config.h"
#include "ckpt/hf_dir.h"
#include "ckpt/hf_writer.h"
#include "ckpt/safetensors.h"
#include "core/path_canon.h"
#include "fsdp/fsdp.h"
#include "tensor/tensor.h"
#include "core/tunables.h"

static const char *prog = "fsdp-ckpt";

static int fail(void) {
    fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());
    return 1;
}

typedef struct {
    char dir[4096];
    st_file *index;
    int world;
    st_file **shards;  // (world,) opened lazily
    int n_open;        // shards open now
    int max_open;      // at most this many at once (reshard keeps descriptors for its own files)
} ckpt;

// dir exists and is a directory; else one line naming it ("no such directory", "not a directory").
static fsdp_status check_directory(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return errno == ENOENT ? fsdp_error(FSDP_ERR_MISSING, "%s: no such directory", dir)
                               : fsdp_error(FSDP_ERR_IO, "%s: cannot access: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: not a directory (expected a checkpoint directory)", dir);
    return FSDP_OK;
}

// The file descriptors free for reading and writing checkpoint files: the soft RLIMIT_NOFILE (first
// raised to the hard limit) less those open now and a reserve (the index, a checksum, stdio). *limit:
// the soft limit.
static long free_descriptors(long *limit) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        *limit = 64;
        return 32;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    *limit = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1 << 20) ? 1 << 20 : (long)rl.rlim_cur;
    long open_now = 16;  // when /proc/self/fd cannot be listed
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        open_now = -3;  // ".", ".." and the listing's own descriptor
        while (readdir(d)) open_now++;
        closedir(d);
    }
    return *limit - open_now - 8;
}

static fsdp_status ckpt_open(const char *dir, ckpt *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    FSDP_CHECK(check_directory(dir));
    char path[4200];
    snprintf(path, sizeof path, "%s/DONE", dir);
    if (access(path, F_OK) != 0)
        return fsdp_error(FSDP_ERR_MISSING, "%s: no completion marker DONE: not a complete checkpoint", dir);
    snprintf(path, sizeof path, "%s/index.safetensors", dir);
    FSDP_CHECK(st_open(path, &c->index));
    const char *w = st_metadata(c->index, "world_size");
    c->world = w ? atoi(w) : 0;
    if (c->world <= 0) return fsdp_error(FSDP_ERR_FORMAT, "%s: index has no world_size", path);
    long limit = 0, avail = free_descriptors(&limit);
    c->max_open = avail > 1 ? (int)(avail < c->world ? avail : c->world) : 1;
    c->shards = calloc((size_t)c->world, sizeof(st_file *));
    return c->shards ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
}

static void ckpt_close(ckpt *c) {
    for (int r = 0; c->shards && r < c->world; r++) st_close(c->shards[r]);
    free(c->shards);
    st_close(c->index);
}

// Shard file `rank` of the checkpoint, opened on first use. When c->max_open are open already, all of
// them are closed first.
static fsdp_status shard_at(ckpt *c, int rank, st_file **f) {
    if (rank < 0 || rank >= c->world) return fsdp_error(FSDP_ERR_FORMAT, "%s: the index names shard %d", c->dir, rank);
    if (!c->shards[rank]) {
        if (c->n_open >= c->max_open) {
            for (int r = 0; r < c->world; r++) {
                st_close(c->shards[r]);
                c->shards[r] = NULL;
            }
            c->n_open = 0;
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_%05d.safetensors", c->dir, rank);
        FSDP_CHECK(st_open(path, &c->shards[rank]));
        c->n_open++;
    }
    *f = c->shards[rank];
    return FSDP_OK;
}

static fsdp_status shard_crc(const ckpt *c, int r, uint32_t *have, const char **want) {
    char path[4200], key[64];
    snprintf(path, sizeof path, "%s/shard_%05d.safetensors", c->dir, r);
    snprintf(key, sizeof key, "crc32.shard_%05d.safetensors", r);
    *want = st_metadata(c->index, key);
    if (!*want) return FSDP_OK;  // this rank wrote no shard (a replica)
    return fsdp_crc32_file(path, have);
}

// The names of the checkpoint's parameters (index tensors "shape.<name>"), in index order.
static int param_names(const ckpt *c, const char **names, int cap) {
    int n = 0;
    for (int i = 0; i < st_count(c->index) && n < cap; i++) {
        const char *e = st_entry_at(c->index, i)->name;
        if (strncmp(e, "shape.", 6) == 0) names[n++] = e + 6;
    }
    return n;
}

// The shape the index records for parameter `name`. shape: (8,)
static fsdp_status tensor_shape(const ckpt *c, const char *name, int *ndim, int64_t *shape) {
    char key[512];
    snprintf(key, sizeof key, "shape.%s", name);
    const st_entry *e = st_find(c->index, key);
    int64_t d1[1] = {e ? e->shape[0] : 0};
    int32_t sh[8] = {0};
    if (d1[0] > 8) return fsdp_error(FSDP_ERR_FORMAT, "%s: %s has %lld dimensions", c->dir, key, (long long)d1[0]);
    FSDP_CHECK(st_read_i32(c->index, key, sh, 1, d1));
    *ndim = (int)d1[0];
    for (int d = 0; d < *ndim; d++) shape[d] = sh[d];
    return FSDP_OK;
}

// A whole tensor (a parameter, or with prefix its exp_avg/exp_avg_sq) as fp32. out: (numel,) malloc'ed
static fsdp_status read_tensor(ckpt *c, const char *prefix, const char *name, float **out, int *ndim,
                               int64_t *shape, int64_t *numel) {
    char key[512];
    FSDP_CHECK(tensor_shape(c, name, ndim, shape));
    *numel = 1;
    for (int d = 0; d < *ndim; d++) *numel *= shape[d];
    snprintf(key, sizeof key, "pieces.%s", name);
    const st_entry *pe = st_find(c->index, key);
    if (!pe || pe->ndim != 2) return fsdp_error(FSDP_ERR_FORMAT, "%s: no pieces for '%s'", c->dir, name);
    int rows = (int)pe->shape[0];
    int32_t *tab = malloc(sizeof(int32_t) * (size_t)(3 * rows + 1));
    float *buf = malloc(sizeof(float) * (size_t)(*numel ? *numel : 1));
    if (!tab || !buf) {
        free(tab);
        free(buf);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    int64_t ts[2] = {rows, 3};
    fsdp_status st = st_read_i32(c->index, key, tab, 2, ts);
    char tname[512];
    snprintf(tname, sizeof tname, "%s%s", prefix, name);
    for (int r = 0; r < rows && st == FSDP_OK; r++) {
        st_file *shard = NULL;
        if ((st = shard_at(c, tab[3 * r], &shard)) != FSDP_OK) break;
        int64_t pshape[1] = {tab[3 * r + 2]};
        st = st_read_f32_range(shard, tname, buf + tab[3 * r + 1], 1, pshape, 0, pshape[0]);
    }
    free(tab);
    if (st != FSDP_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return FSDP_OK;
}

// Whether the checkpoint holds AdamW moments for tensor `name`: a frozen parameter (--freeze, LoRA's
// base) has none. Looked up in the shard of its first piece.
static int has_moments(ckpt *c, const char *name) {
    char key[512];
    snprintf(key, sizeof key, "pieces.%s", name);
    const st_entry *pe = st_find(c->index, key);
    if (!pe || pe->ndim != 2 || pe->shape[0] < 1 || pe->shape[1] != 3) return 0;
    int64_t rows[2] = {pe->shape[0], 3};
    int32_t *tab = malloc(sizeof(int32_t) * (size_t)(3 * rows[0]));  // (rows, 3): rank, first, count
    int rank = tab && st_read_i32(c->index, key, tab, 2, rows) == FSDP_OK ? tab[0] : -1;
    free(tab);
    st_file *shard = NULL;
    if (rank < 0 || shard_at(c, rank, &shard) != FSDP_OK) return 0;
    snprintf(key, sizeof key, "exp_avg.%s", name);
    return st_find(shard, key) != NULL;
}

// The checkpoint's own keys (layout, trainer state, checksums), which a transformed file rewrites; every
// other key (the model configuration, "setting.*") carries over unchanged.
static int layout_key(const char *key) {
    static const char *const own[] = {"format", "world_size", "strategy", "step", "seed", "global_batch", "adam_step",
                                      "dtype"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (strcmp(key, own[i]) == 0) return 1;
    return strncmp(key, "crc32.", 6) == 0;
}

static fsdp_status copy_model_metadata(const st_file *from, st_writer *w) {
    for (int i = 0; i < st_metadata_count(from); i++) {
        const char *value = NULL, *key = st_metadata_at(from, i, &value);
        if (!layout_key(key)) FSDP_CHECK(st_writer_add_metadata(w, key, value));
    }
    return FSDP_OK;
}

// The model configuration and the settings the file records (model_config.h), one per line.
static void print_model_metadata(const st_file *f) {
    for (int pass = 0; pass < 2; pass++) {
        int shown = 0;
        for (int i = 0; i < st_metadata_count(f); i++) {
            const char *value = NULL, *key = st_metadata_at(f, i, &value);
            int setting = strncmp(key, "setting.", 8) == 0;
            if (layout_key(key) || setting != pass) continue;
            if (!shown++) printf("  %s\n", pass ? "settings:" : "config:");
            printf("    %-28s %s\n", setting ? key + 8 : key, value);
        }
    }
}

// One layout line of `info`: the strategy by its name (FULL_SHARD, ...; the file records its index).
static void print_layout_key(const char *key, const char *value) {
    char *end = NULL;
    long v = value ? strtol(value, &end, 10) : -1;
    if (value && !strcmp(key, "strategy") && end != value && !*end && v >= FSDP_FULL_SHARD && v <= FSDP_DDP)
        value = fsdp_strategy_name((fsdp_strategy)v);
    printf("  %-13s %s\n", key, value ? value : "?");
}

static int is_full(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return access(path, F_OK) == 0;
}

static int cmd_info(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, path,
                errno == ENOENT ? "no such file or directory (expected a checkpoint directory or a .safetensors file)"
                                : strerror(errno));
        return 1;
    }
    if (S_ISREG(sb.st_mode)) {  // a plain safetensors file
        st_file *f = NULL;
        if (st_open(path, &f) != FSDP_OK) return fail();
        printf("%s: safetensors, %d tensors\n", path, st_count(f));
        print_model_metadata(f);
        for (int i = 0; i < st_count(f); i++) {
            const st_entry *e = st_entry_at(f, i);
            char shape[96];
            printf("  %-48s %-5s %s\n", e->name, st_dtype_name(e->dtype), fsdp_shape_str(e->ndim, e->shape, shape, sizeof shape));
        }
        st_close(f);
        return 0;
    }
    if (is_full(path)) {  // a full checkpoint: the state dict and the optimizer file
        char model[4200], optim[4200];
        snprintf(model, sizeof model, "%s/model.safetensors", path);
        snprintf(optim, sizeof optim, "%s/optimizer.safetensors", path);
        st_file *o = NULL;
        if (st_open(optim, &o) != FSDP_OK) return fail();
        printf("%s: full checkpoint (model.safetensors + optimizer.safetensors)\n", path);
        const char *mkeys[] = {"world_size", "strategy", "step", "seed", "global_batch", "adam_step"};
        for (size_t k = 0; k < sizeof mkeys / sizeof mkeys[0]; k++)
            print_layout_key(mkeys[k], st_metadata(o, mkeys[k]));
        st_close(o);
        return cmd_info(model);  // (model.safetensors records the configuration too)
    }
    ckpt c;
    if (ckpt_open(path, &c) != FSDP_OK) return fail();
    const char *keys[] = {"format", "world_size", "strategy", "step", "seed", "global_batch", "adam_step"};
    printf("%s: sharded checkpoint\n", path);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        print_layout_key(keys[k], st_metadata(c.index, keys[k]));
    if (st_metadata(c.index, "dtype")) printf("  %-13s %s\n", "dtype", st_metadata(c.index, "dtype"));
    print_model_metadata(c.index);
    const char *names[4096];
    int n = param_names(&c, names, 4096);
    printf("  %d tensors:\n", n);
    for (int i = 0; i < n; i++) {
        char key[512], shape[96];
        snprintf(key, sizeof key, "shape.%s", names[i]);
        int64_t d1[1] = {st_find(c.index, key)->shape[0]}, sh64[8];
        int32_t sh[8];
        if (st_read_i32(c.index, key, sh, 1, d1) != FSDP_OK) {
            ckpt_close(&c);
            return fail();
        }
        for (int d = 0; d < d1[0]; d++) sh64[d] = sh[d];
        snprintf(key, sizeof key, "pieces.%s", names[i]);
        printf("    %-46s %-16s %lld piece(s)\n", names[i], fsdp_shape_str((int)d1[0], sh64, shape, sizeof shape),
               (long long)st_find(c.index, key)->shape[0]);
    }
    ckpt_close(&c);
    return 0;
}

static int cmd_verify(const char *dir) {
    if (check_directory(dir) != FSDP_OK) return fail();
    if (fsdp_verify_marker(dir) != FSDP_OK) return fail();  // DONE and the files it lists
    if (is_full(dir)) {
        printf("%s: complete full checkpoint, checksums match\n", dir);
        return 0;
    }
    ckpt c;
    if (ckpt_open(dir, &c) != FSDP_OK) return fail();
    int bad = 0, files = 0;
    for (int r = 0; r < c.world; r++) {
        uint32_t have = 0;
        const char *want = NULL;
        if (shard_crc(&c, r, &have, &want) != FSDP_OK) {
            fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());
            bad++;
            continue;
        }
        if (!want) continue;
        files++;
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", have);
        if (strcmp(hex, want) != 0) {
            fprintf(stderr, "%s: %s/shard_%05d.safetensors: checksum mismatch (index %s, file %s)\n", prog, dir, r,
                    want, hex);
            bad++;
        }
    }
    ckpt_close(&c);
    if (bad) return 1;
    printf("%s: complete, %d shard file(s), checksums match\n", dir, files);
    return 0;
}

// An output refused by fsdp_ckpt_check_output: one line naming the subcommand, exit status 2.
static int refuse(const char *cmd) {
    fprintf(stderr, "%s %s: %s; nothing written\n", prog, cmd, fsdp_last_error());
    return 2;
}

// consolidate DIR OUT_DIR: the checkpoint as a Hugging Face model directory (fp32, shards of 5 GB), its
// config.json from the model configuration the checkpoint records. c: open.
static int consolidate_hf(ckpt *c, const char *dir, const char *out) {
    int nm = st_metadata_count(c->index), n = 0;
    const char **keys = calloc((size_t)nm + 1, sizeof *keys), **values = calloc((size_t)nm + 1, sizeof *values);
    const char *names[4096];
    hf_config cfg;
    fsdp_status st = keys && values ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nm; i++) keys[i] = st_metadata_at(c->index, i, &values[i]);
    if (st == FSDP_OK && !st_metadata(c->index, "model_type"))
        st = fsdp_error(FSDP_ERR_INVALID_ARG, "%s records no model configuration (model_type): a Hugging Face "
                        "directory needs its config.json; OUT.safetensors writes one file", dir);
    if (st == FSDP_OK) st = hf_config_from_pairs(nm, keys, values, dir, &cfg);
    hf_writer *w = st == FSDP_OK ? hf_writer_new(out, ST_F32, HF_DEFAULT_SHARD_BYTES) : NULL;
    if (st == FSDP_OK && !w) st = FSDP_ERR_NOMEM;
    for (int i = 0; i < nm && st == FSDP_OK; i++)
        if (!layout_key(keys[i])) st = hf_writer_add_metadata(w, keys[i], values[i]);
    if (st == FSDP_OK) n = param_names(c, names, 4096);
    for (int i = 0; i < n && st == FSDP_OK; i++) {  // every tensor's name and shape
        int64_t shape[8];
        int ndim = 0;
        st = tensor_shape(c, names[i], &ndim, shape);
        if (st == FSDP_OK) st = hf_writer_add(w, names[i], ndim, shape);
    }
    if (st == FSDP_OK) st = hf_writer_begin(w);
    for (int i = 0; i < n && st == FSDP_OK; i++) {  // data: one tensor in memory at a time
        float *t = NULL;
        int ndim;
        int64_t shape[8], numel;
        st = read_tensor(c, "", names[i], &t, &ndim, shape, &numel);
        if (st == FSDP_OK) st = st_writer_stream_data(hf_writer_stream(w, i), t, sizeof(float) * (size_t)numel);
        free(t);
    }
    int files = w ? hf_writer_file_count(w) : 0;
    if (st == FSDP_OK) st = hf_writer_commit(w, &cfg);  // (frees w)
    else hf_writer_free(w);
    free(keys);
    free(values);
    ckpt_close(c);
    if (st == FSDP_ERR_INVALID_ARG || st == FSDP_ERR_FORMAT) return refuse("consolidate");  // (exit 2)
    if (st != FSDP_OK) return fail();
    printf("%s: %d tensors consolidated from %s into %d file(s) + config.json\n", out, n, dir, files);
    return 0;
}

static int cmd_consolidate(const char *dir, const char *out) {
    ckpt c;
    if (ckpt_open(dir, &c) != FSDP_OK) {
        ckpt_close(&c);
        return fail();
    }
    if (fsdp_ckpt_check_output(dir, out, FSDP_CKPT_OUT_FILE) != FSDP_OK) {
        ckpt_close(&c);
        return refuse("consolidate");
    }
    size_t len = strlen(out);
    if (len < 12 || strcmp(out + len - 12, ".safetensors") != 0) return consolidate_hf(&c, dir, out);
    const char *names[4096];
    int n = param_names(&c, names, 4096);
    st_writer *w = st_writer_new_stream(out);
    fsdp_status st = w ? copy_model_metadata(c.index, w) : FSDP_ERR_NOMEM;
    for (int i = 0; i < n && st == FSDP_OK; i++) {  // header: every tensor's name and shape
        int64_t shape[8];
        int ndim = 0;
        st = tensor_shape(&c, names[i], &ndim, shape);
        if (st == FSDP_OK) st = st_writer_add(w, names[i], ST_F32, ndim, shape, NULL);
    }
    if (st == FSDP_OK) st = st_writer_stream_begin(w);
    for (int i = 0; i < n && st == FSDP_OK; i++) {  // data: one tensor in memory at a time
        float *t = NULL;
        int ndim;
        int64_t shape[8], numel;
        st = read_tensor(&c, "", names[i], &t, &ndim, shape, &numel);
        if (st == FSDP_OK) st = st_writer_stream_data(w, t, sizeof(float) * (size_t)numel);
        free(t);
    }
    if (w) st = st == FSDP_OK ? st_writer_stream_commit(w) : (st_writer_free(w), st);
    ckpt_close(&c);
    if (st != FSDP_OK) return fail();
    printf("%s: %d tensors consolidated from %s\n", out, n, dir);
    return 0;
}

// ------------------------------------------------------------------------------ reshard, convert

// A rewrite of a checkpoint for `world` ranks (tensor i split evenly: rank q holds
// [q*n/world, (q+1)*n/world)), with tensors stored as dtype; the optimizer moments come along.
typedef struct {
    ckpt c;
    const char *names[4096];  // (n,) the parameters, in index order
    int n, world;
    st_dtype dtype;
    int64_t *numels;  // (n,)
    int *kinds;       // (n,) 3 with moments, 1 without (frozen parameters)
} rewrite_job;

static const char *const moment_prefixes[] = {"", "exp_avg.", "exp_avg_sq."};

// The piece [*lo, *hi) of a tensor of numel elements that rank q of world holds.
static void piece(int64_t numel, int q, int world, int64_t *lo, int64_t *hi) {
    *lo = numel * q / world;
    *hi = numel * (q + 1) / world;
}

// Each parameter's element count, and whether the checkpoint holds its moments.
static fsdp_status plan_rewrite(rewrite_job *j) {
    j->n = param_names(&j->c, j->names, 4096);
    j->numels = calloc((size_t)j->n + 1, sizeof(int64_t));
    j->kinds = calloc((size_t)j->n + 1, sizeof(int));
    if (!j->numels || !j->kinds) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    int have_opt = 0;
    for (int r = 0; r < j->c.world && !have_opt; r++) {  // moments present when any shard has them
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_%05d.safetensors", j->c.dir, r);
        st_file *f = NULL;
        if (st_open(path, &f) == FSDP_OK) {
            for (int i = 0; i < st_count(f) && !have_opt; i++) have_opt = !strncmp(st_entry_at(f, i)->name, "exp_avg.", 8);
            st_close(f);
        }
    }
    for (int i = 0; i < j->n; i++) {
        j->kinds[i] = have_opt && has_moments(&j->c, j->names[i]) ? 3 : 1;
        char key[512];
        snprintf(key, sizeof key, "shape.%s", j->names[i]);
        int64_t d1[1] = {st_find(j->c.index, key)->shape[0]};
        int32_t sh[8];
        FSDP_CHECK(st_read_i32(j->c.index, key, sh, 1, d1));
        j->numels[i] = 1;
        for (int d = 0; d < d1[0]; d++) j->numels[i] *= sh[d];
    }
    return FSDP_OK;
}

// Writes dir/shard_QQQQQ.safetensors for q in [q0, q1): every tensor is read once from the source and
// its pieces for these ranks streamed out, so q1 - q0 output files are open at a time.
static fsdp_status write_shard_batch(rewrite_job *j, const char *dir, int q0, int q1) {
    st_writer **ws = calloc((size_t)(q1 - q0), sizeof(st_writer *));  // (q1 - q0,) shard q at q - q0
    fsdp_status st = ws ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    for (int q = q0; q < q1 && st == FSDP_OK; q++) {  // headers
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_%05d.safetensors", dir, q);
        st_writer *w = ws[q - q0] = st_writer_new_stream(path);
        st = w ? st_writer_add_metadata(w, "format", st_metadata(j->c.index, "format")) : FSDP_ERR_NOMEM;
        for (int i = 0; i < j->n && st == FSDP_OK; i++)
            for (int k = 0; k < j->kinds[i] && st == FSDP_OK; k++) {
                int64_t lo, hi;
                piece(j->numels[i], q, j->world, &lo, &hi);
                if (hi <= lo) continue;
                int64_t shape[1] = {hi - lo};
                char tname[512];
                snprintf(tname, sizeof tname, "%s%s", moment_prefixes[k], j->names[i]);
                st = st_writer_add(w, tname, j->dtype, 1, shape, NULL);
            }
        if (st == FSDP_OK) st = st_writer_stream_begin(w);
    }
    for (int i = 0; i < j->n && st == FSDP_OK; i++)  // data: one whole tensor in memory at a time
        for (int k = 0; k < j->kinds[i] && st == FSDP_OK; k++) {
            float *t = NULL;
            int ndim;
            int64_t shape[8], numel;
            st = read_tensor(&j->c, moment_prefixes[k], j->names[i], &t, &ndim, shape, &numel);
            for (int q = q0; q < q1 && st == FSDP_OK; q++) {
                int64_t lo, hi;
                piece(numel, q, j->world, &lo, &hi);
                if (hi <= lo) continue;
                if (j->dtype == ST_F32) {
                    st = st_writer_stream_data(ws[q - q0], t + lo, sizeof(float) * (size_t)(hi - lo));
                } else {
                    fsdp_bf16 *b = malloc(sizeof(fsdp_bf16) * (size_t)(hi - lo));  // (hi - lo,)
                    if (!b) st = fsdp_error(FSDP_ERR_NOMEM, "out of memory");
                    else fsdp_f32_to_bf16_array(b, t + lo, (size_t)(hi - lo));
                    if (st == FSDP_OK) st = st_writer_stream_data(ws[q - q0], b, sizeof(fsdp_bf16) * (size_t)(hi - lo));
                    free(b);
                }
            }
            free(t);
        }
    for (int q = q0; ws && q < q1; q++)
        if (ws[q - q0]) {
            if (st == FSDP_OK) st = st_writer_stream_commit(ws[q - q0]);
            else st_writer_free(ws[q - q0]);
        }
    free(ws);
    return st;
}

// dir/index.safetensors: the shapes, the new pieces, the source's metadata with the new world size,
// dtype and shard checksums.
static fsdp_status write_rewrite_index(rewrite_job *j, const char *dir) {
    const st_file *src = j->c.index;
    int world = j->world;
    char path[4200], val[64];
    snprintf(path, sizeof path, "%s/index.safetensors", dir);
    st_writer *iw = st_writer_new(path);
    int32_t *shapes = calloc((size_t)j->n * 8 + 1, sizeof(int32_t));  // (n, 8)
    // (n, 8 + 3 * world): each tensor's int64 shape and new pieces; the writer reads them at the commit
    int64_t *kept = calloc((size_t)j->n * (size_t)(8 + 3 * world) + 1, sizeof(int64_t));
    fsdp_status st = iw && shapes && kept ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    const char *keep[] = {"format", "strategy", "step", "seed", "global_batch", "adam_step"};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0] && st == FSDP_OK; k++)
        if (st_metadata(src, keep[k])) st = st_writer_add_metadata(iw, keep[k], st_metadata(src, keep[k]));
    snprintf(val, sizeof val, "%d", world);
    if (st == FSDP_OK) st = st_writer_add_metadata(iw, "world_size", val);
    if (st == FSDP_OK) st = st_writer_add_metadata(iw, "dtype", j->dtype == ST_F32 ? "fp32" : "bf16");
    if (st == FSDP_OK) st = copy_model_metadata(src, iw);
    for (int q = 0; q < world && st == FSDP_OK; q++) {  // one shard file open at a time
        char key[64], shard[4200];
        uint32_t crc = 0;
        snprintf(shard, sizeof shard, "%s/shard_%05d.safetensors", dir, q);
        st = fsdp_crc32_file(shard, &crc);
        snprintf(key, sizeof key, "crc32.shard_%05d.safetensors", q);
        snprintf(val, sizeof val, "%08x", crc);
        if (st == FSDP_OK) st = st_writer_add_metadata(iw, key, val);
    }
    for (int i = 0; i < j->n && st == FSDP_OK; i++) {
        char key[512];
        snprintf(key, sizeof key, "shape.%s", j->names[i]);
        int64_t d1[1] = {st_find(src, key)->shape[0]};
        int32_t *sh = shapes + 8 * i;
        st = st_read_i32(src, key, sh, 1, d1);
        int64_t *sh64 = kept + (size_t)i * (size_t)(8 + 3 * world), *rows = sh64 + 8;
        int nr = 0;
        for (int d = 0; d < d1[0]; d++) sh64[d] = sh[d];
        for (int q = 0; q < world; q++) {
            int64_t lo, hi;
            piece(j->numels[i], q, world, &lo, &hi);
            if (hi <= lo) continue;
            rows[3 * nr] = q;
            rows[3 * nr + 1] = lo;
            rows[3 * nr + 2] = hi - lo;
            nr++;
        }
        int64_t ts1[1] = {d1[0]}, ts2[2] = {nr, 3};
        if (st == FSDP_OK) st = st_writer_add(iw, key, ST_I64, 1, ts1, sh64);
        snprintf(key, sizeof key, "pieces.%s", j->names[i]);
        if (st == FSDP_OK) st = st_writer_add(iw, key, ST_I64, 2, ts2, rows);
    }
    if (iw) st = st == FSDP_OK ? st_writer_commit(iw) : (st_writer_free(iw), st);
    free(shapes);
    free(kept);
    return st;
}

// dir/DONE, written, flushed and fsync'ed; the system's reason on failure.
static fsdp_status write_done(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/DONE", dir);
    FILE *f = fopen(path, "w");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot create the completion marker: %s", path, strerror(errno));
    int bad = fprintf(f, "complete\n") < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    return bad ? fsdp_error(FSDP_ERR_IO, "%s: cannot write the completion marker: %s", path, strerror(err)) : FSDP_OK;
}

// Removes the staging directory dir and every file in it (all of them this process wrote).
static void remove_staging(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

// The output batches are at most this many shards: their writers' buffers stay in memory together.
#define REWRITE_BATCH_MAX 1024

// Rewrites DIR into OUT_DIR for `world` ranks (0: the source's) as dtype. Everything is written into
// a staging directory beside OUT_DIR ("OUT_DIR.tmp.<pid>", removed on any failure), which is renamed
// to OUT_DIR once complete (DONE included): a failure leaves nothing behind.
static int cmd_rewrite(const char *cmd, const char *dir, const char *out, int world, st_dtype dtype) {
    rewrite_job j;
    memset(&j, 0, sizeof j);
    if (ckpt_open(dir, &j.c) != FSDP_OK) {
        ckpt_close(&j.c);
        return fail();
    }
    char final[4000], stage[4096];  // (so that stage/<file> fits the 4200-byte paths above)
    if (fsdp_ckpt_check_output(dir, out, FSDP_CKPT_OUT_DIR) != FSDP_OK ||
        fsdp_path_canonical(out, final, sizeof final) != FSDP_OK) {
        ckpt_close(&j.c);
        return refuse(cmd);
    }
    j.world = world > 0 ? world : j.c.world;
    j.dtype = dtype;
    long limit = 0, avail = free_descriptors(&limit);
    if (avail < 2) {
        fprintf(stderr, "%s %s: %s: only %ld of RLIMIT_NOFILE %ld file descriptors are free (it needs 2 or more: "
                "raise ulimit -n); nothing written\n", prog, cmd, out, avail < 0 ? 0 : avail, limit);
        ckpt_close(&j.c);
        return 2;
    }
    long batch = avail / 2 < REWRITE_BATCH_MAX ? avail / 2 : REWRITE_BATCH_MAX;
    if (batch > j.world) batch = j.world;
    j.c.max_open = (int)(avail - batch);  // the source's shards, re-opened as needed
    snprintf(stage, sizeof stage, "%s.tmp.%ld", final, (long)getpid());
    if (mkdir(stage, 0755) != 0) {
        fprintf(stderr, "%s %s: %s: cannot create: %s\n", prog, cmd, stage, strerror(errno));
        ckpt_close(&j.c);
        return 1;
    }
    fsdp_status st = plan_rewrite(&j);
    for (int q0 = 0; q0 < j.world && st == FSDP_OK; q0 += (int)batch)
        st = write_shard_batch(&j, stage, q0, q0 + (int)batch < j.world ? q0 + (int)batch : j.world);
    if (st == FSDP_OK) st = write_rewrite_index(&j, stage);
    if (st == FSDP_OK) st = write_done(stage);
    if (st == FSDP_OK && rename(stage, final) != 0)  // (an empty OUT_DIR is replaced)
        st = fsdp_error(FSDP_ERR_IO, "%s: cannot rename %s into place: %s", out, stage, strerror(errno));
    int n = j.n;
    ckpt_close(&j.c);
    free(j.numels);
    free(j.kinds);
    if (st != FSDP_OK) {
        remove_staging(stage);
        fprintf(stderr, "%s %s: %s (nothing left behind)\n", prog, cmd, fsdp_last_error());
        return 1;
    }
    printf("%s: %d tensors for %d rank(s), %s\n", out, n, j.world, st_dtype_name(dtype));
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: %s info DIR|FILE | verify DIR | consolidate DIR OUT.safetensors|OUT_DIR |\n"
                    "       reshard DIR OUT_DIR --world-size M | convert DIR OUT_DIR --dtype bf16|fp32\n", prog);
    return 2;
}

// Where the transforming subcommands may write (ckpt/ckpt_output.h), for their --help.
#define OUTPUT_RULE                                                                                 \
    "The output is refused (exit 2, nothing written) when it is the source, lies inside it or holds\n" \
    "it, lies inside any checkpoint, or is named DONE or step_NNNNNNNN; paths are compared after\n"    \
    "resolving symlinks and \"..\"."
#define OUTPUT_DIR_RULE                                                                             \
    "OUT_DIR must be new or empty (never a --ckpt-dir holding checkpoints): it is written beside\n"  \
    "it as OUT_DIR.tmp.<pid> and renamed once complete, so a failure leaves nothing behind."

// `fsdp-ckpt SUBCOMMAND --help` (or -h anywhere after it): that subcommand's usage and what it does.
static const struct {
    const char *name, *args, *help;
} subcommands[] = {
    {"info", "DIR|FILE.safetensors", "Prints a checkpoint's or file's layout, tensor names, shapes and dtypes, world size, step,\n"
                                     "and the model configuration and settings the run recorded."},
    {"verify", "DIR", "Checks the completion marker DONE and every shard's CRC-32."},
    {"consolidate", "DIR OUT.safetensors|OUT_DIR", "Writes one full state dict with PyTorch names (streaming: memory about one tensor).\n"
                                           "An OUT not ending in .safetensors is a Hugging Face model directory: config.json (from\n"
                                           "the model configuration the checkpoint records) and model.safetensors, or 5 GB shards\n"
                                           "and model.safetensors.index.json, fp32; an existing OUT is replaced only when it holds\n"
                                           "just such files.\n"
                                           OUTPUT_RULE},
    {"reshard", "DIR OUT_DIR --world-size M", "Rewrites the checkpoint for M ranks (each tensor split evenly).\n"
                                              OUTPUT_RULE "\n" OUTPUT_DIR_RULE "\n\n"
                                              "flags:\n  --world-size M\n      ranks of the rewritten checkpoint"},
    {"convert", "DIR OUT_DIR --dtype bf16|f32", "Rewrites the checkpoint with bf16 (or f32) tensors; bf16 is an export: --resume\n"
                                                "refuses it without --allow-lowp-resume.\n"
                                                OUTPUT_RULE "\n" OUTPUT_DIR_RULE "\n\n"
                                                "flags:\n  --dtype bf16|f32\n      dtype of the rewritten tensors"},
};

static int subcommand_help(int argc, char **argv) {
    for (size_t i = 0; i < sizeof subcommands / sizeof *subcommands; i++) {
        if (strcmp(argv[1], subcommands[i].name)) continue;
        for (int a = 2; a < argc; a++)
            if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
                printf("usage: %s %s %s\n%s\n", prog, subcommands[i].name, subcommands[i].args, subcommands[i].help);
                return 1;
            }
    }
    return 0;
}

int main(int argc, char **argv) {
    fsdp_tunables_warn_unknown("fsdp-ckpt");  // a misspelt FSDP_* variable
    if (argc >= 3 && subcommand_help(argc, argv)) return 0;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: %s COMMAND ...\n"
               "  info DIR|FILE.safetensors         layout, names, shapes, dtypes, world size, step, config, settings\n"
               "  verify DIR                        completion marker and every shard's CRC-32\n"
               "  consolidate DIR OUT.safetensors   one full state dict with PyTorch names (streaming)\n"
               "  consolidate DIR OUT_DIR           the same as a Hugging Face model directory\n"
               "  reshard DIR OUT_DIR --world-size M   rewrite the checkpoint for M ranks\n"
               "  convert DIR OUT_DIR --dtype bf16|fp32 rewrite with bf16 (or fp32) tensors\n", prog);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "info")) return cmd_info(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "verify")) return cmd_verify(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "consolidate")) return cmd_consolidate(argv[2], argv[3]);
    if (argc == 6 && !strcmp(argv[1], "reshard") && !strcmp(argv[4], "--world-size")) {
        char *end = NULL;
        long m = strtol(argv[5], &end, 10);
        if (*end || m < 1 || m > 100000) {
            fprintf(stderr, "%s: --world-size: expected a positive integer, got '%s'\n", prog, argv[5]);
            return 2;
        }
        return cmd_rewrite("reshard", argv[2], argv[3], (int)m, ST_F32);
    }
    if (argc == 6 && !strcmp(argv[1], "convert") && !strcmp(argv[4], "--dtype")) {
        if (strcasecmp(argv[5], "bf16") && strcasecmp(argv[5], "fp32")) {
            fprintf(stderr, "%s: --dtype: expected bf16 or fp32, got '%s'\n", prog, argv[5]);
            return 2;
        }
        return cmd_rewrite("convert", argv[2], argv[3], 0, strcasecmp(argv[5], "bf16") ? ST_F32 : ST_BF16);
    }
    return usage();
}
