// checkpoint.c: sharded checkpoints that load on any world size and strategy (format in fsdp.h).
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/crc32.h"
#include "ckpt/safetensors.h"
#include "core/alloc.h"
#include "core/fault_inject.h"
#include "fsdp/fsdp_internal.h"

#define CKPT_FORMAT "fsdp.c sharded checkpoint v1"

// Whether this rank writes its pieces: replicas of a shard (NO_SHARD/DDP, HYBRID groups > 0) do not.
static int writes_pieces(const fsdp_state *s) {
    if (s->replicated) return fsdp_comm_rank(s->world) == 0;
    return s->replica_comm ? fsdp_comm_rank(s->replica_comm) == 0 : 1;
}

static void shard_file(char *buf, size_t cap, const char *dir, int rank) {
    snprintf(buf, cap, "%s/shard_%05d.safetensors", dir, rank);
}

// Every rank learns whether any rank failed; returns FSDP_OK only when none did.
static fsdp_status agree(fsdp_state *s, fsdp_status mine, const char *what) {
    double failed = mine != FSDP_OK;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    fsdp_status c = fsdp_all_reduce_double(s->world, &failed);
    if (c != FSDP_OK) return c;
    if (mine != FSDP_OK) return fsdp_error(mine, "%s", msg);
    return failed > 0 ? fsdp_error(FSDP_ERR_IO, "%s failed on another rank", what) : FSDP_OK;
}

// This rank's pieces of every parameter (and its AdamW moments), streamed from device memory through
// the bounded host staging: the header lists every tensor first, then the data follows in that order.
static fsdp_status write_shard(fsdp_state *s, const char *path) {
    st_writer *w = st_writer_new_stream(path);
    if (!w) return FSDP_ERR_NOMEM;
    fsdp_stage g;
    fsdp_status st = fsdp_stage_open(s, &g);
    if (st == FSDP_OK) st = st_writer_add_metadata(w, "format", CKPT_FORMAT);
    for (int pass = 0; pass < 2 && st == FSDP_OK; pass++) {  // 0: the header's entries, 1: their data
        for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
            const fsdp_unit *u = &s->units[ui];
            for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
                fsdp_piece pc = fsdp_piece_at(u, i);
                if (!pc.count) continue;
                const char *name = u->params[i]->name;
                int64_t shape[1] = {pc.count};
                const float *src[3] = {u->shard + pc.shard_pos, NULL, NULL};  // (count,) device each
                const char *prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
                if (s->have_opt && !u->params[i]->frozen) {  // frozen parameters have no moments
                    src[1] = s->opt.m + u->opt_offset + pc.shard_pos;
                    src[2] = s->opt.v + u->opt_offset + pc.shard_pos;
                }
                for (int t = 0; t < 3 && src[t] && st == FSDP_OK; t++) {
                    char key[NN_NAME_MAX + 32];
                    snprintf(key, sizeof key, "%s%s", prefix[t], name);
                    if (pass == 0) {
                        st = st_writer_add(w, key, ST_F32, 1, shape, NULL);
                    } else {
                        st = fsdp_stage_write(&g, w, src[t], pc.count);
                    }
                }
            }
        }
        if (pass == 0 && st == FSDP_OK) st = st_writer_stream_begin(w);
    }
    fsdp_stage_close(&g);
    if (st != FSDP_OK) {
        st_writer_free(w);
        return st;
    }
    return st_writer_stream_commit(w);
}

// The run the checkpoint belongs to (ckpt/ckpt_dir.h): its id, when it has one, and the step the
// saving process started from.
static fsdp_status add_lineage(st_writer *w, const fsdp_trainer_state *ts) {
    char val[32];
    if (ts->run_id[0]) FSDP_CHECK(st_writer_add_metadata(w, FSDP_CKPT_RUN_KEY, ts->run_id));
    snprintf(val, sizeof val, "%lld", (long long)ts->resumed_from);
    return st_writer_add_metadata(w, FSDP_CKPT_RESUMED_KEY, val);
}

