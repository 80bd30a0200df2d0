// safetensors.c: a validating safetensors reader (pread on an open fd, or bytes in memory); the writer
// is safetensors_writer.c.
// The header is parsed by a small hand-written JSON parser that accepts what safetensors needs:
// objects, strings with escapes, non-negative integers and arrays of them.
#include "ckpt/safetensors.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "tensor/tensor.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format stores little-endian data)"
#endif

#define ST_MAX_HEADER 100000000ull  // 100 MB, the limit of the reference implementation
#define ST_NDTYPES 7

static const char *const dtype_names[ST_NDTYPES] = {"F32", "BF16", "F16", "I32", "I64", "U8", "F64"};
static const size_t dtype_sizes[ST_NDTYPES] = {4, 2, 2, 4, 8, 1, 8};

// The safetensors spelling of dt ("F32", "BF16", ...).
const char *st_dtype_name(st_dtype dt) { return (unsigned)dt < ST_NDTYPES ? dtype_names[dt] : "?"; }
// Bytes per element of dt (0 for an invalid value).
size_t st_dtype_size(st_dtype dt) { return (unsigned)dt < ST_NDTYPES ? dtype_sizes[dt] : 0; }

struct st_file {
    char *path;
    int fd;                    // -1 when opened from memory
    const unsigned char *mem;  // (file_size,) the bytes when opened with st_open_mem (not owned), else NULL
    uint64_t data_off;         // 8 + header length: where the data section starts
    uint64_t file_size;
    int n, cap;                // tensors
    st_entry *entries;         // (n,) in header order
    const st_entry **by_name;  // (n,) sorted by name, for st_find
    int nmeta, metacap;
    char **meta;               // (2*nmeta,) key, value, key, value, ...
};

#include "ckpt/st_alloc.h"

// Reads exactly n bytes at file offset off into dst. dst: (n,) bytes
static fsdp_status pread_full(const st_file *f, uint64_t off, void *dst, uint64_t n) {
    if (f->mem) {
        if (off > f->file_size || n > f->file_size - off)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: unexpected end of file at byte %" PRIu64,
                              f->path, f->file_size);
        if (n) memcpy(dst, f->mem + off, (size_t)n);
        return FSDP_OK;
    }
    unsigned char *p = dst;
    while (n > 0) {
        ssize_t r = pread(f->fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fsdp_error(FSDP_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
        if (r == 0)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: unexpected end of file at byte %" PRIu64,
                              f->path, off);
        p += r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return FSDP_OK;
}

// ---------------------------------------------------------------- JSON header parser

// Parses an array of at most `max` integers in [0, INT64_MAX] into out; *count = its length.
// out: (max,)
static fsdp_status juint_array(json_parser *p, uint64_t *out, int max, int *count) {
    *count = 0;
    FSDP_CHECK(json_expect(p, '['));
    if (json_peek(p) == ']') return json_expect(p, ']');
    for (;;) {
        if (*count == max) return json_error(p, "array too long");
        int c = json_peek(p);
        if (c < '0' || c > '9') return json_error(p, "expected a non-negative integer");
        uint64_t v = 0;
        for (; p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9'; p->pos++) {
            uint64_t d = (uint64_t)(p->s[p->pos] - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10) return json_error(p, "integer too large");
            v = v * 10 + d;
        }
        out[(*count)++] = v;
        if ((c = json_peek(p)) == ']') return json_expect(p, ']');
        if (c != ',') return json_error(p, "expected ',' or ']'");
        p->pos++;
    }
}

// Parses {"dtype": .., "shape": [..], "data_offsets": [begin, end]} into e (e->name already set).
static fsdp_status parse_tensor(json_parser *p, st_entry *e) {
    char *dtype = NULL, *key = NULL;
    int have_shape = 0, have_offsets = 0, first = 1;
    fsdp_status s = json_expect(p, '{');
    while (s == FSDP_OK && (s = json_key(p, &first, &key)) == FSDP_OK && key) {
        uint64_t v[ST_MAX_DIMS] = {0};
        int k = 0;
        if (!strcmp(key, "dtype") && !dtype) {
            s = json_string(p, &dtype);
        } else if (!strcmp(key, "shape") && !have_shape) {
            s = juint_array(p, v, ST_MAX_DIMS, &e->ndim);
            for (int i = 0; i < e->ndim; i++) e->shape[i] = (int64_t)v[i];
            have_shape = 1;
        } else if (!strcmp(key, "data_offsets") && !have_offsets) {
            s = juint_array(p, v, 2, &k);
            if (s == FSDP_OK && k != 2) s = json_error(p, "data_offsets must be [begin, end]");
            e->begin = v[0];
            e->end = v[1];
            have_offsets = 1;
        } else {
            s = fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' has an unexpected or repeated key '%.64s'",
                           p->path, e->name, key);
        }
        free(key);
    }
    if (s == FSDP_OK && (!dtype || !have_shape || !have_offsets))
        s = fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' lacks dtype, shape or data_offsets", p->path, e->name);
    int d = 0;
    while (s == FSDP_OK && d < ST_NDTYPES && strcmp(dtype, dtype_names[d])) d++;
    if (s == FSDP_OK && d == ST_NDTYPES)
        s = fsdp_error(FSDP_ERR_DTYPE, "%s: tensor '%s' has unsupported dtype '%.32s'", p->path, e->name, dtype);
    e->dtype = (st_dtype)d;
    free(dtype);
    return s;
}

