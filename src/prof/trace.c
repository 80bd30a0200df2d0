// trace.c: span recorder and Chrome trace (Trace Event Format) writer. See trace.h.
//
// Recording: an explicit stack of open spans (fixed depth) and a ring buffer of completed spans;
// begin/end read CLOCK_MONOTONIC in integer nanoseconds and touch no heap. Totals (per kind,
// outermost spans only; per collective name) are updated as spans end.
//
// Writing: each rank serializes its spans to JSON text (one event per line, every event starting
// with ",\n"), then rank 0 collects the texts in rounds of at most TRACE_CHUNK bytes per rank cut at
// event boundaries (all_gather of fixed-size slots), so no rank ever holds size * (whole trace).
#define _POSIX_C_SOURCE 200809L
#include "prof/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRACE_NAME_MAX 256           // bytes of a span name written to the file
#define TRACE_CHUNK (256u * 1024u)   // bytes of JSON per rank per gather round

typedef struct {
    const char *name;
    int64_t t0, t1;  // CLOCK_MONOTONIC nanoseconds
    size_t bytes;
    unsigned char kind, depth;
    char detail[FSDP_TRACE_DETAIL_MAX + 1];
} span_rec;

typedef struct {
    const char *name;
    int64_t t0;
    size_t bytes;
    unsigned char kind, outermost;
    char detail[FSDP_TRACE_DETAIL_MAX + 1];
} open_span;

static struct {
    int on, rank, paused;
    int64_t origin;
    span_rec *ring;
    size_t cap, head, count;  // ring: next slot to write, spans held
    size_t completed, dropped;
    open_span stack[FSDP_TRACE_MAX_DEPTH];
    int depth, skip;  // skip: open spans not on the stack (too deep, or begun while paused)
    int open_kind[FSDP_SPAN_NKINDS];
    int64_t kind_ns[FSDP_SPAN_NKINDS];
    fsdp_trace_collective coll[FSDP_TRACE_MAX_COLLECTIVES + 1];  // the last one is "(other)"
    int64_t coll_ns[FSDP_TRACE_MAX_COLLECTIVES + 1];
    size_t ncoll;
} T;

static _Thread_local int tl_on;  // the recording thread's switch: the one branch when off

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

static void copy_detail(char *dst, const char *src) {
    size_t n = 0;
    if (src)
        while (n < FSDP_TRACE_DETAIL_MAX && src[n]) {
            dst[n] = src[n];
            n++;
        }
    dst[n] = '\0';
}

fsdp_status fsdp_trace_enable(int rank, size_t capacity) {
    if (rank < 0) return fsdp_error(FSDP_ERR_INVALID_ARG, "trace: rank %d is negative", rank);
    if (capacity > SIZE_MAX / sizeof(span_rec))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "trace: capacity %zu spans is too large", capacity);
    span_rec *ring = NULL;
    if (capacity) {
        ring = malloc(capacity * sizeof *ring);
        if (!ring)
            return fsdp_error(FSDP_ERR_NOMEM, "trace: out of memory for %zu spans (%zu bytes)", capacity,
                              capacity * sizeof *ring);
    }
    fsdp_trace_disable();
    T.ring = ring;
    T.cap = capacity;
    T.rank = rank;
    T.origin = now_ns();
    T.on = 1;
    tl_on = 1;
    return FSDP_OK;
}

void fsdp_trace_disable(void) {
    free(T.ring);
    memset(&T, 0, sizeof T);
    tl_on = 0;
}

int fsdp_trace_enabled(void) { return tl_on && T.on; }

void fsdp_trace_begin(const char *name, fsdp_span_kind kind, const char *detail) {
    if (!tl_on) return;
    if (T.paused || T.depth == FSDP_TRACE_MAX_DEPTH) {
        T.skip++;
        return;
    }
    unsigned k = (unsigned)kind < FSDP_SPAN_NKINDS ? (unsigned)kind : FSDP_SPAN_OTHER;
    open_span *s = &T.stack[T.depth++];
    s->name = name ? name : "(null)";
    s->kind = (unsigned char)k;
    s->outermost = T.open_kind[k]++ == 0;
    s->bytes = 0;
    copy_detail(s->detail, detail);
    s->t0 = now_ns();  // last, so the bookkeeping above is not in the span
}