// rank 0: shapes, every writer's pieces (computed from the layout), trainer state and checksums
static fsdp_status write_index(fsdp_state *s, const char *dir, const fsdp_trainer_state *ts, const uint32_t *crcs,
                               const int *writers) {
    char path[4096], key[NN_NAME_MAX + 32], val[64];
    snprintf(path, sizeof path, "%s/index.safetensors", dir);
    st_writer *w = st_writer_new(path);
    if (!w) return FSDP_ERR_NOMEM;
    int N = fsdp_comm_size(s->world), G = s->replicated ? 1 : fsdp_comm_size(s->shard_comm);
    int np = s->model.params->count;
    int64_t *tables = calloc((size_t)np * (size_t)(G + 4) * 3 + 1, sizeof(int64_t));
    int64_t *shapes = calloc((size_t)np * 4 + 1, sizeof(int64_t));
    fsdp_status st = (tables && shapes) ? FSDP_OK : FSDP_ERR_NOMEM;
    struct { const char *k; int64_t v; } meta[] = {
        {"world_size", N}, {"strategy", s->cfg.strategy}, {"step", ts->step}, {"seed", ts->seed},
        {"global_batch", ts->global_batch}, {"adam_step", s->have_opt ? s->opt.step : 0}};
    st = st == FSDP_OK ? st_writer_add_metadata(w, "format", CKPT_FORMAT) : st;
    for (size_t m = 0; m < sizeof meta / sizeof meta[0] && st == FSDP_OK; m++) {
        snprintf(val, sizeof val, "%lld", (long long)meta[m].v);
        st = st_writer_add_metadata(w, meta[m].k, val);
    }
    if (st == FSDP_OK) st = add_lineage(w, ts);
    if (st == FSDP_OK) st = fsdp_add_file_metadata(s, w);
    for (int r = 0; r < N && st == FSDP_OK; r++) {
        if (!writers[r]) continue;
        snprintf(key, sizeof key, "crc32.shard_%05d.safetensors", r);
        snprintf(val, sizeof val, "%08x", crcs[r]);
        st = st_writer_add_metadata(w, key, val);
    }
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        const fsdp_unit *u = &s->units[ui];
        for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
            const nn_param *p = u->params[i];
            int pi = (int)(p - s->model.params->items);
            int64_t *shape = shapes + (size_t)pi * 4, *rows = tables + (size_t)pi * (size_t)(G + 4) * 3;
            for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
            int64_t dims[2] = {p->ndim, 0};
            snprintf(key, sizeof key, "shape.%s", p->name);
            st = st_writer_add(w, key, ST_I64, 1, dims, shape);
            int n_rows = 0;
            for (int q = 0; q < G && st == FSDP_OK; q++) {  // shard-group rank q = world rank q of group 0
                fsdp_piece pc = fsdp_piece_of_rank(u, i, s->replicated ? 0 : q);
                if (!pc.count) continue;
                rows[3 * n_rows] = q;
                rows[3 * n_rows + 1] = pc.elem_begin;
                rows[3 * n_rows + 2] = pc.count;
                n_rows++;
            }
            int64_t tshape[2] = {n_rows, 3};
            snprintf(key, sizeof key, "pieces.%s", p->name);
            if (st == FSDP_OK) st = st_writer_add(w, key, ST_I64, 2, tshape, rows);
        }
    }
    st = st == FSDP_OK ? st_writer_commit(w) : (st_writer_free(w), st);
    free(tables);
    free(shapes);
    return st;
}

