// json_tree.h: a whole JSON text parsed into a tree of values (data/tokenizer_json.c reads tokenizer.json
// with it), on json.h's building blocks: strings decoded (NUL rejected), object keys kept in file order,
// numbers as double, nesting at most 64 deep.
#pragma once
#include <stddef.h>

#include "core/status.h"

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    double number;       // JSON_NUMBER
    char *str;           // JSON_STRING: NUL-terminated UTF-8 (malloc'd)
    json_value *items;   // JSON_ARRAY, JSON_OBJECT: (count,) the elements or the members' values
    char **keys;         // JSON_OBJECT: (count,) the members' keys, in file order
    size_t count;
};

// Parses text (len bytes) into *out (malloc'd; json_tree_free). On failure *out is NULL and the message
// names path and the byte: FSDP_ERR_FORMAT, FSDP_ERR_NOMEM.
fsdp_status json_tree_parse(const char *text, size_t len, const char *path, json_value **out);
void json_tree_free(json_value *v);  // NULL is fine

// The value of member key of object v, or NULL (v NULL or not an object, or no such member)
const json_value *json_tree_get(const json_value *v, const char *key);
// The string of v, or NULL where v is NULL or no string
const char *json_tree_str(const json_value *v);
