// tokenizer.c: the tokenizer API (tokenizer.h): GPT-2's byte-level BPE from vocab.json + merges.txt here
// (the fast path the built-in corpus uses), tokenizer.json through tokenizer_json.h. Symbols are token
// ids from the start: a piece's bytes become the ids of their single-byte symbols, and a merge (a, b) ->
// ab is a table entry keyed by the id pair, so BPE never builds strings.
#include "data/tokenizer.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "data/tokenizer_common.h"
#include "data/tokenizer_json.h"
#include "data/unicode_classes.h"

enum { MAX_VOCAB = 1 << 24 };  // ids beyond this are taken for a malformed file

struct fsdp_tokenizer {
    int vocab;                // largest id + 1
    unsigned char **bytes;    // (vocab,) each id's bytes (malloc'd), or NULL where no token has the id
    size_t *nbytes;           // (vocab,)
    int32_t byte_id[256];     // the id of each byte's single-byte symbol
    tok_merge_table merges;
    uint64_t fingerprint;
    tok_json *json;           // a tokenizer.json's pipeline (tokenizer_json.h), or NULL: GPT-2's vocab.json
};

// ---- loading

// vocab.json into t (ids, bytes) and strs (token string -> id)
static fsdp_status load_vocab(fsdp_tokenizer *t, const char *path, const char *text, size_t len, tok_str_table *strs) {
    json_parser p = {text, len, 0, path, "JSON", "token", NULL};
    FSDP_CHECK(json_expect(&p, '{'));
    int first = 1, cap = 0;
    uint32_t inverse[324];  // GPT-2 alphabet character -> byte (+1; 0: not in the alphabet)
    memset(inverse, 0, sizeof inverse);
    for (int b = 0; b < 256; b++) inverse[tok_byte_char(b)] = (uint32_t)b + 1;
    for (;;) {
        char *key = NULL;
        FSDP_CHECK(json_key(&p, &first, &key));
        if (!key) break;
        p.item = key;
        int c = json_peek(&p);
        int64_t id = 0;
        fsdp_status s = FSDP_OK;
        if (c < '0' || c > '9') s = json_error(&p, "expected a non-negative integer id");
        for (; s == FSDP_OK && p.pos < p.n && p.s[p.pos] >= '0' && p.s[p.pos] <= '9'; p.pos++)
            if ((id = id * 10 + (p.s[p.pos] - '0')) >= MAX_VOCAB) s = json_error(&p, "id too large (at most 16777215)");
        if (s == FSDP_OK && id < cap && t->bytes[id]) s = json_error(&p, "id given to two tokens");
        // the token's bytes: each character of the key through the alphabet's inverse
        size_t klen = strlen(key), nb = 0;
        unsigned char *bytes = s == FSDP_OK ? malloc(klen + 1) : NULL;
        if (s == FSDP_OK && !bytes) s = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
        for (size_t i = 0; s == FSDP_OK && i < klen;) {
            uint32_t cp;
            i += tok_utf8_get((const unsigned char *)key + i, klen - i, &cp);
            if (cp >= 324 || !inverse[cp]) s = json_error(&p, "a character outside GPT-2's byte alphabet");
            else bytes[nb++] = (unsigned char)(inverse[cp] - 1);
        }
        if (s == FSDP_OK && id >= cap) {  // grow the id arrays
            int grow = cap ? cap : 1024;
            while (grow <= id) grow *= 2;
            unsigned char **gb = realloc(t->bytes, sizeof *gb * (size_t)grow);
            if (gb) t->bytes = gb;
            size_t *gn = gb ? realloc(t->nbytes, sizeof *gn * (size_t)grow) : NULL;
            if (gn) t->nbytes = gn;
            if (!gb || !gn) {
                s = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
            } else {
                memset(t->bytes + cap, 0, sizeof *gb * (size_t)(grow - cap));
                memset(t->nbytes + cap, 0, sizeof *gn * (size_t)(grow - cap));
                cap = grow;
            }
        }
        int dup = 0;
        if (s == FSDP_OK) {
            t->bytes[id] = bytes, t->nbytes[id] = nb, bytes = NULL;
            if (id + 1 > t->vocab) t->vocab = (int)id + 1;
            char *copy = strdup(key);
            if (!copy || (!tok_str_put(strs, copy, (int32_t)id, &dup) && !dup))
                s = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
            else if (dup)
                s = json_error(&p, "token listed twice");
        }
        free(bytes);
        if (s != FSDP_OK) {
            free(key);
            return s;
        }
        p.item = NULL;
        free(key);
    }
    if (json_peek(&p) != -1) return json_error(&p, "text after the object");
    for (int b = 0; b < 256; b++) {
        char sym[5] = {0};
        json_utf8_put(tok_byte_char(b), sym);
        int32_t id = tok_str_find(strs, sym, strlen(sym));
        if (id < 0)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: the single-byte token of byte 0x%02X ('%s') is missing", path, b, sym);
        t->byte_id[b] = id;
    }
    return FSDP_OK;
}

