// json.c: the pieces of a JSON parser the readers need (safetensors headers, vocab.json, json_value's
// documents): whitespace, punctuation, strings with every escape decoded (surrogate pairs joined, NUL
// rejected), object keys and array separators; messages name the file and the byte.
#include "core/json.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Records a FSDP_ERR_FORMAT message about the header at the current position.
fsdp_status json_error(const json_parser *p, const char *what) {
    return fsdp_error(FSDP_ERR_FORMAT, "%s: invalid %s at byte %zu%s%s%s%s%s: %s", p->path, p->what, p->pos,
                      p->item ? " (" : "", p->item ? p->item_kind : "", p->item ? " '" : "", p->item ? p->item : "",
                      p->item ? "')" : "", what);
}

// Skips whitespace and returns the next character, or -1 at the end.
int json_peek(json_parser *p) {
    for (; p->pos < p->n; p->pos++) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return (unsigned char)c;
    }
    return -1;
}

// Consumes character c (after whitespace) or fails.
fsdp_status json_expect(json_parser *p, char c) {
    if (json_peek(p) == (unsigned char)c) {
        p->pos++;
        return FSDP_OK;
    }
    char msg[32];
    snprintf(msg, sizeof msg, "expected '%c'", c);
    return json_error(p, msg);
}

// Parses the 4 hex digits at s (at least 4 readable bytes) into *out; returns 0 if they are not hex.
static int hex4(const char *s, uint32_t *out) {
    static const char digits[] = "0123456789abcdef";
    *out = 0;
    for (int i = 0; i < 4; i++) {
        const char *d = s[i] ? strchr(digits, tolower((unsigned char)s[i])) : NULL;
        if (!d) return 0;
        *out = *out * 16 + (uint32_t)(d - digits);
    }
    return 1;
}

// Writes code point cp as UTF-8 to o; returns the byte count (1..4). o: (4,)
size_t json_utf8_put(uint32_t cp, char *o) {
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--, cp >>= 6) o[i] = (char)(0x80 | (cp & 0x3F));
    o[0] = (char)(lead[n] | cp);
    return n;
}

// Decodes the escape after a backslash at p->pos into o; returns the bytes written, or 0 with *bad
// set. end: index of the closing quote. o: (4,)
static size_t junescape(json_parser *p, size_t end, char *o, const char **bad) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char e = p->s[p->pos++];
    const char *q = e ? strchr(from, e) : NULL;
    uint32_t cp, lo;
    if (q) {
        *o = to[q - from];
        return 1;
    }
    if (e != 'u' || p->pos + 4 > end || !hex4(p->s + p->pos, &cp)) {
        *bad = "invalid escape in string";
        return 0;
    }
    p->pos += 4;
    if (cp >= 0xD800 && cp < 0xDC00 && p->pos + 6 <= end && p->s[p->pos] == '\\' &&
        p->s[p->pos + 1] == 'u' && hex4(p->s + p->pos + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
        p->pos += 6;  // a surrogate pair
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp >= 0xD800 && cp < 0xE000) *bad = "unpaired surrogate in \\u escape";
    if (cp == 0) *bad = "NUL character in string";
    return *bad ? 0 : json_utf8_put(cp, o);
}

// Parses a JSON string into a malloc'd, NUL-terminated *out (escapes decoded, NUL rejected).
fsdp_status json_string(json_parser *p, char **out) {
    *out = NULL;
    if (json_peek(p) != '"') return json_error(p, "expected a string");
    size_t start = ++p->pos, end = start;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return json_error(p, "unterminated string");
    char *o = malloc(end - start + 1);  // decoding never makes a string longer
    if (!o) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory parsing the %s", p->path, p->what);
    size_t k = 0;
    const char *bad = NULL;
    while (p->pos < end && !bad) {
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c < 0x20) bad = "control character in string";
        else if (c != '\\') o[k++] = (char)c;
        else k += junescape(p, end, o + k, &bad);
    }
    if (bad) {
        free(o);
        return json_error(p, bad);
    }
    o[k] = 0;
    p->pos = end + 1;
    *out = o;
    return FSDP_OK;
}

// Before an item of an array or a member of an object (its opening bracket consumed): sets *more = 0
// after consuming the closing bracket `close`, else *more = 1 after consuming the ',' that comes before
// every item but the first. *first is 1 before the first item.
static fsdp_status separator(json_parser *p, int *first, char close, int *more) {
    int c = json_peek(p);
    *more = c != (unsigned char)close;
    if (!*more) return json_expect(p, close);
    if (!*first && c != ',') {
        char msg[32];
        snprintf(msg, sizeof msg, "expected ',' or '%c'", close);
        return json_error(p, msg);
    }
    p->pos += !*first;
    *first = 0;
    return FSDP_OK;
}

// Inside an object whose '{' is consumed: parses the next `"key":` into a malloc'd *key, or sets
// *key = NULL after consuming the closing '}'. *first is 1 before the first key.
fsdp_status json_key(json_parser *p, int *first, char **key) {
    int more;
    *key = NULL;
    FSDP_CHECK(separator(p, first, '}', &more));
    if (!more) return FSDP_OK;
    FSDP_CHECK(json_string(p, key));
    fsdp_status s = json_expect(p, ':');
    if (s != FSDP_OK) {
        free(*key);
        *key = NULL;
    }
    return s;
}

// Inside an array whose '[' is consumed: sets *more = 1 when an item follows (consuming the ',' before
// it), or *more = 0 after consuming the closing ']'. *first is 1 before the first item.
fsdp_status json_item(json_parser *p, int *first, int *more) { return separator(p, first, ']', more); }
