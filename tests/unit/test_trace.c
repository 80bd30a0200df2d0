// test_trace.c: the span recorder (src/prof/trace.h). Every rank records nested spans around known
// sleeps; the totals must cover the sleeps; the written Chrome trace must be valid JSON (checked by a
// small JSON grammar validator here) with one track per rank, durations at least the sleeps, children
// inside their parents, escaped strings; the depth and capacity limits drop and count; disabled
// tracing records nothing. Plain process and under mpirun (see tests/CMakeLists.txt).
// TRACE_KEEP=1 keeps the written files (test_trace_np<N>*.json in the working directory).
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "prof/trace.h"
#include "test.h"

static void sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms * 1e6) % 1000000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

// ---- a JSON validator (RFC 8259 grammar; returns the position after the value or NULL) ----

static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

static const char *jstring(const char *p) {
    if (*p != '"') return NULL;
    for (p++; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20) return NULL;  // also the end of the text
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i])) return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return p + 1;
}

static const char *jnumber(const char *p) {
    if (*p == '-') p++;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (isdigit((unsigned char)*p)) p++;
    } else {
        return NULL;
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return NULL;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return NULL;
        while (isdigit((unsigned char)*p)) p++;
    }
    return p;
}

static const char *jvalue(const char *p, int depth) {
    if (depth > 64) return NULL;
    p = ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = jstring(ws(p));
                if (!p) return NULL;
                p = ws(p);
                if (*p++ != ':') return NULL;
            }
            p = jvalue(p, depth + 1);
            if (!p) return NULL;
            p = ws(p);
            if (*p == ',') {
                p++;
                continue;
            }
            return *p == close ? p + 1 : NULL;
        }
    }
    if (*p == '"') return jstring(p);
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    return jnumber(p);
}

static int json_valid(const char *text) {
    const char *end = jvalue(text, 0);
    return end && *ws(end) == '\0';
}

// ---- reading the trace back (the writer puts one event per line) ----

typedef struct {
    char name[64], ph[4], detail[128];
    int pid;
    double ts, dur;
} event;

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

static void field_str(const char *line, const char *key, char *out, size_t cap) {  // raw (escaped) text
    out[0] = '\0';
    const char *p = strstr(line, key);
    if (!p) return;
    p += strlen(key);
    size_t n = 0;
    while (*p && *p != '"' && n + 1 < cap) {
        if (*p == '\\' && p[1]) out[n++] = *p++;
        if (n + 1 < cap) out[n++] = *p++;
    }
    out[n] = '\0';
}

static double field_num(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

static size_t parse_events(const char *text, event *ev, size_t max) {
    size_t n = 0;
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "{\"name\":", 8) != 0 && strncmp(line, "{\"traceEvents\":[{\"name\":", 24) != 0) continue;
        if (n == max) break;
        const char *l = strstr(line, "{\"name\":");
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        char buf[1024];
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, l, len);
        buf[len] = '\0';
        event *e = &ev[n++];
        field_str(buf, "{\"name\":\"", e->name, sizeof e->name);
        field_str(buf, "\"ph\":\"", e->ph, sizeof e->ph);
        field_str(buf, "\"detail\":\"", e->detail, sizeof e->detail);
        if (!strcmp(e->ph, "M")) field_str(buf, "\"args\":{\"name\":\"", e->detail, sizeof e->detail);
        e->pid = (int)field_num(buf, "\"pid\":");
        e->ts = field_num(buf, "\"ts\":");
        e->dur = field_num(buf, "\"dur\":");
    }
    return n;
}

static const event *find_event(const event *ev, size_t n, int pid, const char *name, int nth) {
    for (size_t i = 0; i < n; i++)
        if (ev[i].pid == pid && !strcmp(ev[i].ph, "X") && !strcmp(ev[i].name, name) && nth-- == 0) return &ev[i];
    return NULL;
}

static size_t count_events(const event *ev, size_t n, int pid, const char *ph) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ev[i].pid == pid && !strcmp(ev[i].ph, ph);
    return k;
}

static int inside(const event *child, const event *parent) {
    return child && parent && child->ts >= parent->ts && child->ts + child->dur <= parent->ts + parent->dur;
}

// ---- the phases ----

#define STEPS 2
#define DETAIL_SPECIAL "q\"b\\s\n\x01\xc3\xa9\xff"  // quote, backslash, newline, control, e-acute, bad byte
#define DETAIL_ESCAPED "q\\\"b\\\\s\\n\\u0001\xc3\xa9\\ufffd"