static fsdp_status load_merges(fsdp_tokenizer *t, const char *path, char *text, size_t len, const tok_str_table *strs) {
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (!tok_merge_init(&t->merges, lines)) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    char *line = text, *end = text + len;
    int rank = 0;
    char *joined = malloc(len + 1);  // a merge's two parts, concatenated
    if (!joined) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    fsdp_status s = FSDP_OK;
    for (size_t no = 1; line < end && s == FSDP_OK; no++) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *stop = nl ? nl : end;
        size_t n = (size_t)(stop - line);
        if (n && line[n - 1] == '\r') n--;
        if (!(no == 1 && n >= 8 && memcmp(line, "#version", 8) == 0) && n > 0) {
            char *sp = memchr(line, ' ', n);
            size_t na = sp ? (size_t)(sp - line) : 0, nb = sp ? n - na - 1 : 0;
            if (!sp || na == 0 || nb == 0 || memchr(sp + 1, ' ', nb)) {
                s = fsdp_error(FSDP_ERR_FORMAT, "%s: line %zu: expected two symbols separated by one space, got '%.*s'",
                               path, no, (int)(n < 60 ? n : 60), line);
                break;
            }
            int32_t a = tok_str_find(strs, line, na), b = tok_str_find(strs, sp + 1, nb);
            memcpy(joined, line, na);
            memcpy(joined + na, sp + 1, nb);
            int32_t ab = tok_str_find(strs, joined, na + nb);
            if (a < 0 || b < 0)
                s = fsdp_error(FSDP_ERR_FORMAT, "%s: line %zu: '%.*s' is not a token of vocab.json", path, no,
                               a < 0 ? (int)na : (int)nb, a < 0 ? line : sp + 1);
            else if (ab < 0)
                s = fsdp_error(FSDP_ERR_FORMAT, "%s: line %zu: the merge '%.*s' makes '%.*s', which is not a token of "
                               "vocab.json", path, no, (int)n, line, (int)(na + nb), joined);
            if (s != FSDP_OK) break;
            tok_merge_put(&t->merges, a, b, rank++, ab);  // a pair listed again takes its later rank, as encoder.py's dict does
        }
        line = nl ? nl + 1 : end;
    }
    free(joined);
    return s;
}

// vocab.json + merges.txt in dir into t
static fsdp_status open_gpt2_files(fsdp_tokenizer *t, const char *dir) {
    size_t dl = strlen(dir);
    char *vpath = malloc(dl + 16), *mpath = malloc(dl + 16);
    tok_str_table strs = {0};
    char *vtext = NULL, *mtext = NULL;
    size_t vlen = 0, mlen = 0;
    fsdp_status s = FSDP_OK;
    if (!vpath || !mpath || !tok_str_init(&strs)) s = fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (s == FSDP_OK) {
        snprintf(vpath, dl + 16, "%s/vocab.json", dir);
        snprintf(mpath, dl + 16, "%s/merges.txt", dir);
        s = tok_read_file(vpath, &vtext, &vlen);
    }
    if (s == FSDP_OK) s = tok_read_file(mpath, &mtext, &mlen);
    if (s == FSDP_OK) s = load_vocab(t, vpath, vtext, vlen, &strs);
    if (s == FSDP_OK) s = load_merges(t, mpath, mtext, mlen, &strs);
    if (s == FSDP_OK) t->fingerprint = tok_fnv1a(tok_fnv1a(TOK_FNV_OFFSET, vtext, vlen), mtext, mlen);
    tok_str_free(&strs);
    free(vtext), free(mtext), free(vpath), free(mpath);
    return s;
}

// The tokenizer.json at path into t
static fsdp_status open_tokenizer_json(fsdp_tokenizer *t, const char *path) {
    char *text = NULL;
    size_t len = 0;
    FSDP_CHECK(tok_read_file(path, &text, &len));
    fsdp_status s = tok_json_load(path, text, len, &t->json);
    if (s == FSDP_OK) {
        t->fingerprint = tok_fnv1a(TOK_FNV_OFFSET, text, len);
        t->vocab = tok_json_vocab(t->json);
    }
    free(text);
    return s;
}