// DONE lists "<file> <crc32>" for the files rank 0 wrote (the index, or the full state dict and the
// optimizer file); shard files' checksums are in the index.
static fsdp_status write_marker(const char *dir, const char *const *files, int n) {
    char path[4096], tmp[4200], lines[1024] = "";
    for (int i = 0; i < n; i++) {
        char file[4200];
        uint32_t crc = 0;
        snprintf(file, sizeof file, "%s/%s", dir, files[i]);
        FSDP_CHECK(fsdp_crc32_file(file, &crc));
        size_t len = strlen(lines);
        snprintf(lines + len, sizeof lines - len, "%s %08x\n", files[i], crc);
    }
    snprintf(path, sizeof path, "%s/DONE", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(fsdp_fault_marker_full() ? "/dev/full" : tmp, "w");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot create the completion marker: %s", tmp, strerror(errno));
    // the first failing call's errno names the reason (ENOSPC, EIO, EDQUOT, ...)
    int err = 0;
    if (fprintf(f, "complete\n%s", lines) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot write the completion marker: %s", path, strerror(err));
    }
    return FSDP_OK;
}

// Whether a directory entry is a writer's temporary file ("<name>.tmp.<pid>", ckpt/safetensors.c):
// one left behind means that write was interrupted.
static int is_temporary(const char *name) { return strstr(name, ".tmp.") != NULL; }

// rank 0, before any rank writes into dir: creates it, or, when it exists (an earlier save of the same
// step), removes its DONE marker first, so that it reads as incomplete until this save has finished
// (a save killed half-way must never leave an old DONE over a mix of old and new files), and the
// temporary files of interrupted writes.
static fsdp_status prepare_dir(const char *dir) {
    if (mkdir(dir, 0755) == 0) return FSDP_OK;
    if (errno != EEXIST)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/DONE", dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot remove the old completion marker: %s", path, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return fsdp_error(FSDP_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));)
        if (is_temporary(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    return FSDP_OK;
}

// Muon's momentum is not in checkpoints yet (issue 47): a checkpoint without it would resume silently wrong.
static fsdp_status muon_refuses_checkpoint(const char *dir) {
    return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: checkpoints under --optimizer muon are not implemented yet (Muon's "
                      "momentum is not saved); train without --ckpt-dir / --resume, or with --optimizer adamw", dir);
}

fsdp_status fsdp_checkpoint_save(fsdp_state *s, const char *dir, const fsdp_trainer_state *ts) {
    if (s->muon) return muon_refuses_checkpoint(dir);
    int R = fsdp_comm_rank(s->world), N = fsdp_comm_size(s->world);
    fsdp_status st = FSDP_OK;
    if (R == 0) st = prepare_dir(dir);
    FSDP_CHECK(agree(s, st, "creating the checkpoint directory"));
    char path[4096];
    shard_file(path, sizeof path, dir, R);
    int mine_writes = writes_pieces(s);
    uint32_t crc = 0;
    if (mine_writes) {
        if (fsdp_fault_torn_shard(ts->step, R)) {  // test hook: killed half-way through writing the shard
            char tmp[4200];                        // (the writer's temporary name, as st_writer_commit's)
            snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
            if (write_shard(s, tmp) == FSDP_OK) fsdp_fault_tear_and_die(tmp);
        }
        st = write_shard(s, path);
        if (st == FSDP_OK) st = fsdp_crc32_file(path, &crc);
    }
    FSDP_CHECK(agree(s, st, "writing shards"));
    if (fsdp_fault_crash_in_save(ts->step)) fsdp_fault_die();  // test hook: kill -9 after the shards
    uint32_t *crcs = calloc((size_t)N, sizeof(uint32_t));
    float *flags = calloc((size_t)N, sizeof(float));
    int *writers = calloc((size_t)N, sizeof(int));
    float flag = (float)mine_writes, crc_bits;
    memcpy(&crc_bits, &crc, sizeof crc);
    st = crcs && flags && writers ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (st == FSDP_OK) st = fsdp_all_gather(s->world, &crc_bits, crcs, 1, FSDP_F32);  // raw bits: a copy
    if (st == FSDP_OK) st = fsdp_all_gather(s->world, &flag, flags, 1, FSDP_F32);
    for (int r = 0; st == FSDP_OK && r < N; r++) writers[r] = flags[r] != 0.0f;
    if (st == FSDP_OK && R == 0) st = write_index(s, dir, ts, crcs, writers);
    free(crcs);
    free(flags);
    free(writers);
    FSDP_CHECK(agree(s, st, "writing the index"));
    static const char *const written[] = {"index.safetensors"};
    if (R == 0) st = write_marker(dir, written, 1);  // last, after every rank's files are complete
    return agree(s, st, "writing the completion marker");
}

static fsdp_status save_moments(fsdp_state *s, const char *path, const fsdp_trainer_state *ts) {
    int R = fsdp_comm_rank(s->world);
    float *flat = fsdp_alloc_unit_buffer(s);  // (largest padded,) device
    if (!flat) return FSDP_ERR_NOMEM;
    fsdp_stage g = {s, NULL};
    st_writer *w = NULL;
    fsdp_status st = FSDP_OK, cs = FSDP_OK;
    static const char *kinds[2] = {"exp_avg.", "exp_avg_sq."};
    if (R == 0) st = fsdp_stage_open(s, &g);
    if (R == 0 && st == FSDP_OK) {
        w = st_writer_new_stream(path);
        st = w ? st_writer_add_metadata(w, "format", "fsdp.c full checkpoint v1") : FSDP_ERR_NOMEM;
        char val[64];
        struct { const char *k; int64_t v; } meta[] = {
            {"world_size", fsdp_comm_size(s->world)}, {"strategy", s->cfg.strategy}, {"step", ts->step},
            {"seed", ts->seed}, {"global_batch", ts->global_batch}, {"adam_step", s->opt.step}};
        for (size_t m = 0; m < sizeof meta / sizeof meta[0] && st == FSDP_OK; m++) {
            snprintf(val, sizeof val, "%lld", (long long)meta[m].v);
            st = st_writer_add_metadata(w, meta[m].k, val);
        }
        if (st == FSDP_OK) st = add_lineage(w, ts);
        if (st == FSDP_OK) st = fsdp_add_file_metadata(s, w);
        for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++)
            for (int k = 0; k < 2 && st == FSDP_OK; k++)
                for (int i = 0; i < s->units[ui].n_params && st == FSDP_OK; i++) {
                    const nn_param *p = s->units[ui].params[i];
                    char name[NN_NAME_MAX + 16];
                    if (p->frozen) continue;  // no moments
                    snprintf(name, sizeof name, "%s%s", kinds[k], p->name);
                    st = st_writer_add(w, name, ST_F32, p->ndim, p->shape, NULL);
                }
        if (st == FSDP_OK) st = st_writer_stream_begin(w);
    }
    for (int ui = 0; ui < s->n_units && cs == FSDP_OK; ui++)
        for (int k = 0; k < 2 && cs == FSDP_OK; k++) {
            const fsdp_unit *u = &s->units[ui];
            if (!u->grad_padded) continue;  // every parameter frozen (the same on every rank)
            cs = fsdp_gather_flat(s, u, (k ? s->opt.v : s->opt.m) + u->opt_offset, flat, 1);
            for (int i = 0; R == 0 && cs == FSDP_OK && st == FSDP_OK && i < u->n_params; i++)
                if (!u->params[i]->frozen) st = fsdp_stage_write(&g, w, flat + u->offsets[i], u->params[i]->numel);
        }
    if (w) st = (st == FSDP_OK && cs == FSDP_OK) ? st_writer_stream_commit(w) : (st_writer_free(w), st);
    fsdp_stage_close(&g);
    fsdp_dev_free(s->dev, flat);
    return cs != FSDP_OK ? cs : st;
}

