// safetensors_writer.c: the atomic safetensors writer (temporary file, fsync, rename), whole or streamed.
#include "ckpt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/st_alloc.h"

// ---------------------------------------------------------------- writer

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;  // (bytes,), not owned
    uint64_t bytes;
} st_wentry;

struct st_writer {
    char *path;
    int n, cap;
    st_wentry *e;  // (n,) in insertion order
    int nmeta, metacap;
    char **meta;   // (2*nmeta,) key, value, key, value, ...
    int streaming; // data comes later through st_writer_stream_data, in entry order
    FILE *fp;      // streaming: the open temporary file
    char *tmp;     // streaming: its name
    uint64_t expected, written;
};

// Returns a writer for path, or NULL (with fsdp_error set) when out of memory.
st_writer *st_writer_new(const char *path) {
    st_writer *w = calloc(1, sizeof *w);
    if (w && !(w->path = dupstr(path))) {
        free(w);
        w = NULL;
    }
    if (!w) fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    return w;
}

// Frees the writer without writing anything (NULL is fine).
void st_writer_free(st_writer *w) {
    if (w && w->fp) {  // a stream abandoned mid-way: drop its temporary file
        fclose(w->fp);
        unlink(w->tmp);
        w->fp = NULL;
    }
    if (w) free(w->tmp);
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < 2 * w->nmeta; i++) free(w->meta[i]);
    free(w->e);
    free(w->meta);
    free(w->path);
    free(w);
}

// Queues a tensor (name and shape copied, data borrowed). shape: (ndim,) data: (numel,) of dtype
fsdp_status st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                          const void *data) {
    FSDP_ASSERT(w && name);
    size_t len = strlen(name);
    if (len == 0 || len >= ST_NAME_MAX || !strcmp(name, "__metadata__"))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: invalid tensor name '%.64s' (empty, reserved or longer "
                          "than %d bytes)", w->path, name, ST_NAME_MAX - 1);
    if (st_dtype_size(dtype) == 0 || ndim < 0 || ndim > ST_MAX_DIMS)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: tensor '%s': invalid dtype %d or ndim %d", w->path, name,
                          (int)dtype, ndim);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: tensor '%s' has a negative dimension", w->path, name);
        numel *= (uint64_t)shape[i];
    }
    if (numel && !data && !w->streaming)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: tensor '%s' has no data", w->path, name);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->e[i].name, name))
            return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: duplicate tensor '%s'", w->path, name);
    st_wentry *grown = grow(w->e, &w->cap, w->n + 1, sizeof *grown);
    char *copy = dupstr(name);
    if (grown) w->e = grown;
    if (!grown || !copy) {
        free(copy);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->path);
    }
    st_wentry *e = &w->e[w->n++];
    *e = (st_wentry){.name = copy, .dtype = dtype, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->bytes = numel * st_dtype_size(dtype);
    return FSDP_OK;
}

// Queues a "__metadata__" entry (both strings copied).
fsdp_status st_writer_add_metadata(st_writer *w, const char *key, const char *value) {
    FSDP_ASSERT(w && key && value);
    for (int i = 0; i < w->nmeta; i++)
        if (!strcmp(w->meta[2 * i], key))
            return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: duplicate metadata key '%.64s'", w->path, key);
    char **m = grow(w->meta, &w->metacap, 2 * w->nmeta + 2, sizeof *m);
    if (m) w->meta = m;
    char *k = dupstr(key), *v = dupstr(value);
    if (!m || !k || !v) {
        free(k);
        free(v);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->meta[2 * w->nmeta] = k;
    w->meta[2 * w->nmeta++ + 1] = v;
    return FSDP_OK;
}

// The length (2..4) of the valid UTF-8 sequence that starts at p (NUL-terminated, p[0] >= 0x80), or 0
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
static int utf8_len(const unsigned char *p) {
    unsigned char b = p[0], lo = 0x80, hi = 0xBF;  // lo, hi: the range of the second byte
    int len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
    for (int i = 1; i < len; i++)
        if (i == 1 ? (p[i] < lo || p[i] > hi) : (p[i] < 0x80 || p[i] > 0xBF)) return 0;
    return len;
}

// Writes s to fp as a quoted, escaped JSON string. The header must be UTF-8 (the reader checks): a byte
// that is not part of a valid UTF-8 sequence (a --prompt or a path holding one) is written as \u00XX.
static void put_json_str(FILE *fp, const char *s) {
    fputc('"', fp);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int len = c >= 0x80 ? utf8_len((const unsigned char *)s) : 1;
        if (c == '"' || c == '\\') fprintf(fp, "\\%c", c);
        else if (c < 0x20 || len == 0) fprintf(fp, "\\u%04x", c);
        else {
            fwrite(s, 1, (size_t)len, fp);
            s += len - 1;
        }
    }
    fputc('"', fp);
}