fsdp_status fsdp_tokenizer_open(const char *path, fsdp_tokenizer **out) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0 || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))
        return fsdp_error(FSDP_ERR_IO, "%s: no such file or directory (want tokenizer.json, or a directory holding "
                          "tokenizer.json or vocab.json and merges.txt)", path);
    fsdp_tokenizer *t = calloc(1, sizeof *t);
    size_t pl = strlen(path);
    char *json = malloc(pl + 32);
    if (!t || !json) {
        free(t), free(json);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(json, pl + 32, "%s/tokenizer.json", path);
    struct stat js;
    fsdp_status s;
    if (S_ISREG(st.st_mode)) s = open_tokenizer_json(t, path);
    else if (stat(json, &js) == 0) s = open_tokenizer_json(t, json);
    else s = open_gpt2_files(t, path);
    free(json);
    if (s != FSDP_OK) {
        fsdp_tokenizer_free(t);
        return s;
    }
    *out = t;
    return FSDP_OK;
}

void fsdp_tokenizer_free(fsdp_tokenizer *t) {
    if (!t) return;
    for (int i = 0; t->bytes && i < t->vocab; i++) free(t->bytes[i]);
    free(t->bytes), free(t->nbytes);
    tok_merge_free(&t->merges);
    tok_json_free(t->json);
    free(t);
}

int fsdp_tokenizer_vocab(const fsdp_tokenizer *t) { return t->vocab; }
uint64_t fsdp_tokenizer_fingerprint(const fsdp_tokenizer *t) { return t->fingerprint; }

const unsigned char *fsdp_tokenizer_token_bytes(const fsdp_tokenizer *t, int id, size_t *len) {
    if (t->json) return tok_json_token_bytes(t->json, id, len);
    *len = 0;
    if (id < 0 || id >= t->vocab || !t->bytes[id]) return NULL;
    *len = t->nbytes[id];
    return t->bytes[id];
}

// ---- encoding

enum { CLASS_LETTER = 1, CLASS_NUMBER = 2, CLASS_SPACE = 3, CLASS_OTHER = 4 };

static int char_class(uint32_t cp) {
    if (cp == UINT32_MAX) return CLASS_OTHER;  // a stray byte
    if (fsdp_unicode_is_letter(cp)) return CLASS_LETTER;
    if (fsdp_unicode_is_number(cp)) return CLASS_NUMBER;
    return fsdp_unicode_is_space(cp) ? CLASS_SPACE : CLASS_OTHER;
}

// The end (exclusive) of the piece GPT-2's pattern matches at character i of c (n,), cls (n,) their classes.
static size_t piece_end(const uint32_t *c, const unsigned char *cls, size_t n, size_t i) {
    if (c[i] == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
        uint32_t a = c[i + 1], b = i + 2 < n ? c[i + 2] : 0;
        if (a == 's' || a == 't') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e')) return i + 3;
        if (a == 'm') return i + 2;
        if (a == 'l' && b == 'l') return i + 3;
        if (a == 'd') return i + 2;
    }
    size_t j = c[i] == ' ' && i + 1 < n ? i + 1 : i;  // " ?": the space is taken when a class run follows
    for (int k = CLASS_LETTER; k <= CLASS_OTHER; k++) {  // ?\p{L}+, ?\p{N}+, ?[^\s\p{L}\p{N}]+
        if (k == CLASS_SPACE) continue;
        if (cls[j] == k) {
            while (j < n && cls[j] == k) j++;
            return j;
        }
    }
    if (cls[i] == CLASS_SPACE) {  // \s+(?!\S) leaves the last space of a run before a non-space; else \s+
        size_t k = i;
        while (k < n && cls[k] == CLASS_SPACE) k++;
        return k == n || k - 1 == i ? k : k - 1;
    }
    return i + 1;  // not reached: every character is in one class
}

// Appends the BPE of bytes b (len,) to out; sym: (len,) scratch
static void bpe(const fsdp_tokenizer *t, const unsigned char *b, size_t len, int32_t *sym, int32_t *out, size_t *n_out) {
    size_t n = len;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[b[i]];
    while (n > 1) {
        int best = INT_MAX;
        int32_t to = -1, x = -1, y = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t m = -1;
            int r = tok_merge_find(&t->merges, sym[i], sym[i + 1], &m);
            if (r < best) best = r, to = m, x = sym[i], y = sym[i + 1];
        }
        if (best == INT_MAX) break;
        size_t k = 0;
        for (size_t i = 0; i < n;) {  // every occurrence of (x, y), left to right
            if (i + 1 < n && sym[i] == x && sym[i + 1] == y) {
                sym[k++] = to;
                i += 2;
            } else {
                sym[k++] = sym[i++];
            }
        }
        n = k;
    }
    memcpy(out + *n_out, sym, n * sizeof *sym);
    *n_out += n;
}

fsdp_status fsdp_tokenizer_encode(const fsdp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    return fsdp_tokenizer_encode_special(t, text, len, 0, ids, n);
}

