// fsdp_ckpt.c: inspect and transform checkpoints without a model or MPI.
//   fsdp-ckpt info DIR|FILE.safetensors      layout, names, shapes, dtypes, world size, step, the model
//                                            configuration and settings the run recorded
//   fsdp-ckpt verify DIR                     completion marker and every shard's CRC-32
//   fsdp-ckpt consolidate DIR OUT.safetensors    sharded -> one full state dict (PyTorch names),
//                                            streaming: memory about one tensor
//   fsdp-ckpt reshard DIR OUT_DIR --world-size M  rewrite for M ranks (each tensor split evenly)
//   fsdp-ckpt convert DIR OUT_DIR --dtype bf16    rewrite with bf16 tensors (loads back as fp32; an export:
//                                            --resume refuses it without --allow-lowp-resume)
// Transformed files keep the configuration and settings metadata (cli/model_config.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/crc32.h"
#include "ckpt/safetensors.h"
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
} ckpt;

static fsdp_status ckpt_open(const char *dir, ckpt *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/DONE", dir);
    if (access(path, F_OK) != 0)
        return fsdp_error(FSDP_ERR_MISSING, "%s: no completion marker DONE: not a complete checkpoint", dir);
    snprintf(path, sizeof path, "%s/index.safetensors", dir);
    FSDP_CHECK(st_open(path, &c->index));
    const char *w = st_metadata(c->index, "world_size");
    c->world = w ? atoi(w) : 0;
    if (c->world <= 0) return fsdp_error(FSDP_ERR_FORMAT, "%s: index has no world_size", path);
    c->shards = calloc((size_t)c->world, sizeof(st_file *));
    return c->shards ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
}