// Parses the "__metadata__" object (string -> string) into f->meta.
static fsdp_status parse_metadata(json_parser *p, st_file *f) {
    int first = 1;
    FSDP_CHECK(json_expect(p, '{'));
    for (;;) {
        char *key, *val = NULL, **m = NULL;
        FSDP_CHECK(json_key(p, &first, &key));
        if (!key) return FSDP_OK;
        fsdp_status s = json_string(p, &val);
        if (s == FSDP_OK && st_metadata(f, key))
            s = fsdp_error(FSDP_ERR_FORMAT, "%s: duplicate metadata key '%.64s'", p->path, key);
        if (s == FSDP_OK && !(m = grow(f->meta, &f->metacap, 2 * f->nmeta + 2, sizeof *m)))
            s = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", p->path);
        if (s != FSDP_OK) {
            free(key);
            free(val);
            return s;
        }
        f->meta = m;
        f->meta[2 * f->nmeta] = key;
        f->meta[2 * f->nmeta++ + 1] = val;
    }
}

// 1 if s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF);
// else 0 with *bad = the offset of the first byte that is not. s: (n,)
static int utf8_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            ok = (u[i + k] & 0xC0) == 0x80;
            cp = cp << 6 | (u[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (!ok || cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
            *bad = i;
            return 0;
        }
        i += len;
    }
    return 1;
}

// Parses the whole header object into f->entries and f->meta.
static fsdp_status parse_header(json_parser *p, st_file *f) {
    int first = 1, have_meta = 0;
    FSDP_CHECK(json_expect(p, '{'));
    for (;;) {
        char *key;
        st_entry *grown;
        FSDP_CHECK(json_key(p, &first, &key));
        if (!key) break;
        fsdp_status s;
        if (!strcmp(key, "__metadata__")) {
            s = have_meta ? json_error(p, "repeated __metadata__") : parse_metadata(p, f);
            have_meta = 1;
        } else if (strlen(key) >= ST_NAME_MAX) {
            s = fsdp_error(FSDP_ERR_FORMAT, "%s: tensor name '%.64s...' is longer than %d bytes", p->path,
                           key, ST_NAME_MAX - 1);
        } else if (!(grown = grow(f->entries, &f->cap, f->n + 1, sizeof *grown))) {
            s = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", p->path);
        } else {
            f->entries = grown;
            st_entry *e = memset(&f->entries[f->n], 0, sizeof *e);
            strcpy(e->name, key);
            p->item = e->name;
            s = parse_tensor(p, e);
            p->item = NULL;
            f->n += s == FSDP_OK;
        }
        free(key);
        FSDP_CHECK(s);
    }
    return json_peek(p) == -1 ? FSDP_OK : json_error(p, "unexpected characters after the header object");
}

// ---------------------------------------------------------------- reader