fsdp_status fsdp_tokenizer_encode_special(const fsdp_tokenizer *t, const char *text, size_t len, int add_special,
                                          int32_t **ids, size_t *n) {
    if (t->json) return tok_json_encode(t->json, text, len, add_special, ids, n);
    *ids = NULL;
    *n = 0;
    const unsigned char *s = (const unsigned char *)text;
    uint32_t *cp = malloc(sizeof *cp * (len + 1));       // (chars,) code points
    size_t *off = malloc(sizeof *off * (len + 1));       // (chars + 1,) their byte offsets
    unsigned char *cls = malloc(len + 1);                // (chars,) their classes
    int32_t *out = malloc(sizeof *out * (len ? len : 1));  // at most one token per byte
    int32_t *sym = malloc(sizeof *sym * (len ? len : 1));
    if (!cp || !off || !cls || !out || !sym) {
        free(cp), free(off), free(cls), free(out), free(sym);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory encoding %zu bytes of text", len);
    }
    size_t chars = 0;
    for (size_t at = 0; at < len; chars++) {
        off[chars] = at;
        at += tok_utf8_get(s + at, len - at, &cp[chars]);
        cls[chars] = (unsigned char)char_class(cp[chars]);
    }
    off[chars] = len;
    size_t count = 0;
    for (size_t i = 0; i < chars;) {
        size_t e = piece_end(cp, cls, chars, i);
        bpe(t, s + off[i], off[e] - off[i], sym, out, &count);
        i = e;
    }
    free(cp), free(off), free(cls), free(sym);
    *ids = out;
    *n = count;
    return FSDP_OK;
}

fsdp_status fsdp_tokenizer_decode(const fsdp_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                  unsigned char **out, size_t *len) {
    if (t->json) return tok_json_decode(t->json, ids, n, skip_special, out, len);
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        fsdp_tokenizer_token_bytes(t, ids[i], &k);
        total += k;
    }
    unsigned char *o = malloc(total + 1);
    if (!o) return fsdp_error(FSDP_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const unsigned char *b = fsdp_tokenizer_token_bytes(t, ids[i], &k);
        if (k) memcpy(o + *len, b, k), *len += k;
    }
    o[*len] = 0;
    *out = o;
    return FSDP_OK;
}

// ---- the token cache

static int newer_or_same(const struct stat *a, const struct stat *b) {
    return a->st_mtim.tv_sec > b->st_mtim.tv_sec ||
           (a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec >= b->st_mtim.tv_nsec);
}

fsdp_status fsdp_tokenizer_cache_file(const fsdp_tokenizer *t, const char *path, char *cache, size_t cap, int *reused,
                                      size_t *count) {
    *reused = 0;
    *count = 0;
    if (snprintf(cache, cap, "%s.%016" PRIx64 ".bin", path, t->fingerprint) >= (int)cap)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: path too long for its token cache", path);
    int wide = t->vocab > 65536;  // ids above 65535: llm.c's uint32 (Llama 3) layout
    struct stat ts, cs;
    if (stat(path, &ts) != 0) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (stat(cache, &cs) == 0 && S_ISREG(cs.st_mode) && cs.st_size >= 1024 && newer_or_same(&cs, &ts)) {
        *reused = 1;
        *count = (size_t)(cs.st_size - 1024) / (wide ? 4 : 2);
        return FSDP_OK;
    }
    char *text = NULL;
    size_t len = 0;
    FSDP_CHECK(tok_read_file(path, &text, &len));
    int32_t *ids = NULL;
    size_t n = 0;
    fsdp_status s = fsdp_tokenizer_encode(t, text, len, &ids, &n);
    free(text);
    FSDP_CHECK(s);
    if (n > INT32_MAX) {
        free(ids);
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: %zu tokens do not fit an llm.c token file", path, n);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", cache, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(ids);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot write the token cache: %s", tmp, strerror(errno));
    }
    int32_t header[256] = {wide ? 20240801 : 20240520, wide ? 7 : 1, (int32_t)n};
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    unsigned char buf[4 * 4096];  // little-endian tokens
    for (size_t i = 0; ok && i < n; i += 4096) {
        size_t m = n - i < 4096 ? n - i : 4096, w = wide ? 4 : 2;
        for (size_t k = 0; k < m; k++)
            for (size_t b = 0; b < w; b++) buf[k * w + b] = (unsigned char)((uint32_t)ids[i + k] >> (8 * b));
        ok = fwrite(buf, w, m, f) == m;
    }
    ok = fclose(f) == 0 && ok;
    free(ids);
    if (!ok || rename(tmp, cache) != 0) {
        int e = errno;
        unlink(tmp);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot write the token cache: %s", cache, strerror(e));
    }
    *count = n;
    return FSDP_OK;
}