fsdp_status fsdp_checkpoint_save_full(fsdp_state *s, const char *dir, const fsdp_trainer_state *ts) {
    if (s->muon) return muon_refuses_checkpoint(dir);
    int R = fsdp_comm_rank(s->world);
    if (!s->have_opt) return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: a full checkpoint needs the optimizer", dir);
    fsdp_status st = FSDP_OK;
    if (R == 0) st = prepare_dir(dir);
    FSDP_CHECK(agree(s, st, "creating the checkpoint directory"));
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FSDP_CHECK(fsdp_save_full(s, path, 0));  // agrees across ranks itself
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    FSDP_CHECK(agree(s, save_moments(s, path, ts), "writing the optimizer state"));
    static const char *const written[] = {"model.safetensors", "optimizer.safetensors"};
    if (R == 0) st = write_marker(dir, written, 2);
    return agree(s, st, "writing the completion marker");
}

// --------------------------------------------------------------------------------- loading

typedef struct {
    int n;
    st_file **files;  // (n,) opened (and checksum-verified) shard files, NULL until needed
} shard_cache;

static fsdp_status open_shard(const char *dir, const st_file *index, shard_cache *c, int rank, st_file **out) {
    if (rank < 0 || rank >= c->n) return fsdp_error(FSDP_ERR_FORMAT, "%s: index names shard %d of %d", dir, rank, c->n);
    if (!c->files[rank]) {
        char path[4096], key[64];
        shard_file(path, sizeof path, dir, rank);
        snprintf(key, sizeof key, "crc32.shard_%05d.safetensors", rank);
        const char *want = st_metadata(index, key);
        uint32_t crc = 0;
        FSDP_CHECK(fsdp_crc32_file(path, &crc));
        char have[16];
        snprintf(have, sizeof have, "%08x", crc);
        if (!want || strcmp(want, have) != 0)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: checksum mismatch (index %s, file %s): the file is damaged", path,
                              want ? want : "none", have);
        FSDP_CHECK(st_open(path, &c->files[rank]));
    }
    *out = c->files[rank];
    return FSDP_OK;
}

