// tokenizer_common.c: the tables and helpers both tokenizer readers share (tokenizer_common.h).
#include "data/tokenizer_common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t tok_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint32_t tok_byte_char(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++) n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
    return 256u + (uint32_t)n;
}

size_t tok_utf8_get(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned char c = s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    *cp = UINT32_MAX;
    if (n == 0 || n > len) return 1;
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) return 1;  // overlong, too large, surrogate
    *cp = v;
    return n;
}

fsdp_status tok_read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) free(buf);
        buf = grown;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory reading it", path);
    if (err) {
        free(buf);
        return fsdp_error(FSDP_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return FSDP_OK;
}

// ---- string -> id

int tok_str_init(tok_str_table *t) {
    t->cap = 1024, t->count = 0;
    t->keys = calloc(t->cap, sizeof *t->keys);
    t->ids = calloc(t->cap, sizeof *t->ids);
    return t->keys && t->ids;
}

int32_t tok_str_find(const tok_str_table *t, const char *s, size_t n) {
    for (size_t i = tok_fnv1a(TOK_FNV_OFFSET, s, n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->keys[i]) return -1;
        if (strlen(t->keys[i]) == n && memcmp(t->keys[i], s, n) == 0) return t->ids[i];
    }
}

int tok_str_put(tok_str_table *t, char *key, int32_t id, int *dup) {
    *dup = 0;
    if (2 * (t->count + 1) > t->cap) {
        tok_str_table g = {calloc(t->cap * 2, sizeof(char *)), calloc(t->cap * 2, sizeof(int32_t)), t->cap * 2, 0};
        if (!g.keys || !g.ids) {
            free(g.keys), free(g.ids), free(key);
            return 0;
        }
        for (size_t i = 0; i < t->cap; i++)
            if (t->keys[i]) {
                size_t j = tok_fnv1a(TOK_FNV_OFFSET, t->keys[i], strlen(t->keys[i])) & (g.cap - 1);
                while (g.keys[j]) j = (j + 1) & (g.cap - 1);
                g.keys[j] = t->keys[i], g.ids[j] = t->ids[i], g.count++;
            }
        free(t->keys), free(t->ids);
        *t = g;
    }
    size_t n = strlen(key), i = tok_fnv1a(TOK_FNV_OFFSET, key, n) & (t->cap - 1);
    for (; t->keys[i]; i = (i + 1) & (t->cap - 1))
        if (strcmp(t->keys[i], key) == 0) {
            *dup = 1;
            free(key);
            return 0;
        }
    t->keys[i] = key, t->ids[i] = id, t->count++;
    return 1;
}

void tok_str_free(tok_str_table *t) {
    for (size_t i = 0; t->keys && i < t->cap; i++) free(t->keys[i]);
    free(t->keys), free(t->ids);
    t->keys = NULL, t->ids = NULL;
}

// ---- merges keyed by id pair

int tok_merge_init(tok_merge_table *m, size_t n) {
    m->cap = 16;
    while (m->cap < 2 * n) m->cap *= 2;
    m->key = calloc(m->cap, sizeof *m->key);
    m->rank = malloc(sizeof *m->rank * m->cap);
    m->to = malloc(sizeof *m->to * m->cap);
    return m->key && m->rank && m->to;
}

static size_t merge_slot(const tok_merge_table *m, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
    while (m->key[i] && m->key[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

void tok_merge_put(tok_merge_table *m, int32_t a, int32_t b, int32_t rank, int32_t to) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t slot = merge_slot(m, key);
    m->key[slot] = key, m->rank[slot] = rank, m->to[slot] = to;
}

int tok_merge_find(const tok_merge_table *m, int32_t a, int32_t b, int32_t *to) {
    if (!m->cap) return INT_MAX;
    size_t i = merge_slot(m, ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1);
    if (!m->key[i]) return INT_MAX;
    *to = m->to[i];
    return m->rank[i];
}

void tok_merge_free(tok_merge_table *m) {
    free(m->key), free(m->rank), free(m->to);
    m->key = NULL, m->rank = m->to = NULL, m->cap = 0;
}
