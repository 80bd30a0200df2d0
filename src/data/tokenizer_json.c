// tokenizer_json.c: tokenizer.json into the pipeline of tokenizer_json_impl.h (tokenizer_json.h says
// what is supported); every field is checked, and what the pipeline cannot do exactly is refused.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/json_value.h"
#include "data/tokenizer_json_impl.h"

enum { MAX_VOCAB = 1 << 24 };  // ids beyond this are taken for a malformed file

#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char *path;
    tok_json *j;
} loader;

static fsdp_status bad(const loader *ld, const char *what, const char *detail) {
    return fsdp_error(FSDP_ERR_FORMAT, "%s: %s%s%s", ld->path, what, detail ? detail : "", detail ? "'" : "");
}

static fsdp_status nomem(const loader *ld) { return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", ld->path); }

// The string of v, or NULL (v NULL or no string)
static const char *str_of(const json_value *v) { return v && v->type == JSON_STRING ? v->string : NULL; }

static const char *type_of(const json_value *v) { return str_of(json_get(v, "type")); }

// A boolean member (absent or null: dflt); *out. A member of another type is an error naming it.
static fsdp_status get_bool(const loader *ld, const json_value *v, const char *key, int dflt, int *out) {
    const json_value *m = json_get(v, key);
    *out = dflt;
    if (!m || m->type == JSON_NULL) return FSDP_OK;
    if (m->type != JSON_BOOL)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: '%s' must be true or false", ld->path, key);
    *out = m->boolean;
    return FSDP_OK;
}

// A non-negative integer below MAX_VOCAB (a token id or count), or -1
static int64_t get_id(const json_value *v) {
    if (!v || v->type != JSON_NUMBER || v->number < 0 || v->number >= MAX_VOCAB || v->number != (double)(int64_t)v->number)
        return -1;
    return (int64_t)v->number;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

// Gives id its token string (a copy of s; an added token's content replaces the vocabulary's)
static fsdp_status set_token(loader *ld, int64_t id, const char *s) {
    tok_json *j = ld->j;
    if (id >= j->vocab) {
        int grow = j->vocab ? j->vocab : 1024;
        while (grow <= id) grow *= 2;
        char **g = realloc(j->token, sizeof *g * (size_t)grow);
        if (!g) return nomem(ld);
        memset(g + j->vocab, 0, sizeof *g * (size_t)(grow - j->vocab));
        j->token = g;
        j->vocab = grow;  // trimmed to the largest id + 1 at the end
    }
    char *copy = dup_str(s);
    if (!copy) return nomem(ld);
    free(j->token[id]);
    j->token[id] = copy;
    return FSDP_OK;
}

// "String": a literal (compiled as a regex of escaped characters) or "Regex"
static fsdp_status compile_pattern(loader *ld, const json_value *pattern, const char *what, tok_regex **re) {
    const char *lit = str_of(json_get(pattern, "String"));
    const char *rx = str_of(json_get(pattern, "Regex"));
    if (!lit && !rx) return bad(ld, what, ": its pattern must be {\"String\": ...} or {\"Regex\": ...}");
    char where[600];
    snprintf(where, sizeof where, "%s: %s", ld->path, what);
    if (rx) return tok_regex_compile(rx, where, re);
    size_t n = strlen(lit);
    char *esc = malloc(2 * n + 1), *o = esc;
    if (!esc) return nomem(ld);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)lit[i];
        int plain = c >= 128 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!plain && c >= 32) *o++ = '\\';
        *o++ = (char)c;
    }
    *o = 0;
    fsdp_status s = tok_regex_compile(esc, where, re);
    free(esc);
    return s;
}

// ---- model