static int64_t meta_int(const st_file *f, const char *key, int64_t dflt) {
    const char *v = st_metadata(f, key);
    return v ? strtoll(v, NULL, 10) : dflt;
}

// Fills dst (count,) = elements [first, first+count) of `tensor` (a parameter, or its exp_avg/exp_avg_sq
// when prefix is set), from whichever saved pieces cover them.
static fsdp_status read_range(fsdp_stage *g, const char *dir, const st_file *index, shard_cache *c,
                              const char *prefix, const nn_param *p, const int64_t *rows, int n_rows, int64_t first,
                              int64_t count, float *dst) {
    char name[NN_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    int64_t covered = 0;
    for (int r = 0; r < n_rows; r++) {
        int64_t rank = rows[3 * r], b = rows[3 * r + 1], n = rows[3 * r + 2];
        int64_t lo = first > b ? first : b, hi = first + count < b + n ? first + count : b + n;
        if (lo >= hi) continue;
        st_file *f = NULL;
        FSDP_CHECK(open_shard(dir, index, c, (int)rank, &f));
        int64_t shape[1] = {n};
        FSDP_CHECK(fsdp_stage_read(g, f, name, 1, shape, lo - b, hi - lo, dst + (lo - first)));
        covered += hi - lo;
    }
    if (covered != count)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s': the checkpoint covers %lld of the %lld elements needed",
                          dir, name, (long long)covered, (long long)count);
    return FSDP_OK;
}

// Fills the device staging buffers shards (local numel,) and m, v (local trainable numel,) in unit order
// from the pieces saved (a unit's trainable segment comes first in its shard).
static fsdp_status load_into(fsdp_state *s, fsdp_stage *g, const char *dir, const st_file *index, float *shards,
                             float *m, float *v, int with_opt) {
    shard_cache cache = {(int)meta_int(index, "world_size", 0), NULL};
    if (cache.n <= 0) return fsdp_error(FSDP_ERR_FORMAT, "%s: index has no world_size", dir);
    cache.files = calloc((size_t)cache.n, sizeof(st_file *));
    if (!cache.files) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    fsdp_status st = FSDP_OK;
    int64_t base = 0;  // the unit's first element in shards (in m and v: its opt_offset)
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        const fsdp_unit *u = &s->units[ui];
        for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
            const nn_param *p = u->params[i];
            char key[NN_NAME_MAX + 32];
            snprintf(key, sizeof key, "shape.%s", p->name);
            const st_entry *se = st_find(index, key);
            int64_t shape[4] = {0}, dims[1] = {p->ndim};
            if (!se) {
                st = fsdp_error(FSDP_ERR_MISSING, "%s: the checkpoint has no tensor '%s'", dir, p->name);
                break;
            }
            if (se->ndim != 1 || se->shape[0] != p->ndim) {
                st = fsdp_error(FSDP_ERR_SHAPE, "%s: tensor '%s' has %lld dimensions in the checkpoint, the model %d",
                                dir, p->name, se->ndim == 1 ? (long long)se->shape[0] : -1LL, p->ndim);
                break;
            }
            int32_t sh32[4] = {0};
            st = st_read_i32(index, key, sh32, 1, dims);
            int same = 1;
            for (int d = 0; d < p->ndim; d++) {
                shape[d] = sh32[d];
                same &= shape[d] == p->shape[d];
            }
            if (st == FSDP_OK && !same) {
                char a[64], b[64];
                st = fsdp_error(FSDP_ERR_SHAPE, "%s: tensor '%s' has shape %s in the checkpoint, the model %s", dir,
                                p->name, fsdp_shape_str(p->ndim, shape, a, sizeof a),
                                fsdp_shape_str(p->ndim, p->shape, b, sizeof b));
            }
            snprintf(key, sizeof key, "pieces.%s", p->name);
            const st_entry *pe = st_find(index, key);
            if (st == FSDP_OK && (!pe || pe->ndim != 2 || pe->shape[1] != 3))
                st = fsdp_error(FSDP_ERR_FORMAT, "%s: index has no valid pieces for '%s'", dir, p->name);
            if (st != FSDP_OK) break;
            int n_rows = (int)pe->shape[0];
            int32_t *rows32 = malloc(sizeof(int32_t) * (size_t)(3 * n_rows + 1));
            int64_t *rows = malloc(sizeof(int64_t) * (size_t)(3 * n_rows + 1));
            int64_t tshape[2] = {n_rows, 3};
            st = rows && rows32 ? st_read_i32(index, key, rows32, 2, tshape) : FSDP_ERR_NOMEM;
            for (int r = 0; st == FSDP_OK && r < 3 * n_rows; r++) rows[r] = rows32[r];
            fsdp_piece pc = fsdp_piece_at(u, i);
            if (st == FSDP_OK && pc.count) {
                st = read_range(g, dir, index, &cache, "", p, rows, n_rows, pc.elem_begin, pc.count,
                                shards + base + pc.shard_pos);
                if (st == FSDP_OK && with_opt && !p->frozen)
                    st = read_range(g, dir, index, &cache, "exp_avg.", p, rows, n_rows, pc.elem_begin, pc.count,
                                    m + u->opt_offset + pc.shard_pos);
                if (st == FSDP_OK && with_opt && !p->frozen)
                    st = read_range(g, dir, index, &cache, "exp_avg_sq.", p, rows, n_rows, pc.elem_begin, pc.count,
                                    v + u->opt_offset + pc.shard_pos);
            }
            free(rows);
            free(rows32);
        }
        base += u->shard_numel;
    }
    for (int r = 0; r < cache.n; r++) st_close(cache.files[r]);
    free(cache.files);
    return st;
}