// Builds the JSON header into a malloc'd *out of *len bytes (free it even on failure), padded with
// spaces so that 8 + *len is a multiple of 8 and the data section stays aligned. 0 when out of memory.
static int build_header(const st_writer *w, char **out, size_t *len) {
    FILE *fp = open_memstream(out, len);
    if (!fp) return 0;
    fputs(w->nmeta ? "{\"__metadata__\":{" : "{", fp);
    for (int i = 0; i < w->nmeta; i++) {
        fputs(i ? "," : "", fp);
        put_json_str(fp, w->meta[2 * i]);
        fputc(':', fp);
        put_json_str(fp, w->meta[2 * i + 1]);
    }
    fputs(w->nmeta ? "}" : "", fp);
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const st_wentry *e = &w->e[i];
        fputs(i || w->nmeta ? "," : "", fp);
        put_json_str(fp, e->name);
        fprintf(fp, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(e->dtype));
        for (int d = 0; d < e->ndim; d++) fprintf(fp, "%s%" PRId64, d ? "," : "", e->shape[d]);
        fprintf(fp, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + e->bytes);
        off += e->bytes;
    }
    fputc('}', fp);
    int ok = fflush(fp) == 0;  // makes *len current
    if (ok) fprintf(fp, "%*s", (int)((8 - *len % 8) % 8), "");
    ok = !ferror(fp) && ok;
    return fclose(fp) == 0 && ok;
}

// fsyncs the directory holding path so that the rename is durable (best effort).
static void fsync_parent_dir(const char *path) {
    char *dir = dupstr(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    if (slash) slash[slash == dir] = 0;  // "/x" -> "/", "a/b/x" -> "a/b"
    int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

// Writes the whole file to tmp, fsyncs it and renames it over w->path; removes tmp on failure.
static fsdp_status commit_impl(const st_writer *w, const char *tmp) {
    char *hdr = NULL;
    size_t hlen = 0;
    if (!build_header(w, &hdr, &hlen)) {
        free(hdr);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory building the header", w->path);
    }
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        int err = errno;
        free(hdr);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot create %s: %s", w->path, tmp, strerror(err));
    }
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(lenbuf, 1, 8, fp) == 8 && fwrite(hdr, 1, hlen, fp) == hlen;
    for (int i = 0; ok && i < w->n; i++)
        ok = w->e[i].bytes == 0 || fwrite(w->e[i].data, 1, w->e[i].bytes, fp) == w->e[i].bytes;
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int err = ok ? 0 : errno;
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    free(hdr);
    const char *what = ok ? "cannot rename the temporary file over it" : "write failed";
    if (ok && rename(tmp, w->path) == 0) {
        fsync_parent_dir(w->path);
        return FSDP_OK;
    }
    if (ok) err = errno;
    unlink(tmp);  // unlink, not remove: never delete a directory someone else put there
    return fsdp_error(FSDP_ERR_IO, "%s: %s: %s", w->path, what, strerror(err ? err : EIO));
}

// Writes the file atomically ("<path>.tmp.<pid>", fsync, rename) and frees w whatever happens.
fsdp_status st_writer_commit(st_writer *w) {
    FSDP_ASSERT(w);
    size_t cap = strlen(w->path) + 32;
    char *tmp = malloc(cap);
    fsdp_status s = FSDP_ERR_NOMEM;
    if (tmp) {
        snprintf(tmp, cap, "%s.tmp.%ld", w->path, (long)getpid());
        s = commit_impl(w, tmp);
    } else {
        fsdp_error(s, "%s: out of memory", w->path);
    }
    free(tmp);
    st_writer_free(w);
    return s;
}

// ---------------------------------------------------------------- streaming writer

st_writer *st_writer_new_stream(const char *path) {
    st_writer *w = st_writer_new(path);
    if (w) w->streaming = 1;
    return w;
}

fsdp_status st_writer_stream_begin(st_writer *w) {
    FSDP_ASSERT(w && w->streaming && !w->fp);
    char *hdr = NULL;
    size_t hlen = 0;
    if (!build_header(w, &hdr, &hlen)) {
        free(hdr);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory building the header", w->path);
    }
    size_t cap = strlen(w->path) + 32;
    w->tmp = malloc(cap);
    if (!w->tmp) {
        free(hdr);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->path);
    }
    snprintf(w->tmp, cap, "%s.tmp.%ld", w->path, (long)getpid());
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) {
        free(hdr);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot create %s: %s", w->path, w->tmp, strerror(errno));
    }
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(lenbuf, 1, 8, w->fp) == 8 && fwrite(hdr, 1, hlen, w->fp) == hlen;
    free(hdr);
    w->expected = 0;
    for (int i = 0; i < w->n; i++) w->expected += w->e[i].bytes;
    return ok ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
}

fsdp_status st_writer_stream_data(st_writer *w, const void *data, size_t bytes) {
    FSDP_ASSERT(w && w->fp);
    if (w->written + bytes > w->expected)
        return fsdp_error(FSDP_ERR_INTERNAL, "%s: more data than the header announced", w->path);
    if (bytes && fwrite(data, 1, bytes, w->fp) != bytes)
        return fsdp_error(FSDP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    w->written += bytes;
    return FSDP_OK;
}

fsdp_status st_writer_stream_commit(st_writer *w) {
    FSDP_ASSERT(w && w->fp);
    fsdp_status s = FSDP_OK;
    if (w->written != w->expected)
        s = fsdp_error(FSDP_ERR_INTERNAL, "%s: %llu of %llu data bytes written", w->path,
                       (unsigned long long)w->written, (unsigned long long)w->expected);
    int ok = s == FSDP_OK && fflush(w->fp) == 0 && fsync(fileno(w->fp)) == 0;
    if (fclose(w->fp) != 0) ok = 0;
    w->fp = NULL;
    if (ok && rename(w->tmp, w->path) == 0) {
        fsync_parent_dir(w->path);
    } else {
        unlink(w->tmp);
        if (s == FSDP_OK) s = fsdp_error(FSDP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno ? errno : EIO));
    }
    st_writer_free(w);
    return s;
}