// qsort comparators over arrays of const st_entry *.
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}
static int cmp_offsets(const void *a, const void *b) {  // by (begin, end)
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// Checks that the tensors, in (begin, end) order, tile the data section of data_size bytes exactly
// (the format's rule: the byte buffer is entirely indexed, no holes, no overlaps, nothing after the
// last tensor; a zero-size tensor sits where the previous tensor ends). by_offsets: (f->n,)
static fsdp_status check_coverage(const st_file *f, const st_entry **by_offsets, uint64_t data_size) {
    if (f->n > 0) qsort(by_offsets, (size_t)f->n, sizeof *by_offsets, cmp_offsets);
    uint64_t covered = 0;                     // bytes [0, covered) belong to the tensors seen so far
    const st_entry *prev = NULL;              // the tensor that ends at `covered`
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = by_offsets[i];
        if (e->begin < covered)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' (data_offsets [%" PRIu64 ", %" PRIu64 "]) overlaps "
                              "tensor '%s' (which ends at %" PRIu64 ")", f->path, e->name, e->begin, e->end,
                              prev->name, covered);
        if (e->begin > covered)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: gap in the data section: bytes [%" PRIu64 ", %" PRIu64 ") before "
                              "tensor '%s' belong to no tensor", f->path, covered, e->begin, e->name);
        covered = e->end;
        prev = e;
    }
    if (covered != data_size)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: the data section has %" PRIu64 " bytes but the tensors cover only "
                          "the first %" PRIu64 " (trailing bytes)", f->path, data_size, covered);
    return FSDP_OK;
}

// Checks every entry against its dtype, shape and the file size; rejects duplicates, overlaps, gaps
// and trailing bytes.
static fsdp_status validate(st_file *f) {
    uint64_t data_size = f->file_size - f->data_off;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->entries[i];
        if (e->end < e->begin)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' has data_offsets [%" PRIu64 ", %" PRIu64
                              "] with end < begin", f->path, e->name, e->begin, e->end);
        uint64_t numel = 1, esz = st_dtype_size(e->dtype);
        int overflow = 0;
        for (int d = 0; d < e->ndim; d++) {
            uint64_t dim = (uint64_t)e->shape[d];
            overflow |= dim && numel > UINT64_MAX / esz / dim;
            numel *= dim;
        }
        char sh[256];
        if (overflow || e->end - e->begin != numel * esz)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' has %" PRIu64 " bytes but dtype %s and shape "
                              "%s need %" PRIu64, f->path, e->name, e->end - e->begin, st_dtype_name(e->dtype),
                              fsdp_shape_str(e->ndim, e->shape, sh, sizeof sh), numel * esz);
        if (e->end > data_size)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: tensor '%s' ends at byte %" PRIu64 " of the "
                              "data section but it has only %" PRIu64 " bytes", f->path, e->name, e->end,
                              data_size);
    }
    if (f->n == 0) return check_coverage(f, NULL, data_size);
    f->by_name = malloc((size_t)f->n * sizeof *f->by_name);
    const st_entry **by_offsets = malloc((size_t)f->n * sizeof *by_offsets);
    if (!f->by_name || !by_offsets) {
        free(by_offsets);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", f->path);
    }
    for (int i = 0; i < f->n; i++) f->by_name[i] = by_offsets[i] = &f->entries[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    fsdp_status s = FSDP_OK;
    for (int i = 1; i < f->n && s == FSDP_OK; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
            s = fsdp_error(FSDP_ERR_FORMAT, "%s: duplicate tensor '%s'", f->path, f->by_name[i]->name);
    if (s == FSDP_OK) s = check_coverage(f, by_offsets, data_size);
    free(by_offsets);
    return s;
}

// Reads, parses and validates the header of f (file_size and the fd or mem already set).
static fsdp_status parse_file(st_file *f) {
    if (f->file_size < 8)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: file has %" PRIu64 " bytes, need at least 8",
                          f->path, f->file_size);
    unsigned char lenbuf[8];
    uint64_t hlen = 0;
    FSDP_CHECK(pread_full(f, 0, lenbuf, 8));
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
    if (hlen > ST_MAX_HEADER)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the 100 MB limit", f->path,
                          hlen);
    if (hlen + 8 > f->file_size)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: header says %" PRIu64 " bytes but file has %" PRIu64,
                          f->path, hlen, f->file_size);
    char *hdr = malloc(hlen + 1);
    if (!hdr) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory for the header", f->path);
    f->data_off = 8 + hlen;
    json_parser p = {hdr, (size_t)hlen, 0, f->path, "JSON header", "tensor", NULL};
    fsdp_status s = pread_full(f, 8, hdr, hlen);
    size_t bad = 0;
    if (s == FSDP_OK && (hlen == 0 || hdr[0] != '{'))  // the format allows no whitespace before it
        s = fsdp_error(FSDP_ERR_FORMAT, "%s: the header does not start with '{' (not a JSON object)", f->path);
    if (s == FSDP_OK && !utf8_valid(hdr, (size_t)hlen, &bad))
        s = fsdp_error(FSDP_ERR_FORMAT, "%s: the header is not valid UTF-8 (byte %zu)", f->path, bad);
    if (s == FSDP_OK) s = parse_header(&p, f);
    free(hdr);
    return s == FSDP_OK ? validate(f) : s;
}