// A full checkpoint: every rank reads its pieces of each tensor from model.safetensors and
// optimizer.safetensors into the staging buffers.
static fsdp_status load_full_into(fsdp_state *s, fsdp_stage *g, const char *dir, st_file *model, st_file *optim,
                                  float *shards, float *m, float *v, int with_opt) {
    fsdp_status st = FSDP_OK;
    int64_t base = 0;  // as load_into
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        const fsdp_unit *u = &s->units[ui];
        for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
            const nn_param *p = u->params[i];
            fsdp_piece pc = fsdp_piece_at(u, i);
            if (!pc.count) continue;
            char name[NN_NAME_MAX + 16];
            st = fsdp_stage_read(g, model, p->name, p->ndim, p->shape, pc.elem_begin, pc.count,
                                 shards + base + pc.shard_pos);
            snprintf(name, sizeof name, "exp_avg.%s", p->name);
            if (st == FSDP_OK && with_opt && !p->frozen)
                st = fsdp_stage_read(g, optim, name, p->ndim, p->shape, pc.elem_begin, pc.count, m + u->opt_offset + pc.shard_pos);
            snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
            if (st == FSDP_OK && with_opt && !p->frozen)
                st = fsdp_stage_read(g, optim, name, p->ndim, p->shape, pc.elem_begin, pc.count, v + u->opt_offset + pc.shard_pos);
        }
        base += u->shard_numel;
    }
    (void)dir;
    return st;
}

// The error for a checkpoint without DONE, naming the files whose writing was interrupted, if any.
static fsdp_status incomplete(const char *dir) {
    char torn[1024] = "";
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(torn);
        if (is_temporary(e->d_name) && len + strlen(e->d_name) + 3 < sizeof torn)
            snprintf(torn + len, sizeof torn - len, "%s%s", len ? ", " : "", e->d_name);
    }
    if (d) closedir(d);
    return fsdp_error(FSDP_ERR_MISSING, "%s: no completion marker DONE: the checkpoint is incomplete%s%s%s", dir,
                      torn[0] ? " (interrupted, half-written: " : "", torn, torn[0] ? ")" : "");
}

fsdp_status fsdp_verify_marker(const char *dir) {
    fsdp_marker_file files[8];
    int n = 0;
    fsdp_status st = fsdp_ckpt_read_marker(dir, files, 8, &n);
    if (st == FSDP_ERR_MISSING) return incomplete(dir);
    FSDP_CHECK(st);
    for (int i = 0; i < n; i++) {
        char file[4200];
        uint32_t crc = 0;
        snprintf(file, sizeof file, "%s/%s", dir, files[i].name);
        FSDP_CHECK(fsdp_crc32_file(file, &crc));
        if (crc != files[i].crc)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: checksum mismatch (DONE %08x, file %08x): the file is damaged",
                              file, files[i].crc, crc);
    }
    return FSDP_OK;
}