static fsdp_status load_model(loader *ld, const json_value *model) {
    tok_json *j = ld->j;
    const char *type = type_of(model);
    if (!model || model->type != JSON_OBJECT) return bad(ld, "no \"model\" object", NULL);
    if (type && strcmp(type, "BPE") != 0) return bad(ld, "model type is not supported (only BPE): '", type);
    const json_value *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT) return bad(ld, "model.vocab must be an object (token -> id)", NULL);
    if (!merges || merges->type != JSON_ARRAY) return bad(ld, "model.merges must be an array", NULL);
    const json_value *dropout = json_get(model, "dropout");
    if (dropout && dropout->type != JSON_NULL && !(dropout->type == JSON_NUMBER && dropout->number == 0))
        return bad(ld, "model.dropout is not supported (encoding would be random)", NULL);
    const char *fixes[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v = str_of(json_get(model, fixes[i]));
        if (v && *v) return bad(ld, fixes[i], " is not supported with BPE");
    }
    FSDP_CHECK(get_bool(ld, model, "byte_fallback", 0, &j->byte_fallback));
    FSDP_CHECK(get_bool(ld, model, "fuse_unk", 0, &j->fuse_unk));
    FSDP_CHECK(get_bool(ld, model, "ignore_merges", 0, &j->ignore_merges));
    for (int i = 0; i < vocab->count; i++) {
        int64_t id = get_id(&vocab->items[i]);
        if (id < 0) return bad(ld, "model.vocab: the id of a token is not an integer in [0, 16777215]: '", vocab->keys[i]);
        int dup = 0;  // stays 0: json_parse has refused a repeated key
        char *key = dup_str(vocab->keys[i]);
        if (!key || !tok_str_put(&j->strs, key, (int32_t)id, &dup)) return nomem(ld);
        if (id < j->vocab && j->token[id]) return bad(ld, "model.vocab gives one id to two tokens: '", vocab->keys[i]);
        FSDP_CHECK(set_token(ld, id, vocab->keys[i]));
    }
    const char *unk = str_of(json_get(model, "unk_token"));
    j->unk = unk ? tok_str_find(&j->strs, unk, strlen(unk)) : -1;
    if (unk && j->unk < 0) return bad(ld, "model.unk_token is not in model.vocab: '", unk);
    if (!tok_merge_init(&j->merges, merges->count)) return nomem(ld);
    char *joined = NULL;
    fsdp_status s = FSDP_OK;
    for (int i = 0; i < merges->count && s == FSDP_OK; i++) {
        const json_value *m = &merges->items[i];
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (m->type == JSON_STRING) {  // "a b"
            const char *sp = strchr(m->string, ' ');
            if (sp && !strchr(sp + 1, ' ')) a = m->string, na = (size_t)(sp - m->string), b = sp + 1, nb = strlen(b);
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING &&
                   m->items[1].type == JSON_STRING) {  // ["a", "b"]
            a = m->items[0].string, na = strlen(a), b = m->items[1].string, nb = strlen(b);
        }
        char what[64];
        snprintf(what, sizeof what, "model.merges[%d]", i);
        if (!a) {
            s = bad(ld, what, ": expected \"a b\" or [\"a\", \"b\"]");
            break;
        }
        int32_t ia = tok_str_find(&j->strs, a, na), ib = tok_str_find(&j->strs, b, nb);
        char *g = realloc(joined, na + nb + 1);
        if (!g) {
            s = nomem(ld);
            break;
        }
        joined = g;
        memcpy(joined, a, na), memcpy(joined + na, b, nb);
        joined[na + nb] = 0;
        int32_t iab = tok_str_find(&j->strs, joined, na + nb);
        if (ia < 0 || ib < 0) s = bad(ld, what, ia < 0 ? ": its first part is not in model.vocab" : ": its second part is not in model.vocab");
        else if (iab < 0) s = bad(ld, what, ": the token it makes is not in model.vocab");
        else tok_merge_put(&j->merges, ia, ib, (int32_t)i, iab);
    }
    free(joined);
    return s;
}

static fsdp_status load_added(loader *ld, const json_value *list) {
    tok_json *j = ld->j;
    if (!list || list->type == JSON_NULL) return FSDP_OK;
    if (list->type != JSON_ARRAY) return bad(ld, "added_tokens must be an array", NULL);
    j->added = calloc(list->count ? (size_t)list->count : 1, sizeof *j->added);
    if (!j->added) return nomem(ld);
    for (int i = 0; i < list->count; i++) {
        const json_value *a = &list->items[i];
        const char *content = str_of(json_get(a, "content"));
        int64_t id = get_id(json_get(a, "id"));
        if (!content || !*content || id < 0) return bad(ld, "added_tokens: an entry without a content string or an integer id", NULL);
        tj_added *t = &j->added[j->nadded];
        int single = 0;
        FSDP_CHECK(get_bool(ld, a, "special", 0, &t->special));
        FSDP_CHECK(get_bool(ld, a, "lstrip", 0, &t->lstrip));
        FSDP_CHECK(get_bool(ld, a, "rstrip", 0, &t->rstrip));
        FSDP_CHECK(get_bool(ld, a, "single_word", 0, &single));
        if (single) return bad(ld, "added_tokens: single_word is not supported: '", content);
        t->content = dup_str(content);
        if (!t->content) return nomem(ld);
        t->len = strlen(content), t->id = (int32_t)id;
        j->nadded++;
        j->added_first[(unsigned char)content[0]] = 1;
        FSDP_CHECK(set_token(ld, id, content));
    }
    for (int a = 1; a < j->nadded; a++)  // longest first (insertion sort keeps file order among equals)
        for (int b = a; b > 0 && j->added[b].len > j->added[b - 1].len; b--) {
            tj_added x = j->added[b];
            j->added[b] = j->added[b - 1], j->added[b - 1] = x;
        }
    return FSDP_OK;
}

