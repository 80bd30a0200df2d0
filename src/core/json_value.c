// json_value.c: a JSON document into a json_value tree (json_value.h), on json.h's strings, keys and
// separators; linear in the text (arrays grow by doubling, repeated keys are found by hashing).
#include "core/json_value.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json.h"

#define JSON_MAX_FILE (64u << 20)

void json_value_free(json_value *v) {
    if (!v) return;
    for (int i = 0; i < v->count; i++) {
        json_value_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const char *json_type_name(json_type t) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return (unsigned)t <= JSON_OBJECT ? names[t] : "?";
}

const json_value *json_get(const json_value *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < v->count; i++)
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

// Matches the literal word (true, false, null) at the position.
static int take_word(json_parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->pos + n > p->n || memcmp(p->s + p->pos, word, n) != 0) return 0;
    p->pos += n;
    return 1;
}

// A JSON number (RFC 8259's grammar) into v.
static fsdp_status parse_number(json_parser *p, json_value *v) {
    size_t b = p->pos, i = b;
    const char *s = p->s;
    int integral = 1;
    if (i < p->n && s[i] == '-') i++;
    if (i < p->n && s[i] == '0') i++;
    else if (i < p->n && s[i] >= '1' && s[i] <= '9') while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    else return json_error(p, "invalid number");
    if (i < p->n && s[i] == '.') {
        integral = 0;
        if (++i >= p->n || s[i] < '0' || s[i] > '9') return json_error(p, "invalid number");
        while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        if (++i < p->n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->n || s[i] < '0' || s[i] > '9') return json_error(p, "invalid number");
        while (i < p->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    char buf[64];
    if (i - b >= sizeof buf) return json_error(p, "number too long");
    v->type = JSON_NUMBER;
    int neg = s[b] == '-';
    if (integral && i - b - (size_t)neg <= 18) {  // below 2^63: exact, and rounded to double as strtod does
        uint64_t x = 0;
        for (size_t k = b + (size_t)neg; k < i; k++) x = x * 10 + (uint64_t)(s[k] - '0');
        v->is_integer = 1;
        v->integer = neg ? -(int64_t)x : (int64_t)x;
        v->number = neg ? -(double)(int64_t)x : (double)(int64_t)x;  // "-0": -0.0, as strtod
        p->pos = i;
        return FSDP_OK;
    }
    memcpy(buf, s + b, i - b);
    buf[i - b] = 0;
    v->number = strtod(buf, NULL);
    if (integral) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        v->is_integer = errno == 0;
        v->integer = (int64_t)x;
    }
    p->pos = i;
    return FSDP_OK;
}

static fsdp_status parse_value(json_parser *p, json_value *v, int depth);

// The keys of an object being parsed, for the repeated-key check: while it has fewer than KEY_SCAN members
// a scan of them, then an open-addressing table (linear probing, at most half full) of their indices.
enum { KEY_SCAN = 16 };
typedef struct {
    uint32_t tag;  // the hash's high half: most keys that differ are told apart without a strcmp
    int index;     // the key's index in the object + 1, or 0 where the slot is empty
} key_slot;
typedef struct {
    key_slot *slot;  // (cap,)
    size_t cap;      // a power of two
} key_set;

static uint64_t key_hash(const char *s) {  // FNV-1a
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

// The slot of key (hash h) in keys (the object's, indexed by the table), or the empty slot where it
// would go.
static key_slot *key_find(const key_set *ks, char *const *keys, const char *key, uint64_t h) {
    size_t m = ks->cap - 1, i = (size_t)h & m;
    for (; ks->slot[i].index; i = (i + 1) & m)
        if (ks->slot[i].tag == (uint32_t)(h >> 32) && !strcmp(keys[ks->slot[i].index - 1], key)) break;
    return &ks->slot[i];
}

// Fails (at the position, after the key's ':') where key repeats a key of object v; else records it as
// the key of member v->count. Linear in all: the first KEY_SCAN keys are scanned, later ones hashed.
static fsdp_status check_key(json_parser *p, key_set *ks, const json_value *v, const char *key) {
    int n = v->count;
    if (n < KEY_SCAN) {
        for (int i = 0; i < n; i++)
            if (!strcmp(v->keys[i], key)) return json_error(p, "repeated object key");
        return FSDP_OK;
    }
    if (2 * ((size_t)n + 1) > ks->cap) {  // (re)build the table, twice as large, from the keys so far
        size_t cap = ks->cap ? 2 * ks->cap : 4 * KEY_SCAN;
        key_slot *slot = calloc(cap, sizeof *slot);
        if (!slot) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory parsing the %s", p->path, p->what);
        free(ks->slot);
        *ks = (key_set){slot, cap};
        for (int i = 0; i < n; i++) {
            uint64_t h = key_hash(v->keys[i]);
            *key_find(ks, v->keys, v->keys[i], h) = (key_slot){(uint32_t)(h >> 32), i + 1};
        }
    }
    uint64_t h = key_hash(key);
    key_slot *e = key_find(ks, v->keys, key, h);
    if (e->index) return json_error(p, "repeated object key");
    *e = (key_slot){(uint32_t)(h >> 32), n + 1};
    return FSDP_OK;
}

// Room for one more item (and key) in v; *cap: the slots allocated. Doubling, so that n items cost O(n).
static fsdp_status grow(json_parser *p, json_value *v, int *cap) {
    int nc = *cap ? 2 * *cap : 8;
    json_value *items = *cap <= INT_MAX / 2 ? realloc(v->items, sizeof *items * (size_t)nc) : NULL;
    if (items) v->items = items;
    char **keys = v->type == JSON_OBJECT && items ? realloc(v->keys, sizeof *keys * (size_t)nc) : NULL;
    if (keys) v->keys = keys;
    if (!items || (v->type == JSON_OBJECT && !keys))
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory parsing the %s", p->path, p->what);
    *cap = nc;
    return FSDP_OK;
}

// The items of an array or the members of an object (the opening bracket at the position) into v.
static fsdp_status parse_container(json_parser *p, json_value *v, int depth, int object) {
    int cap = 0, first = 1, more = 1;
    key_set seen = {NULL, 0};
    fsdp_status s;
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    for (;;) {
        char *key = NULL;
        s = object ? json_key(p, &first, &key) : json_item(p, &first, &more);
        if (s != FSDP_OK || (object ? !key : !more)) break;
        if ((object && (s = check_key(p, &seen, v, key)) != FSDP_OK) ||
            (v->count == cap && (s = grow(p, v, &cap)) != FSDP_OK)) {
            free(key);
            break;
        }
        json_value *item = memset(&v->items[v->count], 0, sizeof *item);
        if (object) v->keys[v->count] = key;
        v->count++;  // counted now: json_value_free frees a half-parsed item too
        if ((s = parse_value(p, item, depth + 1)) != FSDP_OK) break;
    }
    free(seen.slot);
    return s;
}

static fsdp_status parse_value(json_parser *p, json_value *v, int depth) {
    if (depth > JSON_MAX_DEPTH) return json_error(p, "nested too deeply");
    int c = json_peek(p);
    v->pos = p->pos;
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        return json_string(p, &v->string);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    if (take_word(p, "true") || take_word(p, "false")) {
        v->type = JSON_BOOL;
        v->boolean = c == 't';
        return FSDP_OK;
    }
    if (take_word(p, "null")) return FSDP_OK;
    return json_error(p, c < 0 ? "unexpected end" : "expected a value");
}

fsdp_status json_parse(const char *text, size_t len, const char *path, const char *what, json_value *out) {
    memset(out, 0, sizeof *out);
    json_parser p = {text, len, 0, path, what, "key", NULL};
    fsdp_status s = parse_value(&p, out, 0);
    if (s == FSDP_OK && json_peek(&p) != -1) s = json_error(&p, "unexpected characters after the value");
    if (s != FSDP_OK) json_value_free(out);
    return s;
}

fsdp_status json_parse_file(const char *path, const char *what, json_value *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f) return fsdp_error(errno == ENOENT ? FSDP_ERR_MISSING : FSDP_ERR_IO, "%s: cannot open: %s", path,
                              strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > JSON_MAX_FILE) {
        fclose(f);
        return fsdp_error(FSDP_ERR_IO, "%s: not a regular file of at most %u MiB", path, JSON_MAX_FILE >> 20);
    }
    size_t n = (size_t)st.st_size;
    char *text = malloc(n + 1);  // (n + 1,)
    size_t got = text ? fread(text, 1, n, f) : 0;
    fclose(f);
    if (!text) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    fsdp_status s = got == n ? json_parse(text, n, path, what, out)
                             : fsdp_error(FSDP_ERR_IO, "%s: read failed", path);
    free(text);
    return s;
}

void json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}
