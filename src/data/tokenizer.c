// tokenizer.c: GPT-2's byte-level BPE (tokenizer.h). Symbols are token ids from the start: a piece's bytes
// become the ids of their single-byte symbols, and a merge (a, b) -> ab is a table entry keyed by the
// id pair, so BPE never builds strings.
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
#include "data/unicode_classes.h"

enum { MAX_VOCAB = 1 << 24 };  // ids beyond this are taken for a malformed file

struct fsdp_tokenizer {
    int vocab;                // largest id + 1
    unsigned char **bytes;    // (vocab,) each id's bytes (malloc'd), or NULL where no token has the id
    size_t *nbytes;           // (vocab,)
    int32_t byte_id[256];     // the id of each byte's single-byte symbol
    uint64_t *mkey;           // (mcap,) merge table: (a << 32 | b) + 1 per slot, 0 when empty
    int32_t *mrank, *mto;     // (mcap,) the merge's rank and the id it makes
    size_t mcap;
    uint64_t fingerprint;
};

// ---- GPT-2's byte alphabet (encoder.py's bytes_to_unicode): printable bytes stand for themselves, the
// others for 256, 257, ... in byte order

static uint32_t byte_char(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++) n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
    return 256u + (uint32_t)n;
}

// Decodes one UTF-8 character at s (len bytes left) into *cp; returns its length, or 1 with *cp =
// UINT32_MAX for a byte that starts no valid sequence.
static size_t utf8_get(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned char c = s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    *cp = UINT32_MAX;
    if (n == 0 || n > len) return 1;
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) return 1;  // overlong, too large, surrogate
    *cp = v;
    return n;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// The whole file at path into a malloc'd buffer (NUL-terminated; *len without the NUL).
static fsdp_status read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) free(buf);
        buf = grown;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory reading it", path);
    if (err) {
        free(buf);
        return fsdp_error(FSDP_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return FSDP_OK;
}

// ---- string -> id while loading (open addressing over vocab.json's keys)

typedef struct {
    char **keys;    // (cap,) NULL when empty
    int32_t *ids;   // (cap,)
    size_t cap, count;
} str_table;

static int32_t str_find(const str_table *t, const char *s, size_t n) {
    for (size_t i = fnv1a(14695981039346656037ull, s, n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->keys[i]) return -1;
        if (strlen(t->keys[i]) == n && memcmp(t->keys[i], s, n) == 0) return t->ids[i];
    }
}

// Takes key (malloc'd) into t; 0 when out of memory (key freed) or already present (*dup = 1, key freed).
static int str_put(str_table *t, char *key, int32_t id, int *dup) {
    *dup = 0;
    if (2 * (t->count + 1) > t->cap) {
        str_table g = {calloc(t->cap * 2, sizeof(char *)), calloc(t->cap * 2, sizeof(int32_t)), t->cap * 2, 0};
        if (!g.keys || !g.ids) {
            free(g.keys), free(g.ids), free(key);
            return 0;
        }
        for (size_t i = 0; i < t->cap; i++)
            if (t->keys[i]) {
                size_t j = fnv1a(14695981039346656037ull, t->keys[i], strlen(t->keys[i])) & (g.cap - 1);
                while (g.keys[j]) j = (j + 1) & (g.cap - 1);
                g.keys[j] = t->keys[i], g.ids[j] = t->ids[i], g.count++;
            }
        free(t->keys), free(t->ids);
        *t = g;
    }
    size_t n = strlen(key), i = fnv1a(14695981039346656037ull, key, n) & (t->cap - 1);
    for (; t->keys[i]; i = (i + 1) & (t->cap - 1))
        if (strcmp(t->keys[i], key) == 0) {
            *dup = 1;
            free(key);
            return 0;
        }
    t->keys[i] = key, t->ids[i] = id, t->count++;
    return 1;
}

static void str_free(str_table *t) {
    for (size_t i = 0; t->keys && i < t->cap; i++) free(t->keys[i]);
    free(t->keys), free(t->ids);
}

// ---- merges keyed by id pair

static size_t merge_slot(const fsdp_tokenizer *t, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (t->mcap - 1);
    while (t->mkey[i] && t->mkey[i] != key) i = (i + 1) & (t->mcap - 1);
    return i;
}

static int merge_find(const fsdp_tokenizer *t, int32_t a, int32_t b, int32_t *to) {
    if (!t->mcap) return INT_MAX;
    size_t i = merge_slot(t, ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1);
    if (!t->mkey[i]) return INT_MAX;
    *to = t->mto[i];
    return t->mrank[i];
}

// ---- loading

// vocab.json into t (ids, bytes) and strs (token string -> id)
static fsdp_status load_vocab(fsdp_tokenizer *t, const char *path, const char *text, size_t len, str_table *strs) {
    json_parser p = {text, len, 0, path, "JSON", "token", NULL};
    FSDP_CHECK(json_expect(&p, '{'));
    int first = 1, cap = 0;
    uint32_t inverse[324];  // GPT-2 alphabet character -> byte (+1; 0: not in the alphabet)
    memset(inverse, 0, sizeof inverse);
    for (int b = 0; b < 256; b++) inverse[byte_char(b)] = (uint32_t)b + 1;
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
            i += utf8_get((const unsigned char *)key + i, klen - i, &cp);
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
            if (!copy || (!str_put(strs, copy, (int32_t)id, &dup) && !dup))
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
        json_utf8_put(byte_char(b), sym);
        int32_t id = str_find(strs, sym, strlen(sym));
        if (id < 0)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: the single-byte token of byte 0x%02X ('%s') is missing", path, b, sym);
        t->byte_id[b] = id;
    }
    return FSDP_OK;
}