// ---- normalizers, pre-tokenizers, decoders, post-processor

static fsdp_status load_normalizer(loader *ld, const json_value *v) {
    tok_json *j = ld->j;
    if (!v || v->type == JSON_NULL) return FSDP_OK;
    const char *type = type_of(v);
    if (!type) return bad(ld, "a normalizer without a type", NULL);
    if (strcmp(type, "Sequence") == 0) {
        const json_value *list = json_get(v, "normalizers");
        if (!list || list->type != JSON_ARRAY) return bad(ld, "normalizer Sequence without a normalizers array", NULL);
        for (int i = 0; i < list->count; i++) FSDP_CHECK(load_normalizer(ld, &list->items[i]));
        return FSDP_OK;
    }
    tj_normalizer n = {0};
    if (strcmp(type, "Prepend") == 0) {
        const char *p = str_of(json_get(v, "prepend"));
        if (!p) return bad(ld, "normalizer Prepend without a prepend string", NULL);
        n.kind = NORM_PREPEND, n.a = dup_str(p);
        if (!n.a) return nomem(ld);
    } else if (strcmp(type, "Replace") == 0) {
        const json_value *pattern = json_get(v, "pattern");
        const char *lit = str_of(json_get(pattern, "String"));
        const char *content = str_of(json_get(v, "content"));
        if (!content) return bad(ld, "normalizer Replace without a content string", NULL);
        n.kind = NORM_REPLACE;
        if (lit && *lit) n.a = dup_str(lit);
        else FSDP_CHECK(compile_pattern(ld, pattern, "normalizer Replace", &n.re));
        n.b = dup_str(content);
        if ((!n.a && !n.re) || !n.b) {
            free(n.a), free(n.b), tok_regex_free(n.re);
            return nomem(ld);
        }
    } else if (strcmp(type, "NFC") == 0) {
        n.kind = NORM_NFC;
    } else {
        return bad(ld, "normalizer is not supported (null, NFC, Prepend, Replace and Sequence are): '", type);
    }
    tj_normalizer *g = realloc(j->norms, sizeof *g * (size_t)(j->nnorms + 1));
    if (!g) {
        free(n.a), free(n.b), tok_regex_free(n.re);
        return nomem(ld);
    }
    j->norms = g;
    j->norms[j->nnorms++] = n;
    return FSDP_OK;
}

// The replacement character (one code point) of a Metaspace at v into out (5,)
static fsdp_status metaspace_fields(loader *ld, const json_value *v, char *out, int *scheme) {
    const char *r = str_of(json_get(v, "replacement"));
    uint32_t cp;
    if (!r || !*r || tok_utf8_get((const unsigned char *)r, strlen(r), &cp) != strlen(r))
        return bad(ld, "Metaspace: replacement must be one character", NULL);
    snprintf(out, 5, "%s", r);
    const char *p = str_of(json_get(v, "prepend_scheme"));
    int add_prefix = 1;
    FSDP_CHECK(get_bool(ld, v, "add_prefix_space", 1, &add_prefix));
    if (!p) *scheme = add_prefix ? PREPEND_ALWAYS : PREPEND_NEVER;
    else if (strcmp(p, "always") == 0) *scheme = PREPEND_ALWAYS;
    else if (strcmp(p, "first") == 0) *scheme = PREPEND_FIRST;
    else if (strcmp(p, "never") == 0) *scheme = PREPEND_NEVER;
    else return bad(ld, "Metaspace: prepend_scheme must be always, first or never, not '", p);
    return FSDP_OK;
}