static void add_collective(const char *name, size_t bytes, int64_t ns) {
    size_t i = 0;
    while (i < T.ncoll && T.coll[i].name != name) i++;
    if (i == T.ncoll)
        for (i = 0; i < T.ncoll && strcmp(T.coll[i].name, name) != 0; i++) {
        }
    if (i == T.ncoll) {
        if (T.ncoll < FSDP_TRACE_MAX_COLLECTIVES) {
            T.coll[T.ncoll++].name = name;
        } else {
            i = FSDP_TRACE_MAX_COLLECTIVES;
            if (!T.coll[i].name) T.coll[i].name = "(other)";
            if (T.ncoll == FSDP_TRACE_MAX_COLLECTIVES) T.ncoll++;
        }
    }
    T.coll[i].calls++;
    T.coll[i].bytes += bytes;
    T.coll_ns[i] += ns;
}

void fsdp_trace_end(void) {
    if (!tl_on) return;
    int64_t t1 = now_ns();
    if (T.skip) {
        T.skip--;
        if (!T.paused) {  // a span past the depth limit: counted, not kept
            T.completed++;
            T.dropped++;
        }
        return;
    }
    if (T.depth == 0) return;
    const open_span *s = &T.stack[--T.depth];
    int64_t ns = t1 - s->t0;
    T.open_kind[s->kind]--;
    if (s->outermost) T.kind_ns[s->kind] += ns;
    if (s->kind == FSDP_SPAN_COMM) add_collective(s->name, s->bytes, ns);
    T.completed++;
    if (!T.cap) {
        T.dropped++;
        return;
    }
    span_rec *r = &T.ring[T.head];
    r->name = s->name;
    r->t0 = s->t0;
    r->t1 = t1;
    r->bytes = s->bytes;
    r->kind = s->kind;
    r->depth = (unsigned char)T.depth;
    memcpy(r->detail, s->detail, sizeof r->detail);
    T.head = T.head + 1 == T.cap ? 0 : T.head + 1;
    if (T.count < T.cap)
        T.count++;
    else
        T.dropped++;
}

void fsdp_trace_add_bytes(size_t bytes) {
    if (!tl_on || T.skip || T.depth == 0) return;
    T.stack[T.depth - 1].bytes += bytes;
}

void fsdp_trace_get_totals(fsdp_trace_totals *out) {
    memset(out, 0, sizeof *out);
    if (!T.on) return;
    out->wall = 1e-9 * (double)(now_ns() - T.origin);
    for (int k = 0; k < FSDP_SPAN_NKINDS; k++) out->seconds[k] = 1e-9 * (double)T.kind_ns[k];
    out->spans = T.completed;
    out->kept = T.count;
    out->dropped = T.dropped;
}

size_t fsdp_trace_get_collectives(fsdp_trace_collective *out, size_t max) {
    if (!T.on) return 0;
    for (size_t i = 0; i < T.ncoll && i < max; i++) {
        out[i] = T.coll[i];
        out[i].seconds = 1e-9 * (double)T.coll_ns[i];
    }
    return T.ncoll;
}

