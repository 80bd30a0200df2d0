// tok_regex.h: the small regular-expression engine of tokenizer.json's Split pre-tokenizers and Replace
// normalizers, over code points (a stray byte of invalid UTF-8 is UINT32_MAX: a character of no class).
// It knows what the Llama 3, Qwen2, SmolLM and GPT-2 patterns use, with Oniguruma's (the Rust library's)
// leftmost-first backtracking semantics: literals, '.', alternation, groups (...) (?:...) (?i:...),
// classes [...] [^...] with ranges and \p{L} \p{N} \P{L} \P{N} \s \S \d \D \r \n \t \f \v and escaped
// punctuation, the quantifiers ? * + {m} {m,} {m,n} (greedy, or lazy with a trailing ?), and the
// lookaheads (?!...) (?=...). Case-insensitive groups fold ASCII letters plus U+017F (long s) and U+212A
// (Kelvin sign), as Unicode's simple case folding does for the ASCII letters. Anything else (anchors,
// backreferences, other properties, lookbehind, possessive quantifiers) is refused when compiling.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct tok_regex tok_regex;  // opaque

// Compiles pattern (UTF-8, NUL-terminated). On failure *out is NULL and the message is
// "<where>: unsupported regex '<pattern>': <what>" (FSDP_ERR_FORMAT) or FSDP_ERR_NOMEM.
fsdp_status tok_regex_compile(const char *pattern, const char *where, tok_regex **out);
void tok_regex_free(tok_regex *re);  // NULL is fine

// The leftmost match in cp[from..n) (cp: (n,) code points), leftmost-first among alternatives: 1 with
// [*start, *end) (empty matches are skipped), 0 when there is none, -1 when out of memory or past the
// step budget (10^6 + 64 per character left: the supported families' patterns need a few per
// character; nested quantifiers can backtrack exponentially).
int tok_regex_find(const tok_regex *re, const uint32_t *cp, size_t n, size_t from, size_t *start, size_t *end);