static fsdp_status load_pretokenizer(loader *ld, const json_value *v) {
    tok_json *j = ld->j;
    if (!v || v->type == JSON_NULL) return FSDP_OK;
    const char *type = type_of(v);
    if (!type) return bad(ld, "a pre_tokenizer without a type", NULL);
    if (strcmp(type, "Sequence") == 0) {
        const json_value *list = json_get(v, "pretokenizers");
        if (!list || list->type != JSON_ARRAY) return bad(ld, "pre_tokenizer Sequence without a pretokenizers array", NULL);
        for (int i = 0; i < list->count; i++) FSDP_CHECK(load_pretokenizer(ld, &list->items[i]));
        return FSDP_OK;
    }
    if (j->byte_level) return bad(ld, "a pre_tokenizer after ByteLevel is not supported: '", type);
    tj_pretokenizer p = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        int use_regex = 1;
        FSDP_CHECK(get_bool(ld, v, "add_prefix_space", 1, &p.add_prefix_space));
        FSDP_CHECK(get_bool(ld, v, "use_regex", 1, &use_regex));
        p.kind = PRE_BYTE_LEVEL;
        if (use_regex) FSDP_CHECK(tok_regex_compile(GPT2_PATTERN, ld->path, &p.re));
        j->byte_level = 1;
    } else if (strcmp(type, "Split") == 0) {
        static const char *const behaviors[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                                "Contiguous"};
        const char *b = str_of(json_get(v, "behavior"));
        p.kind = PRE_SPLIT, p.behavior = -1;
        for (int i = 0; b && i < 5; i++)
            if (strcmp(b, behaviors[i]) == 0) p.behavior = i;
        if (p.behavior < 0) return bad(ld, "pre_tokenizer Split: behavior is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous: '", b ? b : "");
        FSDP_CHECK(get_bool(ld, v, "invert", 0, &p.invert));
        FSDP_CHECK(compile_pattern(ld, json_get(v, "pattern"), "pre_tokenizer Split", &p.re));
    } else if (strcmp(type, "Metaspace") == 0) {
        p.kind = PRE_METASPACE;
        FSDP_CHECK(metaspace_fields(ld, v, p.replacement, &p.prepend_scheme));
        FSDP_CHECK(get_bool(ld, v, "split", 1, &p.split));
    } else if (strcmp(type, "Digits") == 0) {
        p.kind = PRE_DIGITS;
        FSDP_CHECK(get_bool(ld, v, "individual_digits", 0, &p.individual_digits));
    } else {
        return bad(ld, "pre_tokenizer is not supported (ByteLevel, Split, Metaspace, Digits and Sequence are): '", type);
    }
    tj_pretokenizer *g = realloc(j->pres, sizeof *g * (size_t)(j->npres + 1));
    if (!g) {
        tok_regex_free(p.re);
        return nomem(ld);
    }
    j->pres = g;
    j->pres[j->npres++] = p;
    return FSDP_OK;
}

static fsdp_status load_decoder(loader *ld, const json_value *v) {
    tok_json *j = ld->j;
    if (!v || v->type == JSON_NULL) return FSDP_OK;
    j->has_decoder = 1;
    const char *type = type_of(v);
    if (!type) return bad(ld, "a decoder without a type", NULL);
    if (strcmp(type, "Sequence") == 0) {
        const json_value *list = json_get(v, "decoders");
        if (!list || list->type != JSON_ARRAY) return bad(ld, "decoder Sequence without a decoders array", NULL);
        for (int i = 0; i < list->count; i++) FSDP_CHECK(load_decoder(ld, &list->items[i]));
        return FSDP_OK;
    }
    tj_decoder d = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        d.kind = DEC_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        d.kind = DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d.kind = DEC_FUSE;
    } else if (strcmp(type, "Metaspace") == 0) {
        d.kind = DEC_METASPACE;
        FSDP_CHECK(metaspace_fields(ld, v, d.replacement, &d.prepend_scheme));
    } else if (strcmp(type, "Strip") == 0) {
        const char *c = str_of(json_get(v, "content"));
        int64_t start = get_id(json_get(v, "start")), stop = get_id(json_get(v, "stop"));
        if (!c || !*c || start < 0 || stop < 0) return bad(ld, "decoder Strip needs content, start and stop", NULL);
        d.kind = DEC_STRIP, d.a = dup_str(c), d.start = (int)start, d.stop = (int)stop;
        if (!d.a) return nomem(ld);
    } else if (strcmp(type, "Replace") == 0) {
        const char *lit = str_of(json_get(json_get(v, "pattern"), "String"));
        const char *content = str_of(json_get(v, "content"));
        if (!lit || !*lit || !content) return bad(ld, "decoder Replace: only a non-empty String pattern and a content string are supported", NULL);
        d.kind = DEC_REPLACE, d.a = dup_str(lit), d.b = dup_str(content);
        if (!d.a || !d.b) {
            free(d.a), free(d.b);
            return nomem(ld);
        }
    } else {
        return bad(ld, "decoder is not supported (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and Sequence are): '", type);
    }
    tj_decoder *g = realloc(j->decs, sizeof *g * (size_t)(j->ndecs + 1));
    if (!g) {
        free(d.a), free(d.b);
        return nomem(ld);
    }
    j->decs = g;
    j->decs[j->ndecs++] = d;
    return FSDP_OK;
}

