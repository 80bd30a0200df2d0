// json.h: a JSON reader's building blocks over a text in memory: whitespace, punctuation, strings, object
// keys and array separators. ckpt/safetensors.c and data/tokenizer.c (vocab.json) read their formats with
// them directly; core/json_value.h builds whole documents from them.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct {
    const char *s;          // the text, (n,)
    size_t n, pos;
    const char *path;       // for messages
    const char *what;       // what the text is, for messages ("JSON header")
    const char *item_kind;  // what `item` names ("tensor"), for messages
    const char *item;       // the entry being parsed, or NULL
} json_parser;

// Records an FSDP_ERR_FORMAT message "<path>: invalid <what> at byte N (<item_kind> '<item>'): <msg>".
fsdp_status json_error(const json_parser *p, const char *msg);
// Skips whitespace and returns the next character, or -1 at the end.
int json_peek(json_parser *p);
// Consumes character c (after whitespace) or fails.
fsdp_status json_expect(json_parser *p, char c);
// Parses a JSON string into a malloc'd, NUL-terminated *out (escapes decoded, NUL rejected).
fsdp_status json_string(json_parser *p, char **out);
// Inside an object whose '{' is consumed: parses the next `"key":` into a malloc'd *key, or sets
// *key = NULL after consuming the closing '}'. *first is 1 before the first key.
fsdp_status json_key(json_parser *p, int *first, char **key);
// Inside an array whose '[' is consumed: sets *more = 1 when an item follows (consuming the ',' before
// it), or *more = 0 after consuming the closing ']'. *first is 1 before the first item.
fsdp_status json_item(json_parser *p, int *first, int *more);
// Writes code point cp as UTF-8 to o; returns the byte count (1..4). o: (4,)
size_t json_utf8_put(uint32_t cp, char *o);
