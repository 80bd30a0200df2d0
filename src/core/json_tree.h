// json_tree.h: a whole JSON text parsed into a tree of nodes (data/tokenizer_json.c reads tokenizer.json
// with it), on json.h's building blocks: strings decoded (NUL rejected), object keys kept in file order,
// numbers as double, nesting at most 64 deep. Made for large documents (tokenizer.json's vocabulary is
// one object of 128k+ members, merges an array of 280k+): parsing is linear, a repeated key is kept
// (json_tree_get finds the first; the tokenizer reader checks its own tables for repeats).
#pragma once
#include <stddef.h>

#include "core/status.h"

typedef enum { JT_NULL, JT_FALSE, JT_TRUE, JT_NUMBER, JT_STRING, JT_ARRAY, JT_OBJECT } json_node_type;

typedef struct json_node json_node;
struct json_node {
    json_node_type type;
    double number;       // JT_NUMBER
    char *str;           // JT_STRING: NUL-terminated UTF-8 (malloc'd)
    json_node *items;    // JT_ARRAY, JT_OBJECT: (count,) the elements or the members' values
    char **keys;         // JT_OBJECT: (count,) the members' keys, in file order
    size_t count;
};

// Parses text (len bytes) into *out (malloc'd; json_tree_free). On failure *out is NULL and the message
// names path and the byte: FSDP_ERR_FORMAT, FSDP_ERR_NOMEM.
fsdp_status json_tree_parse(const char *text, size_t len, const char *path, json_node **out);
void json_tree_free(json_node *v);  // NULL is fine

// The value of member key of object v, or NULL (v NULL or not an object, or no such member)
const json_node *json_tree_get(const json_node *v, const char *key);
// The string of v, or NULL where v is NULL or no string
const char *json_tree_str(const json_node *v);