static fsdp_status load_merges(fsdp_tokenizer *t, const char *path, char *text, size_t len, const str_table *strs) {
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    t->mcap = 16;
    while (t->mcap < 2 * lines) t->mcap *= 2;
    t->mkey = calloc(t->mcap, sizeof *t->mkey);
    t->mrank = malloc(sizeof *t->mrank * t->mcap);
    t->mto = malloc(sizeof *t->mto * t->mcap);
    if (!t->mkey || !t->mrank || !t->mto) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
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
            int32_t a = str_find(strs, line, na), b = str_find(strs, sp + 1, nb);
            memcpy(joined, line, na);
            memcpy(joined + na, sp + 1, nb);
            int32_t ab = str_find(strs, joined, na + nb);
            if (a < 0 || b < 0)
                s = fsdp_error(FSDP_ERR_FORMAT, "%s: line %zu: '%.*s' is not a token of vocab.json", path, no,
                               a < 0 ? (int)na : (int)nb, a < 0 ? line : sp + 1);
            else if (ab < 0)
                s = fsdp_error(FSDP_ERR_FORMAT, "%s: line %zu: the merge '%.*s' makes '%.*s', which is not a token of "
                               "vocab.json", path, no, (int)n, line, (int)(na + nb), joined);
            if (s != FSDP_OK) break;
            uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
            size_t slot = merge_slot(t, key);  // a pair listed again takes its later rank, as encoder.py's dict does
            t->mkey[slot] = key, t->mrank[slot] = rank++, t->mto[slot] = ab;
        }
        line = nl ? nl + 1 : end;
    }
    free(joined);
    return s;
}

fsdp_status fsdp_tokenizer_open(const char *dir, fsdp_tokenizer **out) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return fsdp_error(FSDP_ERR_IO, "%s: not a directory (want one holding vocab.json and merges.txt)", dir);
    size_t dl = strlen(dir);
    char *vpath = malloc(dl + 16), *mpath = malloc(dl + 16);
    fsdp_tokenizer *t = calloc(1, sizeof *t);
    str_table strs = {calloc(1024, sizeof(char *)), calloc(1024, sizeof(int32_t)), 1024, 0};
    char *vtext = NULL, *mtext = NULL;
    size_t vlen = 0, mlen = 0;
    fsdp_status s = FSDP_OK;
    if (!vpath || !mpath || !t || !strs.keys || !strs.ids) s = fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (s == FSDP_OK) {
        snprintf(vpath, dl + 16, "%s/vocab.json", dir);
        snprintf(mpath, dl + 16, "%s/merges.txt", dir);
        s = read_file(vpath, &vtext, &vlen);
    }
    if (s == FSDP_OK) s = read_file(mpath, &mtext, &mlen);
    if (s == FSDP_OK) s = load_vocab(t, vpath, vtext, vlen, &strs);
    if (s == FSDP_OK) s = load_merges(t, mpath, mtext, mlen, &strs);
    if (s == FSDP_OK) t->fingerprint = fnv1a(fnv1a(14695981039346656037ull, vtext, vlen), mtext, mlen);
    str_free(&strs);
    free(vtext), free(mtext), free(vpath), free(mpath);
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
    free(t->bytes), free(t->nbytes), free(t->mkey), free(t->mrank), free(t->mto);
    free(t);
}

int fsdp_tokenizer_vocab(const fsdp_tokenizer *t) { return t->vocab; }
uint64_t fsdp_tokenizer_fingerprint(const fsdp_tokenizer *t) { return t->fingerprint; }

const unsigned char *fsdp_tokenizer_token_bytes(const fsdp_tokenizer *t, int id, size_t *len) {
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
            int r = merge_find(t, sym[i], sym[i + 1], &m);
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
        at += utf8_get(s + at, len - at, &cp[chars]);
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
    if (t->vocab > 65536)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: a vocabulary of %d ids does not fit llm.c's 16-bit tokens", path,
                          t->vocab);
    struct stat ts, cs;
    if (stat(path, &ts) != 0) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (stat(cache, &cs) == 0 && S_ISREG(cs.st_mode) && cs.st_size >= 1024 && newer_or_same(&cs, &ts)) {
        *reused = 1;
        *count = (size_t)(cs.st_size - 1024) / 2;
        return FSDP_OK;
    }
    char *text = NULL;
    size_t len = 0;
    FSDP_CHECK(read_file(path, &text, &len));
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
    int32_t header[256] = {20240520, 1, (int32_t)n};
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    uint16_t buf[4096];
    for (size_t i = 0; ok && i < n; i += 4096) {
        size_t m = n - i < 4096 ? n - i : 4096;
        for (size_t k = 0; k < m; k++) buf[k] = (uint16_t)ids[i + k];
        ok = fwrite(buf, sizeof buf[0], m, f) == m;
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