void fsdp_trace_report(FILE *f, int world_size) {
    if (!T.on) {
        fprintf(f, "trace: off\n");
        return;
    }
    fsdp_trace_totals t;
    fsdp_trace_get_totals(&t);
    double wall = t.wall > 0 ? t.wall : 1e-9;
    fprintf(f, "trace rank %d: wall %.3f s, compute %.3f s (%.1f%%), comm %.3f s (%.1f%%), other %.3f s, spans %zu",
            T.rank, t.wall, t.seconds[FSDP_SPAN_COMPUTE], 100.0 * t.seconds[FSDP_SPAN_COMPUTE] / wall,
            t.seconds[FSDP_SPAN_COMM], 100.0 * t.seconds[FSDP_SPAN_COMM] / wall, t.seconds[FSDP_SPAN_OTHER], t.spans);
    // Without a span buffer (capacity 0: totals only, e.g. fsdp-train without --trace) no span is kept
    // by design; "dropped" is said only of spans a buffer could not hold (full, or nested too deep).
    if (!T.cap) fprintf(f, " (totals only: no span buffer, so none kept)\n");
    else fprintf(f, " (kept %zu, dropped %zu)\n", t.kept, t.dropped);
    if (!T.ncoll) return;
    int n = world_size > 0 ? world_size : 1;
    double bus = (double)(n - 1) / (double)n;
    fprintf(f, "  %-24s %10s %12s %10s %11s %11s\n", "collective", "calls", "MB", "seconds", "algbw GB/s",
            "busbw GB/s");
    for (size_t i = 0; i < T.ncoll; i++) {
        double sec = 1e-9 * (double)T.coll_ns[i], bytes = (double)T.coll[i].bytes;
        double algbw = sec > 0 ? bytes / sec / 1e9 : 0.0;
        fprintf(f, "  %-24s %10zu %12.3f %10.4f %11.3f %11.3f\n", T.coll[i].name, T.coll[i].calls, bytes / 1e6,
                sec, algbw, algbw * bus);
    }
}

// ---- JSON serialization ----

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// Length of the well-formed UTF-8 sequence at s (at most n bytes), 0 when it is not one.
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

// A JSON string of the first `max` bytes of s: quotes, backslashes and control characters escaped,
// bytes that are not well-formed UTF-8 replaced by U+FFFD.
static void sb_json_string(sbuf *b, const char *str, size_t max) {
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strnlen(str, max);
    sb_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t run = i;  // copy plain ASCII in runs
        while (run < n && s[run] >= 0x20 && s[run] < 0x80 && s[run] != '"' && s[run] != '\\') run++;
        if (run > i) {
            sb_put(b, (const char *)s + i, run - i);
            i = run;
            continue;
        }
        unsigned c = s[i];
        if (c == '"') {
            sb_put(b, "\\\"", 2);
        } else if (c == '\\') {
            sb_put(b, "\\\\", 2);
        } else if (c == '\n') {
            sb_put(b, "\\n", 2);
        } else if (c == '\t') {
            sb_put(b, "\\t", 2);
        } else if (c == '\r') {
            sb_put(b, "\\r", 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            size_t len = utf8_len(s + i, n - i);
            if (len) {
                sb_put(b, (const char *)s + i, len);
                i += len;
                continue;
            }
            sb_put(b, "\\ufffd", 6);
        }
        i++;
    }
    sb_put(b, "\"", 1);
}

static const char *kind_cat(unsigned k) {
    return k == FSDP_SPAN_COMPUTE ? "compute" : k == FSDP_SPAN_COMM ? "comm" : "other";
}