fsdp_status fsdp_checkpoint_load(fsdp_state *s, const char *dir, fsdp_trainer_state *ts) {
    if (s->muon) return muon_refuses_checkpoint(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int full = access(path, F_OK) == 0;
    fsdp_status st = fsdp_verify_marker(dir);
    st_file *index = NULL, *model = NULL;
    snprintf(path, sizeof path, full ? "%s/optimizer.safetensors" : "%s/index.safetensors", dir);
    if (st == FSDP_OK) st = st_open(path, &index);  // (full: the optimizer file carries the metadata)
    if (st == FSDP_OK && !full &&
        (!st_metadata(index, "format") || strcmp(st_metadata(index, "format"), CKPT_FORMAT) != 0))
        st = fsdp_error(FSDP_ERR_FORMAT, "%s: not an fsdp.c sharded checkpoint index", path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st == FSDP_OK && full) st = st_open(path, &model);
    int64_t local = fsdp_local_numel(s), trainable = fsdp_local_grad_numel(s);
    int with_opt = s->have_opt;
    // device staging of everything this rank will hold: the live model is only touched once every
    // rank has read everything (all or nothing)
    size_t bytes = sizeof(float) * (size_t)(local ? local : 1), gbytes = sizeof(float) * (size_t)(trainable ? trainable : 1);
    float *shards = fsdp_dev_alloc(s->dev, bytes, FSDP_MEM_OTHER);              // (local,) device
    float *m = with_opt ? fsdp_dev_alloc(s->dev, gbytes, FSDP_MEM_OTHER) : NULL;  // (trainable,) device
    float *v = with_opt ? fsdp_dev_alloc(s->dev, gbytes, FSDP_MEM_OTHER) : NULL;  // (trainable,) device
    fsdp_stage g = {s, NULL};
    if (st == FSDP_OK && (!shards || (with_opt && (!m || !v)))) st = FSDP_ERR_NOMEM;
    if (st == FSDP_OK) st = fsdp_stage_open(s, &g);
    if (st == FSDP_OK)
        st = full ? load_full_into(s, &g, dir, model, index, shards, m, v, with_opt)
                  : load_into(s, &g, dir, index, shards, m, v, with_opt);
    fsdp_stage_close(&g);
    fsdp_trainer_state loaded;
    memset(&loaded, 0, sizeof loaded);
    int64_t adam_step = 0;
    if (st == FSDP_OK) {
        loaded.step = meta_int(index, "step", 0);
        loaded.seed = meta_int(index, "seed", 0);
        loaded.global_batch = meta_int(index, "global_batch", 0);
        loaded.resumed_from = meta_int(index, FSDP_CKPT_RESUMED_KEY, 0);
        const char *run = st_metadata(index, FSDP_CKPT_RUN_KEY);
        if (run && strlen(run) < sizeof loaded.run_id) snprintf(loaded.run_id, sizeof loaded.run_id, "%s", run);
        adam_step = meta_int(index, "adam_step", 0);
    }
    st_close(index);
    st_close(model);
    st = agree(s, st, "loading the checkpoint");
    if (st == FSDP_OK) {  // every rank read everything: only now touch the live model
        int64_t base = 0;
        for (int ui = 0; ui < s->n_units; ui++) {
            fsdp_unit *u = &s->units[ui];
            size_t ub = sizeof(float) * (size_t)u->shard_numel, gb = sizeof(float) * (size_t)u->grad_shard;
            fsdp_copy_d2d(s->compute, u->shard, shards + base, ub);
            if (with_opt && gb) {  // the trainable segment's moments (m and v are laid out as the optimizer's)
                fsdp_copy_d2d(s->compute, s->opt.m + u->opt_offset, m + u->opt_offset, gb);
                fsdp_copy_d2d(s->compute, s->opt.v + u->opt_offset, v + u->opt_offset, gb);
            }
            base += u->shard_numel;
        }
        if (with_opt) s->opt.step = adam_step;
        s->step = loaded.step;
        if (ts) *ts = loaded;
    }
    if (st == FSDP_OK) st = fsdp_stream_synchronize(s->compute);
    fsdp_dev_free(s->dev, shards);
    fsdp_dev_free(s->dev, m);
    fsdp_dev_free(s->dev, v);
    return st;
}