static void record_steps(void) {
    for (int step = 0; step < STEPS; step++) {
        fsdp_trace_begin("step", FSDP_SPAN_OTHER, step ? "step 1" : "step 0");
        fsdp_trace_begin("forward", FSDP_SPAN_COMPUTE, "h.3");
        sleep_ms(4);
        fsdp_trace_begin("all_gather", FSDP_SPAN_COMM, "12.6 MB");
        fsdp_trace_add_bytes(600000);
        fsdp_trace_add_bytes(400000);
        sleep_ms(3);
        fsdp_trace_end();
        fsdp_trace_begin("matmul", FSDP_SPAN_COMPUTE, NULL);  // nested compute: not counted twice
        sleep_ms(2);
        fsdp_trace_end();
        fsdp_trace_end();  // forward
        fsdp_trace_begin("reduce_scatter", FSDP_SPAN_COMM, DETAIL_SPECIAL);
        fsdp_trace_add_bytes(500000);
        sleep_ms(2);
        fsdp_trace_end();
        fsdp_trace_end();  // step
    }
}

static void check_disabled(void) {
    CHECK(!fsdp_trace_enabled());
    fsdp_trace_begin("nothing", FSDP_SPAN_COMPUTE, "x");
    fsdp_trace_add_bytes(123);
    fsdp_trace_end();
    fsdp_trace_end();
    fsdp_trace_totals t;
    fsdp_trace_get_totals(&t);
    CHECK(t.wall == 0 && t.spans == 0 && t.kept == 0 && t.dropped == 0);
    for (int k = 0; k < FSDP_SPAN_NKINDS; k++) CHECK(t.seconds[k] == 0);
    CHECK_EQ_INT(fsdp_trace_get_collectives(NULL, 0), 0);
}

static void check_empty_trace(fsdp_comm *world, const char *path) {
    CHECK(fsdp_trace_write(world, path) == FSDP_OK);
    if (fsdp_comm_rank(world) != 0) return;
    char *text = read_file(path);
    CHECK(text != NULL);
    if (!text) return;
    CHECK(!strncmp(text, "{\"traceEvents\":[", 16));
    CHECK(json_valid(text));
    CHECK(strstr(text, "\"ph\"") == NULL);
    CHECK(strstr(text, "\"displayTimeUnit\":\"ms\"") != NULL);
    free(text);
}

static void check_main_trace(const char *path, int N) {
    char *text = read_file(path);
    CHECK(text != NULL);
    if (!text) return;
    CHECK(!strncmp(text, "{\"traceEvents\":[", 16));
    CHECK(json_valid(text));
    // balanced braces and brackets outside strings (implied by the validator; cheap to say again)
    int depth = 0, in_str = 0, min_depth = 0;
    for (const char *p = text; *p; p++) {
        if (in_str) {
            if (*p == '\\') p++;
            else if (*p == '"') in_str = 0;
        } else if (*p == '"') {
            in_str = 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
            if (depth < min_depth) min_depth = depth;
        }
    }
    CHECK(depth == 0 && min_depth == 0 && !in_str);
    size_t cap = 4096;
    event *ev = malloc(cap * sizeof *ev);
    size_t n = parse_events(text, ev, cap);
    for (int r = 0; r < N; r++) {
        // metadata naming the track, and the spans: STEPS * 5 + 64 kept from the deep nest
        char want[32];
        snprintf(want, sizeof want, "rank %d", r);
        int named = 0;
        for (size_t i = 0; i < n; i++)
            named += ev[i].pid == r && !strcmp(ev[i].ph, "M") && !strcmp(ev[i].name, "process_name") &&
                     !strcmp(ev[i].detail, want);
        CHECK_EQ_INT(named, 1);
        CHECK_EQ_INT(count_events(ev, n, r, "X"), STEPS * 5 + FSDP_TRACE_MAX_DEPTH);
        for (int s = 0; s < STEPS; s++) {
            const event *step = find_event(ev, n, r, "step", s), *fwd = find_event(ev, n, r, "forward", s),
                        *ag = find_event(ev, n, r, "all_gather", s), *mm = find_event(ev, n, r, "matmul", s),
                        *rs = find_event(ev, n, r, "reduce_scatter", s);
            CHECK(step && fwd && ag && mm && rs);
            if (!(step && fwd && ag && mm && rs)) continue;
            CHECK(step->dur >= 11000 && fwd->dur >= 9000 && ag->dur >= 3000 && mm->dur >= 2000 && rs->dur >= 2000);
            CHECK(step->ts >= 0);
            CHECK(inside(fwd, step) && inside(ag, fwd) && inside(mm, fwd) && inside(rs, step));
            CHECK(ag->ts + ag->dur <= mm->ts && fwd->ts + fwd->dur <= rs->ts);
            CHECK(!strcmp(step->detail, s ? "step 1" : "step 0"));
            CHECK(!strcmp(fwd->detail, "h.3") && !strcmp(ag->detail, "12.6 MB") && mm->detail[0] == '\0');
            CHECK(!strcmp(rs->detail, DETAIL_ESCAPED));
        }
        const event *deep0 = find_event(ev, n, r, "deep", 0);
        CHECK(deep0 != NULL);
    }
    // the bytes of the innermost span land in its args
    CHECK(strstr(text, "\"detail\":\"12.6 MB\",\"bytes\":1000000}") != NULL);
    CHECK(strstr(text, "\"dropped_spans\":6") != NULL);
    // the earliest event of the run starts near the common origin
    double min_ts = 1e300;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ev[i].ph, "X") && ev[i].ts < min_ts) min_ts = ev[i].ts;
    CHECK(min_ts >= 0 && min_ts < 60e6);
    free(ev);
    free(text);
}

