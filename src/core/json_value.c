// json_value.c: a JSON document into a json_value tree (json_value.h), on json.h's strings and keys.
#include "core/json_value.h"

#include <errno.h>
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
    memcpy(buf, s + b, i - b);
    buf[i - b] = 0;
    v->type = JSON_NUMBER;
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

// The items of an array or the members of an object (the opening bracket at the position) into v.
static fsdp_status parse_container(json_parser *p, json_value *v, int depth, int object) {
    int cap = 0, first = 1;
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    if (!object && json_peek(p) == ']') {
        p->pos++;
        return FSDP_OK;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            FSDP_CHECK(json_key(p, &first, &key));
            if (!key) return FSDP_OK;
            if (json_get(v, key)) {
                fsdp_status s = json_error(p, "repeated object key");
                free(key);
                return s;
            }
        }
        if (v->count == cap) {
            int nc = cap ? 2 * cap : 8;
            json_value *items = realloc(v->items, sizeof *items * (size_t)nc);
            if (items) v->items = items;
            char **keys = object && items ? realloc(v->keys, sizeof *keys * (size_t)nc) : NULL;
            if (keys) v->keys = keys;
            if (!items || (object && !keys)) {
                free(key);
                return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory parsing the %s", p->path, p->what);
            }
            cap = nc;
        }
        json_value *item = memset(&v->items[v->count], 0, sizeof *item);
        if (object) v->keys[v->count] = key;
        v->count++;  // counted now: json_value_free frees a half-parsed item too
        FSDP_CHECK(parse_value(p, item, depth + 1));
        if (object) continue;
        int c = json_peek(p);
        if (c == ']') {
            p->pos++;
            return FSDP_OK;
        }
        if (c != ',') return json_error(p, "expected ',' or ']'");
        p->pos++;
    }
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