static void ckpt_close(ckpt *c) {
    for (int r = 0; c->shards && r < c->world; r++) st_close(c->shards[r]);
    free(c->shards);
    st_close(c->index);
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

// A whole tensor (a parameter, or with prefix its exp_avg/exp_avg_sq) as fp32. out: (numel,) malloc'ed
static fsdp_status read_tensor(ckpt *c, const char *prefix, const char *name, float **out, int *ndim,
                               int64_t *shape, int64_t *numel) {
    char key[512];
    snprintf(key, sizeof key, "shape.%s", name);
    const st_entry *se = st_find(c->index, key);
    int64_t d1[1] = {se ? se->shape[0] : 0};
    int32_t sh[8] = {0};
    FSDP_CHECK(st_read_i32(c->index, key, sh, 1, d1));
    *ndim = (int)d1[0];
    *numel = 1;
    for (int d = 0; d < *ndim; d++) *numel *= (shape[d] = sh[d]);
    snprintf(key, sizeof key, "pieces.%s", name);
    const st_entry *pe = st_find(c->index, key);
    if (!pe || pe->ndim != 2) return fsdp_error(FSDP_ERR_FORMAT, "%s: no pieces for '%s'", c->dir, name);
    int rows = (int)pe->shape[0];
    int32_t *tab = malloc(sizeof(int32_t) * (size_t)(3 * rows + 1));
    float *buf = malloc(sizeof(float) * (size_t)(*numel ? *numel : 1));
    if (!tab || !buf) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    int64_t ts[2] = {rows, 3};
    fsdp_status st = st_read_i32(c->index, key, tab, 2, ts);
    char tname[512];
    snprintf(tname, sizeof tname, "%s%s", prefix, name);
    for (int r = 0; r < rows && st == FSDP_OK; r++) {
        int rank = tab[3 * r];
        if (rank < 0 || rank >= c->world) {
            st = fsdp_error(FSDP_ERR_FORMAT, "%s: '%s' names shard %d", c->dir, name, rank);
            break;
        }
        if (!c->shards[rank]) {
            char path[4200];
            snprintf(path, sizeof path, "%s/shard_%05d.safetensors", c->dir, rank);
            st = st_open(path, &c->shards[rank]);
            if (st != FSDP_OK) break;
        }
        int64_t pshape[1] = {tab[3 * r + 2]};
        st = st_read_f32_range(c->shards[rank], tname, buf + tab[3 * r + 1], 1, pshape, 0, pshape[0]);
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
    if (rank < 0 || rank >= c->world) return 0;
    if (!c->shards[rank]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_%05d.safetensors", c->dir, rank);
        if (st_open(path, &c->shards[rank]) != FSDP_OK) return 0;
    }
    snprintf(key, sizeof key, "exp_avg.%s", name);
    return st_find(c->shards[rank], key) != NULL;
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
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {  // a plain safetensors file
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

static int cmd_consolidate(const char *dir, const char *out) {
    ckpt c;
    if (ckpt_open(dir, &c) != FSDP_OK) return fail();
    const char *names[4096];
    int n = param_names(&c, names, 4096);
    st_writer *w = st_writer_new_stream(out);
    fsdp_status st = w ? copy_model_metadata(c.index, w) : FSDP_ERR_NOMEM;
    for (int i = 0; i < n && st == FSDP_OK; i++) {  // header: every tensor's name and shape
        char key[512];
        snprintf(key, sizeof key, "shape.%s", names[i]);
        int64_t d1[1] = {st_find(c.index, key)->shape[0]}, sh64[8];
        int32_t sh[8];
        st = st_read_i32(c.index, key, sh, 1, d1);
        for (int d = 0; d < d1[0]; d++) sh64[d] = sh[d];
        if (st == FSDP_OK) st = st_writer_add(w, names[i], ST_F32, (int)d1[0], sh64, NULL);
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

// Rewrites DIR into OUT_DIR for `world` ranks (tensor i split evenly: rank q holds
// [q*n/world, (q+1)*n/world)), storing tensors as dtype; the optimizer moments come along.
static int cmd_rewrite(const char *dir, const char *out, int world, st_dtype dtype) {
    ckpt c;
    if (ckpt_open(dir, &c) != FSDP_OK) return fail();
    if (world <= 0) world = c.world;
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: %s: cannot create: %s\n", prog, out, strerror(errno));
        ckpt_close(&c);
        return 1;
    }
    const char *names[4096];
    int n = param_names(&c, names, 4096);
    const char *prefixes[] = {"", "exp_avg.", "exp_avg_sq."};
    int have_opt = 0;
    for (int r = 0; r < c.world && !have_opt; r++) {  // moments present when any shard has them
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_%05d.safetensors", dir, r);
        st_file *f = NULL;
        if (st_open(path, &f) == FSDP_OK) {
            for (int i = 0; i < st_count(f) && !have_opt; i++) have_opt = !strncmp(st_entry_at(f, i)->name, "exp_avg.", 8);
            st_close(f);
        }
    }
    st_writer **ws = calloc((size_t)world, sizeof(st_writer *));
    int64_t *numels = calloc((size_t)n + 1, sizeof(int64_t));
    int *kinds = calloc((size_t)n + 1, sizeof(int));  // (n,) 3 with moments, 1 without (frozen parameters)
    fsdp_status st = ws && numels && kinds ? FSDP_OK : FSDP_ERR_NOMEM;
    for (int i = 0; i < n && st == FSDP_OK; i++) kinds[i] = have_opt && has_moments(&c, names[i]) ? 3 : 1;
    for (int i = 0; i < n && st == FSDP_OK; i++) {
        char key[512];
        snprintf(key, sizeof key, "shape.%s", names[i]);
        int64_t d1[1] = {st_find(c.index, key)->shape[0]};
        int32_t sh[8];
        st = st_read_i32(c.index, key, sh, 1, d1);
        numels[i] = 1;
        for (int d = 0; d < d1[0]; d++) numels[i] *= sh[d];
    }
    for (int q = 0; q < world && st == FSDP_OK; q++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/shard_%05d.safetensors", out, q);
        ws[q] = st_writer_new_stream(path);
        st = ws[q] ? st_writer_add_metadata(ws[q], "format", st_metadata(c.index, "format")) : FSDP_ERR_NOMEM;
        for (int i = 0; i < n && st == FSDP_OK; i++)
            for (int k = 0; k < kinds[i] && st == FSDP_OK; k++) {
                int64_t lo = numels[i] * q / world, hi = numels[i] * (q + 1) / world, shape[1] = {hi - lo};
                if (hi <= lo) continue;
                char tname[512];
                snprintf(tname, sizeof tname, "%s%s", prefixes[k], names[i]);
                st = st_writer_add(ws[q], tname, dtype, 1, shape, NULL);
            }
        if (st == FSDP_OK) st = st_writer_stream_begin(ws[q]);
    }
    for (int i = 0; i < n && st == FSDP_OK; i++)
        for (int k = 0; k < kinds[i] && st == FSDP_OK; k++) {
            float *t = NULL;
            int ndim;
            int64_t shape[8], numel;
            st = read_tensor(&c, prefixes[k], names[i], &t, &ndim, shape, &numel);
            for (int q = 0; q < world && st == FSDP_OK; q++) {
                int64_t lo = numel * q / world, hi = numel * (q + 1) / world;
                if (hi <= lo) continue;
                if (dtype == ST_F32) {
                    st = st_writer_stream_data(ws[q], t + lo, sizeof(float) * (size_t)(hi - lo));
                } else {
                    fsdp_bf16 *b = malloc(sizeof(fsdp_bf16) * (size_t)(hi - lo));
                    if (!b) st = FSDP_ERR_NOMEM;
                    else fsdp_f32_to_bf16_array(b, t + lo, (size_t)(hi - lo));
                    if (st == FSDP_OK) st = st_writer_stream_data(ws[q], b, sizeof(fsdp_bf16) * (size_t)(hi - lo));
                    free(b);
                }
            }
            free(t);
        }
    for (int q = 0; q < world; q++)
        if (ws[q]) {
            if (st == FSDP_OK) st = st_writer_stream_commit(ws[q]);
            else st_writer_free(ws[q]);
        }
    // the index: shapes, the new pieces, the old metadata with the new world size and checksums
    char path[4200];
    snprintf(path, sizeof path, "%s/index.safetensors", out);
    st_writer *iw = st == FSDP_OK ? st_writer_new(path) : NULL;
    int32_t *tables = calloc((size_t)n * (size_t)world * 3 + 1, sizeof(int32_t));
    int32_t *shapes = calloc((size_t)n * 8 + 1, sizeof(int32_t));
    // (n, 8 + 3 * world): each tensor's int64 shape and new pieces; the writer reads them at the commit
    int64_t *kept = calloc((size_t)n * (size_t)(8 + 3 * world) + 1, sizeof(int64_t));
    if (st == FSDP_OK && (!iw || !tables || !shapes || !kept)) st = FSDP_ERR_NOMEM;
    const char *keep[] = {"format", "strategy", "step", "seed", "global_batch", "adam_step"};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0] && st == FSDP_OK; k++)
        if (st_metadata(c.index, keep[k])) st = st_writer_add_metadata(iw, keep[k], st_metadata(c.index, keep[k]));
    char val[64];
    snprintf(val, sizeof val, "%d", world);
    if (st == FSDP_OK) st = st_writer_add_metadata(iw, "world_size", val);
    if (st == FSDP_OK) st = st_writer_add_metadata(iw, "dtype", dtype == ST_F32 ? "fp32" : "bf16");
    if (st == FSDP_OK) st = copy_model_metadata(c.index, iw);
    for (int q = 0; q < world && st == FSDP_OK; q++) {
        char key[64], shard[4200];
        uint32_t crc = 0;
        snprintf(shard, sizeof shard, "%s/shard_%05d.safetensors", out, q);
        st = fsdp_crc32_file(shard, &crc);
        snprintf(key, sizeof key, "crc32.shard_%05d.safetensors", q);
        snprintf(val, sizeof val, "%08x", crc);
        if (st == FSDP_OK) st = st_writer_add_metadata(iw, key, val);
    }
    for (int i = 0; i < n && st == FSDP_OK; i++) {
        char key[512];
        snprintf(key, sizeof key, "shape.%s", names[i]);
        int64_t d1[1] = {st_find(c.index, key)->shape[0]};
        int32_t *sh = shapes + 8 * i;
        st = st_read_i32(c.index, key, sh, 1, d1);
        int64_t *sh64 = kept + (size_t)i * (size_t)(8 + 3 * world), *rows = sh64 + 8;
        int nr = 0;
        for (int d = 0; d < d1[0]; d++) sh64[d] = sh[d];
        for (int q = 0; q < world; q++) {
            int64_t lo = numels[i] * q / world, hi = numels[i] * (q + 1) / world;
            if (hi <= lo) continue;
            rows[3 * nr] = q;
            rows[3 * nr + 1] = lo;
            rows[3 * nr + 2] = hi - lo;
            nr++;
        }
        int64_t ts1[1] = {d1[0]}, ts2[2] = {nr, 3};
        if (st == FSDP_OK) st = st_writer_add(iw, key, ST_I64, 1, ts1, sh64);
        snprintf(key, sizeof key, "pieces.%s", names[i]);
        if (st == FSDP_OK) st = st_writer_add(iw, key, ST_I64, 2, ts2, rows);
    }
    if (iw) st = st == FSDP_OK ? st_writer_commit(iw) : (st_writer_free(iw), st);
    ckpt_close(&c);
    free(ws);
    free(numels);
    free(kinds);
    free(tables);
    free(shapes);
    free(kept);
    if (st != FSDP_OK) return fail();
    snprintf(path, sizeof path, "%s/DONE", out);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "complete\n") < 0 || fclose(f) != 0) {
        fprintf(stderr, "%s: %s: cannot write the completion marker\n", prog, path);
        return 1;
    }
    printf("%s: %d tensors for %d rank(s), %s\n", out, n, world, st_dtype_name(dtype));
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: %s info DIR|FILE | verify DIR | consolidate DIR OUT.safetensors |\n"
                    "       reshard DIR OUT_DIR --world-size M | convert DIR OUT_DIR --dtype bf16|fp32\n", prog);
    return 2;
}