static void check_totals(int N) {
    fsdp_trace_totals t;
    fsdp_trace_get_totals(&t);
    double slack = 1.0;  // sleeps overshoot on a loaded, oversubscribed machine; never undershoot
    CHECK(t.seconds[FSDP_SPAN_COMPUTE] >= STEPS * 9e-3 && t.seconds[FSDP_SPAN_COMPUTE] < STEPS * 9e-3 + slack);
    CHECK(t.seconds[FSDP_SPAN_COMM] >= STEPS * 5e-3 && t.seconds[FSDP_SPAN_COMM] < STEPS * 5e-3 + slack);
    CHECK(t.seconds[FSDP_SPAN_OTHER] >= STEPS * 11e-3);
    CHECK(t.wall >= t.seconds[FSDP_SPAN_OTHER]);
    CHECK_EQ_INT(t.spans, STEPS * 5 + 70);
    CHECK_EQ_INT(t.kept, STEPS * 5 + FSDP_TRACE_MAX_DEPTH);
    CHECK_EQ_INT(t.dropped, 70 - FSDP_TRACE_MAX_DEPTH);
    fsdp_trace_collective c[8];
    CHECK_EQ_INT(fsdp_trace_get_collectives(c, 8), 2);
    CHECK(!strcmp(c[0].name, "all_gather") && !strcmp(c[1].name, "reduce_scatter"));
    CHECK_EQ_INT(c[0].calls, STEPS);
    CHECK_EQ_INT(c[1].calls, STEPS);
    CHECK_EQ_INT(c[0].bytes, STEPS * 1000000);
    CHECK_EQ_INT(c[1].bytes, STEPS * 500000);
    CHECK(c[0].seconds >= STEPS * 3e-3 && c[1].seconds >= STEPS * 2e-3);
    CHECK_NEAR(c[0].seconds + c[1].seconds, t.seconds[FSDP_SPAN_COMM], 1e-6);
    // the report names the kinds and the collectives
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    fsdp_trace_report(f, N);
    rewind(f);
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = '\0';
    fclose(f);
    CHECK(strstr(buf, "compute") && strstr(buf, "comm") && strstr(buf, "all_gather") &&
          strstr(buf, "reduce_scatter") && strstr(buf, "busbw"));
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return 1;
    }
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    int keep = getenv("TRACE_KEEP") != NULL;
    char path[64], empty_path[64], small_path[64];
    snprintf(path, sizeof path, "test_trace_np%d.json", N);
    snprintf(empty_path, sizeof empty_path, "test_trace_np%d_empty.json", N);
    snprintf(small_path, sizeof small_path, "test_trace_np%d_small.json", N);

    // off by default: nothing recorded, and the written trace is valid JSON with no events
    check_disabled();
    check_empty_trace(world, empty_path);
    CHECK(fsdp_trace_enable(-1, 10) == FSDP_ERR_INVALID_ARG);
    CHECK(!fsdp_trace_enabled());

    // recording
    CHECK(fsdp_trace_enable(R, 1000) == FSDP_OK);
    CHECK(fsdp_trace_enabled());
    fsdp_trace_end();  // no open span: ignored
    record_steps();
    for (int d = 0; d < 70; d++) fsdp_trace_begin("deep", FSDP_SPAN_OTHER, NULL);  // 6 past the depth limit
    fsdp_trace_add_bytes(1);  // lands on no recorded span
    for (int d = 0; d < 70; d++) fsdp_trace_end();
    check_totals(N);
    fsdp_trace_begin("open at write", FSDP_SPAN_OTHER, NULL);  // open spans are not written
    CHECK(fsdp_trace_write(world, path) == FSDP_OK);
    fsdp_trace_end();
    if (R == 0) {
        check_main_trace(path, N);
        fsdp_trace_report(stdout, N);
    }
    CHECK(fsdp_trace_write(world, "/nonexistent-dir/trace.json") == FSDP_ERR_IO);  // every rank fails alike

    // capacity: the newest spans are kept, the rest counted; and the cost of a span
    CHECK(fsdp_trace_enable(R, 4) == FSDP_OK);
    size_t pairs = 200000;
    double t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    for (size_t i = 0; i < pairs; i++) {
        fsdp_trace_begin("tiny", FSDP_SPAN_COMPUTE, i + 4 >= pairs ? "last" : NULL);
        fsdp_trace_end();
    }
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double sec = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0;
        if (R == 0) printf("begin+end pair: %.1f ns\n", 1e9 * sec / (double)pairs);
    }
    fsdp_trace_totals t;
    fsdp_trace_get_totals(&t);
    CHECK_EQ_INT(t.kept, 4);
    CHECK_EQ_INT(t.dropped, pairs - 4);
    CHECK_EQ_INT(fsdp_trace_get_collectives(NULL, 0), 0);
    CHECK(fsdp_trace_write(world, small_path) == FSDP_OK);
    if (R == 0) {
        char *text = read_file(small_path);
        CHECK(text && json_valid(text));
        if (text) {
            event ev[64];
            size_t n = parse_events(text, ev, 64);
            for (int r = 0; r < N; r++) {
                CHECK_EQ_INT(count_events(ev, n, r, "X"), 4);
                for (int k = 0; k < 4; k++) {
                    const event *e = find_event(ev, n, r, "tiny", k);
                    CHECK(e && !strcmp(e->detail, "last"));
                }
            }
            free(text);
        }
    }

    // a trace larger than one gather round (256 KiB per rank), different sizes per rank: the rounds
    // cut between events and every event arrives once
    char big_path[64];
    snprintf(big_path, sizeof big_path, "test_trace_np%d_big.json", N);
    size_t big_cap = 20000;
    CHECK(fsdp_trace_enable(R, big_cap) == FSDP_OK);
    size_t mine = 3000 * (size_t)(R + 1);
    for (size_t i = 0; i < mine; i++) {
        char detail[64];
        snprintf(detail, sizeof detail, "span %zu of rank %d", i, R);
        fsdp_trace_begin("work \"quoted\" name", i % 3 ? FSDP_SPAN_COMPUTE : FSDP_SPAN_COMM, detail);
        fsdp_trace_add_bytes(i);
        fsdp_trace_end();
    }
    CHECK(fsdp_trace_write(world, big_path) == FSDP_OK);
    if (R == 0) {
        char *text = read_file(big_path);
        CHECK(text && strlen(text) > 256 * 1024 && json_valid(text));
        if (text) {
            size_t cap_ev = 3000 * (size_t)N * (size_t)(N + 1) / 2 + 16 * (size_t)N;
            event *ev = malloc(cap_ev * sizeof *ev);
            size_t n = parse_events(text, ev, cap_ev);
            for (int r = 0; r < N; r++) {
                CHECK_EQ_INT(count_events(ev, n, r, "X"), 3000 * (r + 1));
                char *seen = calloc(3000 * (size_t)(r + 1), 1);
                size_t distinct = 0;
                for (size_t i = 0; i < n; i++) {
                    size_t idx;
                    int rr;
                    if (ev[i].pid != r || strcmp(ev[i].ph, "X") ||
                        sscanf(ev[i].detail, "span %zu of rank %d", &idx, &rr) != 2 || rr != r ||
                        idx >= 3000 * (size_t)(r + 1))
                        continue;
                    distinct += !seen[idx];
                    seen[idx] = 1;
                }
                CHECK_EQ_INT(distinct, 3000 * (r + 1));
                free(seen);
            }
            free(ev);
            free(text);
        }
        if (!keep) remove(big_path);
    }

    // off again: nothing more is recorded
    fsdp_trace_disable();
    check_disabled();

    if (R == 0 && !keep) {
        remove(path);
        remove(empty_path);
        remove(small_path);
    }
    fsdp_comm_free(world);
    TEST_MAIN_END();
}
