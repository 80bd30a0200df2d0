// json_value.h: a whole JSON document as a tree, for the JSON files read whole: Hugging Face's
// config.json, model.safetensors.index.json and tokenizer.json (whose vocabulary is one object of 128k+
// members and whose merges are an array of 280k+). Built on json.h's pieces: strict JSON (no NaN, no
// trailing commas, no comments), a repeated object key an error, nesting at most JSON_MAX_DEPTH deep;
// parsing is linear in the text, large objects included. Messages name the file and the byte, as
// json_error does. And the one writing piece the JSON writers share: a string, escaped.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/status.h"

#define JSON_MAX_DEPTH 64

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {  // the ints first, so that a value takes 64 bytes (tokenizer.json has 400k+)
    json_type type;
    int boolean;         // JSON_BOOL: 0 or 1
    int is_integer;      // JSON_NUMBER written without fraction or exponent and within int64
    int count;           // JSON_ARRAY items, JSON_OBJECT members
    double number;       // JSON_NUMBER
    int64_t integer;     // its value when is_integer
    char *string;        // JSON_STRING: malloc'd, NUL-terminated (escapes decoded)
    json_value *items;   // (count,) the items, or the members' values in file order
    char **keys;         // (count,) JSON_OBJECT: the members' names
    size_t pos;          // byte offset of the value in the text, for messages
};

// Parses text (len bytes, need not be NUL-terminated) into *out; path and what name it in messages
// ("config.json", "JSON"). On failure *out is left empty (JSON_NULL) and nothing is allocated.
// text: (len,)
fsdp_status json_parse(const char *text, size_t len, const char *path, const char *what, json_value *out);
// Reads the file at path (at most 64 MiB) and parses it as json_parse does.
fsdp_status json_parse_file(const char *path, const char *what, json_value *out);
void json_value_free(json_value *v);
// The member `key` of an object, or NULL (absent, or v not an object). A scan: for the objects a reader
// looks names up in, not for walking a large one (use keys and items).
const json_value *json_get(const json_value *v, const char *key);
// The name of a type for messages ("a number", "an object", ...).
const char *json_type_name(json_type t);
// Writes s to f as a JSON string: quoted, with quotes, backslashes and control characters escaped.
void json_write_string(FILE *f, const char *s);