// `fsdp-ckpt SUBCOMMAND --help` (or -h anywhere after it): that subcommand's usage and what it does.
static const struct {
    const char *name, *args, *help;
} subcommands[] = {
    {"info", "DIR|FILE.safetensors", "Prints a checkpoint's or file's layout, tensor names, shapes and dtypes, world size, step,\n"
                                     "and the model configuration and settings the run recorded."},
    {"verify", "DIR", "Checks the completion marker DONE and every shard's CRC-32."},
    {"consolidate", "DIR OUT.safetensors", "Writes one full state dict with PyTorch names (streaming: memory about one tensor)."},
    {"reshard", "DIR OUT_DIR --world-size M", "Rewrites the checkpoint for M ranks (each tensor split evenly).\n\n"
                                              "flags:\n  --world-size M\n      ranks of the rewritten checkpoint"},
    {"convert", "DIR OUT_DIR --dtype bf16|f32", "Rewrites the checkpoint with bf16 (or f32) tensors; bf16 is an export: --resume\n"
                                                "refuses it without --allow-lowp-resume.\n\n"
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
        return cmd_rewrite(argv[2], argv[3], (int)m, ST_F32);
    }
    if (argc == 6 && !strcmp(argv[1], "convert") && !strcmp(argv[4], "--dtype")) {
        if (strcasecmp(argv[5], "bf16") && strcasecmp(argv[5], "fp32")) {
            fprintf(stderr, "%s: --dtype: expected bf16 or fp32, got '%s'\n", prog, argv[5]);
            return 2;
        }
        return cmd_rewrite(argv[2], argv[3], 0, strcasecmp(argv[5], "bf16") ? ST_F32 : ST_BF16);
    }
    return usage();
}