static void sb_usec(sbuf *b, int64_t ns) {  // ns >= 0, as microseconds with 3 decimals
    sb_printf(b, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static const span_rec *ring_at(size_t i) {  // i-th oldest kept span
    size_t idx = (T.head + T.cap - T.count + i) % T.cap;
    return &T.ring[idx];
}

static int cmp_span(const void *a, const void *b) {
    const span_rec *x = ring_at(*(const size_t *)a), *y = ring_at(*(const size_t *)b);
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1;  // the enclosing span first
    return (int)x->depth - (int)y->depth;
}

// This rank's events (metadata first, then spans by start time), each beginning with ",\n".
static void serialize(sbuf *b, int64_t origin) {
    int pid = T.rank;
    sb_printf(b, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}",
              pid, pid);
    sb_printf(b, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
              pid, pid);
    sb_printf(b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"main\"}}", pid);
    if (!T.count) return;
    size_t *order = malloc(T.count * sizeof *order);
    if (!order) {
        b->oom = 1;
        return;
    }
    for (size_t i = 0; i < T.count; i++) order[i] = i;
    qsort(order, T.count, sizeof *order, cmp_span);
    for (size_t i = 0; i < T.count && !b->oom; i++) {
        const span_rec *s = ring_at(order[i]);
        sb_put(b, ",\n{\"name\":", 10);
        sb_json_string(b, s->name, TRACE_NAME_MAX);
        sb_printf(b, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":", kind_cat(s->kind));
        sb_usec(b, s->t0 - origin);
        sb_put(b, ",\"dur\":", 7);
        sb_usec(b, s->t1 - s->t0);
        sb_printf(b, ",\"pid\":%d,\"tid\":0,\"args\":{", pid);
        const char *sep = "";
        if (s->detail[0]) {
            sb_put(b, "\"detail\":", 9);
            sb_json_string(b, s->detail, FSDP_TRACE_DETAIL_MAX);
            sep = ",";
        }
        if (s->bytes) sb_printf(b, "%s\"bytes\":%zu", sep, s->bytes);
        sb_put(b, "}}", 2);
    }
    free(order);
}

// ---- the collective write ----

// all_gather of `bytes` (even) per rank as 16-bit elements: a plain copy under every backend.
static fsdp_status gather_bytes(fsdp_comm *c, const void *send, void *recv, size_t bytes) {
    return fsdp_all_gather(c, send, recv, bytes / 2, FSDP_BF16);
}

enum { FLAG_OOM = 1, FLAG_OPEN = 2 };

static fsdp_status write_impl(fsdp_comm *comm, const char *path, char *tmp_path) {
    int R = fsdp_comm_rank(comm), N = fsdp_comm_size(comm);
    fsdp_status st = FSDP_OK;
    sbuf text = {0};
    int64_t *hdr = NULL;
    unsigned char *slots = NULL;
    FILE *f = NULL;
    int io_failed = 0, open_errno = 0;

    // 0: the small gather buffers, agreeing on an allocation failure (a sum needs no buffer)
    hdr = malloc((size_t)N * 6 * sizeof(int64_t));
    double failed = hdr ? 0.0 : 1.0;
    st = fsdp_all_reduce_double(comm, &failed);
    if (st == FSDP_OK && failed != 0.0)
        st = fsdp_error(FSDP_ERR_NOMEM, "trace: out of memory gathering %d ranks for %s", N, path);
    if (st != FSDP_OK) goto done;
    int64_t *infos = hdr + (size_t)N * 4;

    // 1: the common origin, each rank's pid and dropped count
    int64_t mine[4] = {T.on ? T.origin : INT64_MAX, T.on, T.rank, (int64_t)T.dropped};
    st = gather_bytes(comm, mine, hdr, sizeof mine);
    if (st != FSDP_OK) goto done;
    int64_t origin = INT64_MAX;
    for (int r = 0; r < N; r++)
        if (hdr[4 * r + 1] && hdr[4 * r] < origin) origin = hdr[4 * r];

    // 2: serialize locally, allocate the round buffer, open the file; agree on sizes and failures
    if (T.on) serialize(&text, origin);
    size_t slot_max = 16 + TRACE_CHUNK;
    slots = malloc((size_t)N * slot_max);
    int64_t flags = (text.oom || !slots) ? FLAG_OOM : 0;
    if (R == 0) {
        f = fopen(tmp_path, "wb");
        if (!f) {
            open_errno = errno;
            flags |= FLAG_OPEN;
        }
    }
    int64_t info[2] = {text.oom ? 0 : (int64_t)text.len, flags};
    st = gather_bytes(comm, info, infos, sizeof info);
    int64_t max_len = 0, all_flags = 0;
    int oom_rank = -1;
    for (int r = 0; r < N && st == FSDP_OK; r++) {
        if (infos[2 * r] > max_len) max_len = infos[2 * r];
        if ((infos[2 * r + 1] & FLAG_OOM) && oom_rank < 0) oom_rank = r;
        all_flags |= infos[2 * r + 1];
    }
    if (st != FSDP_OK) goto done;
    if (all_flags & FLAG_OPEN) {
        st = R == 0 ? fsdp_error(FSDP_ERR_IO, "%s: cannot create trace file: %s", tmp_path, strerror(open_errno))
                    : fsdp_error(FSDP_ERR_IO, "%s: rank 0 could not create the trace file", path);
        goto done;
    }
    if (all_flags & FLAG_OOM) {
        st = fsdp_error(FSDP_ERR_NOMEM, "trace: rank %d ran out of memory serializing its spans for %s", oom_rank,
                        path);
        goto done;
    }

    // 3: rounds of whole events, at most `chunk` bytes per rank each
    if (R == 0 && fputs("{\"traceEvents\":[", f) == EOF) io_failed = 1;
    size_t chunk = (size_t)max_len < TRACE_CHUNK ? (size_t)max_len : TRACE_CHUNK;
    size_t slot = 16 + ((chunk + 1) & ~(size_t)1);
    size_t pos = 0;
    int first = 1, more = max_len > 0;
    while (more) {
        unsigned char *own = slots + (size_t)R * slot;
        size_t end = text.len - pos <= chunk ? text.len : pos + chunk;
        if (end < text.len) {  // back up to the start of an event (",\n" appears only between events)
            while (end > pos && !(text.p[end] == ',' && text.p[end + 1] == '\n')) end--;
            FSDP_ASSERT(end > pos);  // one event is far smaller than TRACE_CHUNK and than max_len
        }
        uint64_t h[2] = {end - pos, end < text.len};
        memcpy(own, h, sizeof h);
        if (end > pos) memcpy(own + 16, text.p + pos, end - pos);
        pos = end;
        st = gather_bytes(comm, own, slots, slot);
        if (st != FSDP_OK) goto done;
        more = 0;
        for (int r = 0; r < N; r++) {
            uint64_t hr[2];
            memcpy(hr, slots + (size_t)r * slot, sizeof hr);
            more |= hr[1] != 0;
            const char *piece = (const char *)slots + (size_t)r * slot + 16;
            size_t len = (size_t)hr[0];
            if (R != 0 || len == 0 || io_failed) continue;
            if (first) {  // the array's first element has no comma before it
                piece++;
                len--;
                first = 0;
            }
            if (fwrite(piece, 1, len, f) != len) io_failed = 1;
        }
    }
    if (R == 0) {
        if (fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"fsdp.c trace\",\"ranks\":[", f) == EOF)
            io_failed = 1;
        const char *sep = "";
        for (int r = 0; r < N; r++) {
            if (!hdr[4 * r + 1]) continue;
            if (fprintf(f, "%s{\"pid\":%lld,\"dropped_spans\":%lld}", sep, (long long)hdr[4 * r + 2],
                        (long long)hdr[4 * r + 3]) < 0)
                io_failed = 1;
            sep = ",";
        }
        if (fputs("]}}\n", f) == EOF) io_failed = 1;
        if (fflush(f) != 0 || ferror(f)) io_failed = 1;
        int close_failed = fclose(f) != 0;
        f = NULL;
        if (io_failed || close_failed) {
            st = fsdp_error(FSDP_ERR_IO, "%s: writing the trace failed: %s", tmp_path, strerror(errno));
        } else if (rename(tmp_path, path) != 0) {
            st = fsdp_error(FSDP_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp_path, strerror(errno));
        }
    }

    // 4: every rank returns rank 0's verdict
    int32_t verdict = (int32_t)st;
    fsdp_status bst = fsdp_broadcast(comm, &verdict, 2, FSDP_BF16, 0);
    if (bst != FSDP_OK) {
        st = bst;
    } else if (R != 0 && verdict != FSDP_OK) {
        st = fsdp_error((fsdp_status)verdict, "%s: rank 0 failed to write the trace", path);
    }
done:
    if (f) fclose(f);
    free(hdr);
    free(slots);
    free(text.p);
    return st;
}

fsdp_status fsdp_trace_write(fsdp_comm *comm, const char *path) {
    if (!comm || !path || !path[0]) return fsdp_error(FSDP_ERR_INVALID_ARG, "trace: no communicator or path");
    size_t n = strlen(path) + 32;
    char *tmp_path = malloc(n);
    if (!tmp_path) return fsdp_error(FSDP_ERR_NOMEM, "trace: out of memory");
    snprintf(tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    int pause = tl_on && !T.paused;
    if (pause) T.paused = 1;  // the collectives below are not part of the trace
    fsdp_status st = write_impl(comm, path, tmp_path);
    if (pause) T.paused = 0;
    if (st != FSDP_OK && fsdp_comm_rank(comm) == 0) remove(tmp_path);
    free(tmp_path);
    return st;
}
