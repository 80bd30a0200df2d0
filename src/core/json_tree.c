// json_tree.c: a JSON text into a tree (json_tree.h): recursive descent over json.h's primitives.
#include "core/json_tree.h"

#include <stdlib.h>
#include <string.h>

#include "core/json.h"

enum { MAX_DEPTH = 64 };

static void value_clear(json_node *v) {
    for (size_t i = 0; v->items && i < v->count; i++) value_clear(&v->items[i]);
    for (size_t i = 0; v->keys && i < v->count; i++) free(v->keys[i]);
    free(v->items), free(v->keys), free(v->str);
}

// Appends an empty slot to v's items (and keys for an object); *cap: the allocated slots
static json_node *grow(json_node *v, size_t *cap, const char *path) {
    if (v->count == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        json_node *items = realloc(v->items, c * sizeof *items);
        if (items) v->items = items;
        char **keys = items && v->type == JT_OBJECT ? realloc(v->keys, c * sizeof *keys) : NULL;
        if (keys) v->keys = keys;
        if (!items || (v->type == JT_OBJECT && !keys)) {
            fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory parsing JSON", path);
            return NULL;
        }
        *cap = c;
    }
    json_node *e = &v->items[v->count];
    memset(e, 0, sizeof *e);
    if (v->keys) v->keys[v->count] = NULL;
    v->count++;
    return e;
}

static fsdp_status parse_value(json_parser *p, json_node *v, int depth);

static fsdp_status parse_container(json_parser *p, json_node *v, int depth) {
    int object = v->type == JT_OBJECT;
    char close = object ? '}' : ']';
    size_t cap = 0;
    p->pos++;  // the opening bracket
    if (json_peek(p) == close) {
        p->pos++;
        return FSDP_OK;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            FSDP_CHECK(json_string(p, &key));
            fsdp_status s = json_expect(p, ':');
            if (s != FSDP_OK) {
                free(key);
                return s;
            }
        }
        json_node *e = grow(v, &cap, p->path);
        if (!e) {
            free(key);
            return FSDP_ERR_NOMEM;
        }
        if (object) v->keys[v->count - 1] = key;
        FSDP_CHECK(parse_value(p, e, depth + 1));
        int c = json_peek(p);
        if (c == close) {
            p->pos++;
            return FSDP_OK;
        }
        if (c != ',') return json_error(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        p->pos++;
    }
}

static fsdp_status parse_number(json_parser *p, json_node *v) {
    const char *start = p->s + p->pos;
    size_t k = 0;
    while (p->pos + k < p->n && strchr("+-0123456789.eE", p->s[p->pos + k]) && p->s[p->pos + k]) k++;
    char buf[64];
    if (k == 0 || k >= sizeof buf) return json_error(p, "expected a value");
    memcpy(buf, start, k);
    buf[k] = 0;
    char *end = NULL;
    v->number = strtod(buf, &end);
    if (end != buf + k) return json_error(p, "invalid number");
    v->type = JT_NUMBER;
    p->pos += k;
    return FSDP_OK;
}

static fsdp_status parse_value(json_parser *p, json_node *v, int depth) {
    if (depth > MAX_DEPTH) return json_error(p, "nested more than 64 deep");
    int c = json_peek(p);
    static const struct { const char *word; json_node_type type; } words[] = {
        {"null", JT_NULL}, {"false", JT_FALSE}, {"true", JT_TRUE}};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(words[i].word);
        if (p->pos + k <= p->n && memcmp(p->s + p->pos, words[i].word, k) == 0) {
            v->type = words[i].type;
            p->pos += k;
            return FSDP_OK;
        }
    }
    if (c == '"') {
        v->type = JT_STRING;
        return json_string(p, &v->str);
    }
    if (c == '{' || c == '[') {
        v->type = c == '{' ? JT_OBJECT : JT_ARRAY;
        return parse_container(p, v, depth);
    }
    return parse_number(p, v);
}

fsdp_status json_tree_parse(const char *text, size_t len, const char *path, json_node **out) {
    *out = NULL;
    json_node *v = calloc(1, sizeof *v);
    if (!v) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory parsing JSON", path);
    json_parser p = {text, len, 0, path, "JSON", "key", NULL};
    fsdp_status s = parse_value(&p, v, 0);
    if (s == FSDP_OK && json_peek(&p) != -1) s = json_error(&p, "text after the value");
    if (s != FSDP_OK) {
        json_tree_free(v);
        return s;
    }
    *out = v;
    return FSDP_OK;
}

void json_tree_free(json_node *v) {
    if (!v) return;
    value_clear(v);
    free(v);
}

const json_node *json_tree_get(const json_node *v, const char *key) {
    if (!v || v->type != JT_OBJECT) return NULL;
    for (size_t i = 0; i < v->count; i++)
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
    return NULL;
}

const char *json_tree_str(const json_node *v) { return v && v->type == JT_STRING ? v->str : NULL; }