// Opens f->path, then parses and validates it.
static fsdp_status open_impl(st_file *f) {
    struct stat st;
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &st) != 0)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", f->path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: not a regular file", f->path);
    f->file_size = (uint64_t)st.st_size;
    return parse_file(f);
}

// A zeroed st_file named `name` with no fd, or NULL (message set) when out of memory.
static st_file *new_file(const char *name) {
    st_file *f = calloc(1, sizeof *f);
    if (f) f->fd = -1;
    if (!f || !(f->path = dupstr(name))) {
        free(f);
        fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", name);
        return NULL;
    }
    return f;
}

// Opens and validates path; on success *out is an open file for st_close, else NULL.
fsdp_status st_open(const char *path, st_file **out) {
    *out = NULL;
    st_file *f = new_file(path);
    if (!f) return FSDP_ERR_NOMEM;
    fsdp_status s = open_impl(f);
    if (s == FSDP_OK) *out = f;
    else st_close(f);
    return s;
}

// Validates the `len` bytes at `bytes` as a safetensors file called `name` in messages. bytes: (len,)
fsdp_status st_open_mem(const char *name, const void *bytes, size_t len, st_file **out) {
    *out = NULL;
    st_file *f = new_file(name);
    if (!f) return FSDP_ERR_NOMEM;
    f->mem = bytes;
    f->file_size = len;
    fsdp_status s = parse_file(f);
    if (s == FSDP_OK) *out = f;
    else st_close(f);
    return s;
}

// Closes the fd and frees everything (NULL is fine).
void st_close(st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < 2 * f->nmeta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->by_name);
    free(f->entries);
    free(f->path);
    free(f);
}

// Accessors.
const char *st_path(const st_file *f) { return f->path; }
int st_count(const st_file *f) { return f->n; }
const st_entry *st_entry_at(const st_file *f, int i) { return i >= 0 && i < f->n ? &f->entries[i] : NULL; }

// Binary search over the name-sorted index.
const st_entry *st_find(const st_file *f, const char *name) {
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

// Linear search: metadata is small.
const char *st_metadata(const st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}

int st_metadata_count(const st_file *f) { return f->nmeta; }

const char *st_metadata_at(const st_file *f, int i, const char **value) {
    if (value) *value = f->meta[2 * i + 1];
    return f->meta[2 * i];
}

// Finds `name`, checks that its shape is exactly shape[ndim] and its dtype one of ok[0..nok).
static fsdp_status lookup(const st_file *f, const char *name, int ndim, const int64_t *shape,
                          const st_dtype *ok, int nok, const char *ok_names, const st_entry **out) {
    const st_entry *e = st_find(f, name);
    if (!e) return fsdp_error(FSDP_ERR_MISSING, "%s: missing tensor '%s'", f->path, name);
    int same = e->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
    char have[256], want[256];
    if (!same)
        return fsdp_error(FSDP_ERR_SHAPE, "%s: tensor '%s' has shape %s, expected %s", f->path, name,
                          fsdp_shape_str(e->ndim, e->shape, have, sizeof have),
                          fsdp_shape_str(ndim, shape, want, sizeof want));
    int i = 0;
    while (i < nok && ok[i] != e->dtype) i++;
    if (i == nok)
        return fsdp_error(FSDP_ERR_DTYPE, "%s: tensor '%s' has dtype %s, expected %s", f->path, name,
                          st_dtype_name(e->dtype), ok_names);
    *out = e;
    return FSDP_OK;
}

// Reads elements [first, first + numel) of e, converting to float (fdst) or int32 (idst) in chunks;
// exactly one of them is non-NULL. fdst, idst: (numel,)
static fsdp_status read_convert(const st_file *f, const st_entry *e, uint64_t first, uint64_t numel, float *fdst,
                                int32_t *idst) {
    size_t esz = st_dtype_size(e->dtype);
    uint64_t off = f->data_off + e->begin + first * esz;
    if (e->dtype == ST_F32 || e->dtype == ST_I32)  // already the destination type
        return pread_full(f, off, fdst ? (void *)fdst : (void *)idst, numel * esz);
    const uint64_t chunk = 1 << 16;  // elements per read
    if (numel == 0) return FSDP_OK;
    unsigned char *buf = malloc((numel < chunk ? numel : chunk) * esz);
    if (!buf) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory reading tensor '%s'", f->path, e->name);
    fsdp_status s = FSDP_OK;
    for (uint64_t i0 = 0; i0 < numel && s == FSDP_OK; i0 += chunk) {
        size_t m = (size_t)(numel - i0 < chunk ? numel - i0 : chunk);
        s = pread_full(f, off + i0 * esz, buf, m * esz);
        for (size_t j = 0; j < m && s == FSDP_OK; j++) {
            uint16_t h;
            int64_t v;
            double d;
            if (e->dtype == ST_BF16 || e->dtype == ST_F16) {
                memcpy(&h, buf + 2 * j, 2);
                fdst[i0 + j] = e->dtype == ST_BF16 ? fsdp_bf16_to_f32(h) : fsdp_f16_to_f32(h);
            } else if (e->dtype == ST_F64) {  // rounded to nearest (IEEE): beyond f32's range -> +-inf
                memcpy(&d, buf + 8 * j, 8);
                fdst[i0 + j] = (float)d;
            } else {  // I64
                memcpy(&v, buf + 8 * j, 8);
                if (v >= INT32_MIN && v <= INT32_MAX) idst[i0 + j] = (int32_t)v;
                else s = fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' element %" PRIu64 " = %" PRId64
                                    " does not fit in int32", f->path, e->name, i0 + j, v);
            }
        }
    }
    free(buf);
    return s;
}