// Appends id to *list (*n of them)
static fsdp_status push_id(loader *ld, int32_t **list, int *n, int64_t id) {
    int32_t *g = realloc(*list, sizeof *g * (size_t)(*n + 1));
    if (!g) return nomem(ld);
    *list = g;
    (*list)[(*n)++] = (int32_t)id;
    return FSDP_OK;
}

// ["<s>", 1] of RobertaProcessing / BertProcessing
static fsdp_status pair_id(loader *ld, const json_value *v, const char *key, int64_t *id) {
    const json_value *p = json_get(v, key);
    *id = p && p->type == JSON_ARRAY && p->count == 2 ? get_id(&p->items[1]) : -1;
    if (*id < 0) return bad(ld, "post_processor: expected [token, id] for ", key);
    return FSDP_OK;
}

static fsdp_status load_post(loader *ld, const json_value *v) {
    tok_json *j = ld->j;
    if (!v || v->type == JSON_NULL) return FSDP_OK;
    const char *type = type_of(v);
    if (!type) return bad(ld, "a post_processor without a type", NULL);
    if (strcmp(type, "ByteLevel") == 0) return FSDP_OK;  // offsets only
    if (strcmp(type, "Sequence") == 0) {
        const json_value *list = json_get(v, "processors");
        if (!list || list->type != JSON_ARRAY) return bad(ld, "post_processor Sequence without a processors array", NULL);
        for (int i = 0; i < list->count; i++) FSDP_CHECK(load_post(ld, &list->items[i]));
        return FSDP_OK;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        int64_t cls, sep;
        FSDP_CHECK(pair_id(ld, v, "cls", &cls));
        FSDP_CHECK(pair_id(ld, v, "sep", &sep));
        FSDP_CHECK(push_id(ld, &j->before, &j->nbefore, cls));
        return push_id(ld, &j->after, &j->nafter, sep);
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return bad(ld, "post_processor is not supported (TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel and Sequence are): '", type);
    const json_value *single = json_get(v, "single"), *specials = json_get(v, "special_tokens");
    if (!single || single->type != JSON_ARRAY) return bad(ld, "post_processor TemplateProcessing without a single template", NULL);
    int seen_a = 0;
    for (int i = 0; i < single->count; i++) {
        const json_value *piece = &single->items[i];
        if (json_get(piece, "Sequence")) {
            seen_a = 1;
            continue;
        }
        const char *name = str_of(json_get(json_get(piece, "SpecialToken"), "id"));
        if (!name) return bad(ld, "post_processor TemplateProcessing: a piece that is neither Sequence nor SpecialToken", NULL);
        const json_value *ids = json_get(json_get(specials, name), "ids");
        if (!ids || ids->type != JSON_ARRAY) return bad(ld, "post_processor TemplateProcessing: special_tokens has no ids for '", name);
        for (int k = 0; k < ids->count; k++) {
            int64_t id = get_id(&ids->items[k]);
            if (id < 0) return bad(ld, "post_processor TemplateProcessing: a bad id for '", name);
            FSDP_CHECK(seen_a ? push_id(ld, &j->after, &j->nafter, id) : push_id(ld, &j->before, &j->nbefore, id));
        }
    }
    return FSDP_OK;
}

// ---- the tables the encoder and decoder use

static fsdp_status finish(loader *ld) {
    tok_json *j = ld->j;
    int top = 0;
    for (int i = 0; i < j->vocab; i++)
        if (j->token[i]) top = i + 1;
    j->vocab = top;
    for (int i = 0; i < j->nbefore + j->nafter; i++) {
        int32_t id = i < j->nbefore ? j->before[i] : j->after[i - j->nbefore];
        if (id >= top || !j->token[id])
            return fsdp_error(FSDP_ERR_FORMAT, "%s: post_processor: id %d is no token of the vocabulary or added_tokens",
                              ld->path, (int)id);
    }
    j->bytes = calloc((size_t)(top ? top : 1), sizeof *j->bytes);
    j->nbytes = calloc((size_t)(top ? top : 1), sizeof *j->nbytes);
    j->is_special = calloc((size_t)(top ? top : 1), 1);
    if (!j->bytes || !j->nbytes || !j->is_special) return nomem(ld);
    for (int a = 0; a < j->nadded; a++) j->is_special[j->added[a].id] = (unsigned char)j->added[a].special;
    for (int b = 0; b < 256; b++) {
        char sym[8] = {0}, hex[16];
        json_utf8_put(tok_byte_char(b), sym);
        j->byte_id[b] = tok_str_find(&j->strs, sym, strlen(sym));
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        j->fallback_id[b] = tok_str_find(&j->strs, hex, strlen(hex));
    }
    for (int i = 0; i < top; i++) {
        if (!j->token[i]) continue;
        tj_strings l = {0};
        int ok = tj_strings_push(&l, j->token[i], strlen(j->token[i])) && tj_decode_chain(j, &l, 0, 0);
        size_t total = 0;
        for (size_t k = 0; ok && k < l.n; k++) total += l.len[k];
        j->bytes[i] = ok ? malloc(total + 1) : NULL;
        for (size_t k = 0; j->bytes[i] && k < l.n; k++) memcpy(j->bytes[i] + j->nbytes[i], l.s[k], l.len[k]), j->nbytes[i] += l.len[k];
        tj_strings_free(&l);
        if (!j->bytes[i]) return nomem(ld);
    }
    return FSDP_OK;
}

fsdp_status tok_json_load(const char *path, const char *text, size_t len, tok_json **out) {
    *out = NULL;
    json_value root;
    FSDP_CHECK(json_parse(text, len, path, "JSON", &root));
    tok_json *j = calloc(1, sizeof *j);
    loader ld = {path, j};
    fsdp_status s = j && tok_str_init(&j->strs) ? FSDP_OK : nomem(&ld);
    if (s == FSDP_OK && root.type != JSON_OBJECT) s = bad(&ld, "not a JSON object", NULL);
    if (s == FSDP_OK) s = load_model(&ld, json_get(&root, "model"));
    if (s == FSDP_OK) s = load_added(&ld, json_get(&root, "added_tokens"));
    if (s == FSDP_OK) s = load_normalizer(&ld, json_get(&root, "normalizer"));
    if (s == FSDP_OK) s = load_pretokenizer(&ld, json_get(&root, "pre_tokenizer"));
    if (s == FSDP_OK) s = load_decoder(&ld, json_get(&root, "decoder"));
    if (s == FSDP_OK) s = load_post(&ld, json_get(&root, "post_processor"));
    if (s == FSDP_OK) s = finish(&ld);
    json_value_free(&root);
    if (s != FSDP_OK) {
        tok_json_free(j);
        return s;
    }
    *out = j;
    return FSDP_OK;
}

void tok_json_free(tok_json *j) {
    if (!j) return;
    for (int i = 0; i < j->vocab; i++) {
        if (j->token) free(j->token[i]);
        if (j->bytes) free(j->bytes[i]);
    }
    free(j->token), free(j->bytes), free(j->nbytes), free(j->is_special);
    tok_str_free(&j->strs);
    tok_merge_free(&j->merges);
    for (int i = 0; i < j->nnorms; i++) free(j->norms[i].a), free(j->norms[i].b), tok_regex_free(j->norms[i].re);
    for (int i = 0; i < j->npres; i++) tok_regex_free(j->pres[i].re);
    for (int i = 0; i < j->ndecs; i++) free(j->decs[i].a), free(j->decs[i].b);
    for (int i = 0; i < j->nadded; i++) free(j->added[i].content);
    free(j->norms), free(j->pres), free(j->decs), free(j->added), free(j->before), free(j->after);
    free(j);
}

int tok_json_vocab(const tok_json *j) { return j->vocab; }

const unsigned char *tok_json_token_bytes(const tok_json *j, int id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= j->vocab || !j->bytes[id]) return NULL;
    *len = j->nbytes[id];
    return j->bytes[id];
}