// Reads an F32/BF16/F16/F64 tensor of exactly shape[ndim] as float. dst: (numel,)
fsdp_status st_read_f32(const st_file *f, const char *name, float *dst, int ndim, const int64_t *shape) {
    static const st_dtype ok[] = {ST_F32, ST_BF16, ST_F16, ST_F64};
    const st_entry *e;
    FSDP_CHECK(lookup(f, name, ndim, shape, ok, 4, "F32, BF16, F16 or F64", &e));
    return read_convert(f, e, 0, (e->end - e->begin) / st_dtype_size(e->dtype), dst, NULL);
}

// Reads elements [first, first + count) of an F32/BF16/F16/F64 tensor of exactly shape[ndim]. dst: (count,)
fsdp_status st_read_f32_range(const st_file *f, const char *name, float *dst, int ndim, const int64_t *shape,
                              int64_t first, int64_t count) {
    static const st_dtype ok[] = {ST_F32, ST_BF16, ST_F16, ST_F64};
    const st_entry *e;
    FSDP_CHECK(lookup(f, name, ndim, shape, ok, 4, "F32, BF16, F16 or F64", &e));
    uint64_t numel = (e->end - e->begin) / st_dtype_size(e->dtype);
    if (first < 0 || count < 0 || (uint64_t)(first + count) > numel)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: tensor '%s': elements [%lld, %lld) outside its %llu",
                          f->path, name, (long long)first, (long long)(first + count), (unsigned long long)numel);
    return read_convert(f, e, (uint64_t)first, (uint64_t)count, dst, NULL);
}

// Reads an I32/I64 tensor of exactly shape[ndim] as int32. dst: (numel,)
fsdp_status st_read_i32(const st_file *f, const char *name, int32_t *dst, int ndim, const int64_t *shape) {
    static const st_dtype ok[] = {ST_I32, ST_I64};
    const st_entry *e;
    FSDP_CHECK(lookup(f, name, ndim, shape, ok, 2, "I32 or I64", &e));
    return read_convert(f, e, 0, (e->end - e->begin) / st_dtype_size(e->dtype), NULL, dst);
}

// Reads bytes [byte_begin, byte_end) of a tensor's raw data. dst: (byte_end - byte_begin,)
fsdp_status st_read_raw(const st_file *f, const char *name, void *dst, uint64_t byte_begin, uint64_t byte_end) {
    const st_entry *e = st_find(f, name);
    if (!e) return fsdp_error(FSDP_ERR_MISSING, "%s: missing tensor '%s'", f->path, name);
    if (byte_begin > byte_end || byte_end > e->end - e->begin)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: tensor '%s': byte range [%" PRIu64 ", %" PRIu64
                          ") is outside its %" PRIu64 " bytes", f->path, name, byte_begin, byte_end,
                          e->end - e->begin);
    return pread_full(f, f->data_off + e->begin + byte_begin, dst, byte_end - byte_begin);
}
