// tokenizer_json_run.c: encoding through tokenizer.json's pipeline (added tokens, normalizers,
// pre-tokenizers, BPE, post-processor) and decoding through its decoders (tokenizer_json.h). Strings are
// byte strings throughout; the split behaviors follow the Rust library's NormalizedString::split.
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/tokenizer_json_impl.h"
#include "data/unicode_classes.h"
#include "data/unicode_nfc.h"

// ---- byte strings and lists of them

typedef struct {
    char *p;  // (n,) malloc'd
    size_t n;
    int at_start;  // begins at the text's first byte (Metaspace's prepend_scheme "first")
} piece;

typedef struct {
    piece *v;  // (n,)
    size_t n, cap;
} pieces;

static int pieces_push(pieces *l, const char *p, size_t n, int at_start) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 16;
        piece *g = realloc(l->v, sizeof *g * c);
        if (!g) return 0;
        l->v = g, l->cap = c;
    }
    char *copy = malloc(n + 1);
    if (!copy) return 0;
    memcpy(copy, p, n);
    l->v[l->n++] = (piece){copy, n, at_start};
    return 1;
}

static void pieces_free(pieces *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].p);
    free(l->v);
    l->v = NULL, l->n = l->cap = 0;
}

int tj_strings_push(tj_strings *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 16;
        char **gs = realloc(l->s, sizeof *gs * c);
        if (gs) l->s = gs;
        size_t *gl = gs ? realloc(l->len, sizeof *gl * c) : NULL;
        if (gl) l->len = gl;
        if (!gs || !gl) return 0;
        l->cap = c;
    }
    char *copy = malloc(len + 1);
    if (!copy) return 0;
    memcpy(copy, s, len);
    copy[len] = 0;
    l->s[l->n] = copy, l->len[l->n] = len, l->n++;
    return 1;
}

void tj_strings_free(tj_strings *l) {
    for (size_t i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s), free(l->len);
    l->s = NULL, l->len = NULL, l->n = l->cap = 0;
}

// s (n,) with every occurrence of a replaced by b, into *out (malloc'd, *out_n); 0 when out of memory
static int replace_all(const char *s, size_t n, const char *a, const char *b, char **out, size_t *out_n) {
    size_t na = strlen(a), nb = strlen(b), count = 0;
    for (size_t i = 0; na && i + na <= n;) {
        if (memcmp(s + i, a, na) == 0) count++, i += na;
        else i++;
    }
    char *o = malloc(n + count * nb + 1);
    if (!o) return 0;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (na && i + na <= n && memcmp(s + i, a, na) == 0) {
            memcpy(o + k, b, nb), k += nb, i += na;
        } else {
            o[k++] = s[i++];
        }
    }
    o[k] = 0;
    *out = o, *out_n = k;
    return 1;
}

// The code points of s (n,) into *cp and their byte offsets into *off ((count + 1,)); 0 when out of memory
static int decode_utf8(const char *s, size_t n, uint32_t **cp, size_t **off, size_t *count) {
    *cp = malloc(sizeof **cp * (n + 1));
    *off = malloc(sizeof **off * (n + 1));
    if (!*cp || !*off) {
        free(*cp), free(*off);
        return 0;
    }
    size_t c = 0;
    for (size_t at = 0; at < n; c++) {
        (*off)[c] = at;
        at += tok_utf8_get((const unsigned char *)s + at, n - at, &(*cp)[c]);
    }
    (*off)[c] = n;
    *count = c;
    return 1;
}

// ---- splitting (NormalizedString::split): spans cover the piece, each a match or not

typedef struct {
    size_t start, end;  // byte offsets
    int is_match;
} span;

typedef struct {
    span *v;  // (n,)
    size_t n, cap;
} spans;

static int spans_push(spans *l, size_t start, size_t end, int is_match) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 16;
        span *g = realloc(l->v, sizeof *g * c);
        if (!g) return 0;
        l->v = g, l->cap = c;
    }
    l->v[l->n++] = (span){start, end, is_match};
    return 1;
}

// Adds the match [s, e) after the previous one ending at *prev (the gap before it too)
static int spans_match(spans *l, size_t *prev, size_t s, size_t e) {
    if (s > *prev && !spans_push(l, *prev, s, 0)) return 0;
    *prev = e;
    return spans_push(l, s, e, 1);
}

// Applies behavior (SPLIT_*) and invert to the spans of p, appending the pieces to out
static int split_by(const piece *p, spans *m, int behavior, int invert, pieces *out) {
    for (size_t i = 0; invert && i < m->n; i++) m->v[i].is_match = !m->v[i].is_match;
    spans r = {0};  // the splits; is_match here: to be removed
    int ok = 1, previous = 0;
    if (behavior == SPLIT_MERGED_NEXT) {
        for (size_t k = m->n; ok && k-- > 0;) {
            span s = m->v[k];
            if (s.is_match && !previous && r.n) r.v[r.n - 1].start = s.start;
            else ok = spans_push(&r, s.start, s.end, 0);
            previous = s.is_match;
        }
        for (size_t a = 0, b = r.n ? r.n - 1 : 0; ok && a < b; a++, b--) {
            span x = r.v[a];
            r.v[a] = r.v[b], r.v[b] = x;
        }
    } else {
        for (size_t k = 0; ok && k < m->n; k++) {
            span s = m->v[k];
            if (behavior == SPLIT_ISOLATED) ok = spans_push(&r, s.start, s.end, 0);
            else if (behavior == SPLIT_REMOVED) ok = spans_push(&r, s.start, s.end, s.is_match);
            else if (behavior == SPLIT_CONTIGUOUS && s.is_match == previous && r.n) r.v[r.n - 1].end = s.end;
            else if (behavior == SPLIT_MERGED_PREVIOUS && s.is_match && !previous && r.n) r.v[r.n - 1].end = s.end;
            else ok = spans_push(&r, s.start, s.end, 0);
            previous = s.is_match;
        }
    }
    for (size_t k = 0; ok && k < r.n; k++)
        if (!r.v[k].is_match && r.v[k].end > r.v[k].start)
            ok = pieces_push(out, p->p + r.v[k].start, r.v[k].end - r.v[k].start, p->at_start && r.v[k].start == 0);
    free(r.v);
    return ok;
}

// The spans of p under regex re
static int regex_spans(const tok_regex *re, const piece *p, spans *m) {
    uint32_t *cp;
    size_t *off, count, prev = 0, at = 0, s, e;
    if (!decode_utf8(p->p, p->n, &cp, &off, &count)) return 0;
    int ok = 1, found = 0;
    while (ok && (found = tok_regex_find(re, cp, count, at, &s, &e)) == 1) {
        ok = spans_match(m, &prev, off[s], off[e]);
        at = e;
    }
    if (found < 0) ok = 0;
    if (ok && prev < p->n) ok = spans_push(m, prev, p->n, 0);
    free(cp), free(off);
    return ok;
}

// The spans of p where each character for which digit (a number) or the replacement r (r non-NULL) is
// a match of its own
static int char_spans(const piece *p, const char *r, spans *m) {
    size_t prev = 0, rn = r ? strlen(r) : 0;
    int ok = 1;
    for (size_t at = 0; ok && at < p->n;) {
        uint32_t cp;
        size_t k = tok_utf8_get((const unsigned char *)p->p + at, p->n - at, &cp);
        int hit = r ? k == rn && memcmp(p->p + at, r, rn) == 0 : cp != UINT32_MAX && fsdp_unicode_is_number(cp);
        if (hit) ok = spans_match(m, &prev, at, at + k);
        at += k;
    }
    if (ok && prev < p->n) ok = spans_push(m, prev, p->n, 0);
    return ok;
}

// Runs pre-tokenizer t over p, appending the pieces it makes to out
static int pretokenize(const tj_pretokenizer *t, piece *p, pieces *out) {
    spans m = {0};
    int ok = 1;
    if (t->kind == PRE_BYTE_LEVEL) {
        if (t->add_prefix_space && (p->n == 0 || p->p[0] != ' ')) {
            char *g = malloc(p->n + 2);
            if (!g) return 0;
            g[0] = ' ';
            memcpy(g + 1, p->p, p->n);
            free(p->p);
            p->p = g, p->n++;
        }
        if (!t->re) return pieces_push(out, p->p, p->n, p->at_start);
        ok = regex_spans(t->re, p, &m) && split_by(p, &m, SPLIT_ISOLATED, 0, out);
    } else if (t->kind == PRE_SPLIT) {
        ok = regex_spans(t->re, p, &m) && split_by(p, &m, t->behavior, t->invert, out);
    } else if (t->kind == PRE_DIGITS) {
        ok = char_spans(p, NULL, &m) && split_by(p, &m, t->individual_digits ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, 0, out);
    } else {  // Metaspace
        char *r;
        size_t rn;
        if (!replace_all(p->p, p->n, " ", t->replacement, &r, &rn)) return 0;
        size_t k = strlen(t->replacement);
        int starts = rn >= k && memcmp(r, t->replacement, k) == 0;
        int prepend = !starts && (t->prepend_scheme == PREPEND_ALWAYS || (t->prepend_scheme == PREPEND_FIRST && p->at_start));
        char *g = malloc(rn + k + 1);
        if (!g) {
            free(r);
            return 0;
        }
        if (prepend) memcpy(g, t->replacement, k);
        memcpy(g + (prepend ? k : 0), r, rn);
        free(r);
        free(p->p);
        p->p = g, p->n = rn + (prepend ? k : 0);
        if (!t->split) return pieces_push(out, p->p, p->n, p->at_start);
        ok = char_spans(p, t->replacement, &m) && split_by(p, &m, SPLIT_MERGED_NEXT, 0, out);
    }
    free(m.v);
    return ok;
}

// ---- normalizers

// NFC of s (n,) into *out (malloc'd, *out_n); a stray byte stays as it is (a starter that never composes)
static int nfc(const char *s, size_t n, char **out, size_t *out_n) {
    uint32_t *cp = malloc(sizeof *cp * (n + 1)), *composed = NULL;
    size_t count = 0, m = 0;
    int ok = cp != NULL;
    for (size_t at = 0; ok && at < n; count++) {
        size_t k = tok_utf8_get((const unsigned char *)s + at, n - at, &cp[count]);
        if (cp[count] == UINT32_MAX) cp[count] = 0x110000u + (unsigned char)s[at];  // above Unicode: passed through
        at += k;
    }
    ok = ok && fsdp_unicode_nfc(cp, count, &composed, &m);
    char *o = ok ? malloc(4 * m + 1) : NULL;
    size_t k = 0;
    for (size_t i = 0; o && i < m; i++) {
        if (composed[i] > 0x10FFFF) o[k++] = (char)(composed[i] - 0x110000u);
        else k += json_utf8_put(composed[i], o + k);
    }
    free(cp), free(composed);
    if (!o) return 0;
    o[k] = 0;
    *out = o, *out_n = k;
    return 1;
}

// Runs j's normalizers over *s (*n bytes, malloc'd; replaced)
static int normalize(const tok_json *j, char **s, size_t *n) {
    for (int i = 0; i < j->nnorms; i++) {
        const tj_normalizer *z = &j->norms[i];
        char *o = NULL;
        size_t on = 0;
        if (z->kind == NORM_PREPEND) {
            if (*n == 0) continue;
            size_t k = strlen(z->a);
            o = malloc(*n + k + 1);
            if (!o) return 0;
            memcpy(o, z->a, k), memcpy(o + k, *s, *n);
            on = *n + k;
        } else if (z->kind == NORM_NFC) {
            if (!nfc(*s, *n, &o, &on)) return 0;
        } else if (z->a) {
            if (!replace_all(*s, *n, z->a, z->b, &o, &on)) return 0;
        } else {  // a Regex pattern: every match replaced by the content
            piece p = {*s, *n, 0};
            spans m = {0};
            size_t k = strlen(z->b);
            int ok = regex_spans(z->re, &p, &m);
            size_t matches = 0;
            for (size_t q = 0; ok && q < m.n; q++) matches += m.v[q].is_match;
            o = ok ? malloc(*n + matches * k + 1) : NULL;
            for (size_t q = 0; o && q < m.n; q++) {
                const char *src = m.v[q].is_match ? z->b : *s + m.v[q].start;
                size_t len = m.v[q].is_match ? k : m.v[q].end - m.v[q].start;
                memcpy(o + on, src, len), on += len;
            }
            free(m.v);
            if (!o) return 0;
        }
        free(*s);
        *s = o, *n = on;
    }
    return 1;
}

// ---- the model

typedef struct {
    int32_t *v;  // (n,)
    size_t n, cap;
} ids_list;

static int ids_push(ids_list *l, int32_t id) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 256;
        int32_t *g = realloc(l->v, sizeof *g * c);
        if (!g) return 0;
        l->v = g, l->cap = c;
    }
    l->v[l->n++] = id;
    return 1;
}

// A candidate merge of the symbol at pos with the next one (checked again when taken: either may have
// merged since)
typedef struct {
    int32_t rank, pos;
} candidate;

// Min-heap by (rank, pos): the lowest rank first, the leftmost among equal ranks. h: (*n,)
static void heap_push(candidate *h, size_t *n, candidate c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up].rank < c.rank || (h[up].rank == c.rank && h[up].pos < c.pos)) break;
        h[i] = h[up], i = up;
    }
    h[i] = c;
}

static candidate heap_pop(candidate *h, size_t *n) {
    candidate top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n) break;
        if (k + 1 < *n && (h[k + 1].rank < h[k].rank || (h[k + 1].rank == h[k].rank && h[k + 1].pos < h[k].pos))) k++;
        if (last.rank < h[k].rank || (last.rank == h[k].rank && last.pos < h[k].pos)) break;
        h[i] = h[k], i = k;
    }
    if (*n) h[i] = last;
    return top;
}

// Merges sym's symbols as the library's BPE does (a priority queue of adjacent pairs by rank, then
// position; a merge is taken only if the pair is still there), appending the result to out. O(n log n),
// so a whole unsplit text (Llama 2 has no pre-tokenizer) stays fast.
static int merge_symbols(const tok_json *j, ids_list *sym, ids_list *out) {
    size_t n = sym->n;
    if (n > INT32_MAX / 2) return 0;
    int32_t *id = sym->v;
    int32_t *next = malloc(sizeof *next * (n + 1)), *prev = malloc(sizeof *prev * (n + 1));  // (n,) links, -1 at the ends
    candidate *heap = malloc(sizeof *heap * (3 * n + 1));  // n - 1 at first, at most two more per merge
    size_t nh = 0;
    if (!next || !prev || !heap) {
        free(next), free(prev), free(heap);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1, prev[i] = (int32_t)i - 1;
        int32_t to;
        int r = i + 1 < n ? tok_merge_find(&j->merges, id[i], id[i + 1], &to) : INT_MAX;
        if (r != INT_MAX) heap_push(heap, &nh, (candidate){r, (int32_t)i});
    }
    while (nh) {
        candidate c = heap_pop(heap, &nh);
        int32_t a = c.pos, b = next[a], to;
        if (id[a] < 0 || b < 0 || tok_merge_find(&j->merges, id[a], id[b], &to) != c.rank) continue;
        id[a] = to, id[b] = -1;  // b is gone
        next[a] = next[b];
        if (next[b] >= 0) prev[next[b]] = a;
        int r;
        if (prev[a] >= 0 && (r = tok_merge_find(&j->merges, id[prev[a]], id[a], &to)) != INT_MAX)
            heap_push(heap, &nh, (candidate){r, prev[a]});
        if (next[a] >= 0 && (r = tok_merge_find(&j->merges, id[a], id[next[a]], &to)) != INT_MAX)
            heap_push(heap, &nh, (candidate){r, a});
    }
    int ok = 1;
    for (int32_t i = n ? 0 : -1; ok && i >= 0; i = next[i]) ok = ids_push(out, id[i]);
    free(next), free(prev), free(heap);
    return ok;
}

// The BPE of piece p, appended to out; sym: scratch
static int bpe_piece(const tok_json *j, const piece *p, ids_list *sym, ids_list *out) {
    sym->n = 0;
    char *alpha = NULL;  // byte-level: the piece in GPT-2's alphabet (for ignore_merges)
    if (j->ignore_merges) {
        const char *key = p->p;
        size_t kn = p->n;
        if (j->byte_level) {
            alpha = malloc(2 * p->n + 1);
            if (!alpha) return 0;
            kn = 0;
            for (size_t i = 0; i < p->n; i++) kn += json_utf8_put(tok_byte_char((unsigned char)p->p[i]), alpha + kn);
            key = alpha;
        }
        int32_t id = tok_str_find(&j->strs, key, kn);
        free(alpha);
        if (id >= 0) return ids_push(out, id);
    }
    int32_t unk_pending = 0;  // 1 while an unknown run waits (fuse_unk)
    for (size_t at = 0; at < p->n;) {
        uint32_t cp;
        size_t k = j->byte_level ? 1 : tok_utf8_get((const unsigned char *)p->p + at, p->n - at, &cp);
        int32_t id = j->byte_level ? j->byte_id[(unsigned char)p->p[at]] : tok_str_find(&j->strs, p->p + at, k);
        if (id >= 0) {
            if (unk_pending && !ids_push(sym, j->unk)) return 0;
            unk_pending = 0;
            if (!ids_push(sym, id)) return 0;
        } else {
            int fell_back = 0;
            if (j->byte_fallback) {
                fell_back = 1;
                for (size_t b = 0; b < k; b++) fell_back &= j->fallback_id[(unsigned char)p->p[at + b]] >= 0;
                for (size_t b = 0; fell_back && b < k; b++)
                    if (!ids_push(sym, j->fallback_id[(unsigned char)p->p[at + b]])) return 0;
            }
            if (!fell_back && j->unk >= 0) {
                if (unk_pending && !j->fuse_unk && !ids_push(sym, j->unk)) return 0;
                unk_pending = 1;
            }
        }
        at += k;
    }
    if (unk_pending && !ids_push(sym, j->unk)) return 0;
    return merge_symbols(j, sym, out);
}

// Normalizes, pre-tokenizes and BPE-encodes the text s (n,) between added tokens, appending to out
static int encode_segment(const tok_json *j, const char *s, size_t n, int at_start, ids_list *sym, ids_list *out) {
    if (n == 0) return 1;
    char *norm = malloc(n + 1);
    size_t nn = n;
    if (!norm) return 0;
    memcpy(norm, s, n);
    if (!normalize(j, &norm, &nn)) {
        free(norm);
        return 0;
    }
    pieces cur = {0};
    int ok = pieces_push(&cur, norm, nn, at_start);
    free(norm);
    for (int i = 0; ok && i < j->npres; i++) {
        pieces next = {0};
        for (size_t k = 0; ok && k < cur.n; k++) ok = pretokenize(&j->pres[i], &cur.v[k], &next);
        pieces_free(&cur);
        cur = next;
    }
    for (size_t k = 0; ok && k < cur.n; k++) ok = bpe_piece(j, &cur.v[k], sym, out);
    pieces_free(&cur);
    return ok;
}

// The length of the white-space character (Unicode's) ending at s[end] (exclusive), not before floor,
// or 0
static size_t space_before(const char *s, size_t floor, size_t end) {
    if (end <= floor) return 0;
    size_t b = end - 1;
    while (b > floor && end - b < 4 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;  // back over continuation bytes
    uint32_t cp;
    size_t k = tok_utf8_get((const unsigned char *)s + b, end - b, &cp);
    return b + k == end && cp != UINT32_MAX && fsdp_unicode_is_space(cp) ? k : 0;
}

// The length of the white-space character starting at s[at] (n bytes in all), or 0
static size_t space_at(const char *s, size_t n, size_t at) {
    uint32_t cp;
    size_t k = tok_utf8_get((const unsigned char *)s + at, n - at, &cp);
    return cp != UINT32_MAX && fsdp_unicode_is_space(cp) ? k : 0;
}

// The first added token in s[from..n): 1 with its index *which and its extent [*ms, *me) (lstrip and
// rstrip widen it over white space, not before floor), or 0
static int find_added(const tok_json *j, const char *s, size_t n, size_t from, size_t floor, int *which, size_t *ms,
                      size_t *me) {
    for (size_t i = from; i < n; i++) {
        if (!j->added_first[(unsigned char)s[i]]) continue;
        for (int a = 0; a < j->nadded; a++) {
            const tj_added *t = &j->added[a];
            if (t->len > n - i || memcmp(s + i, t->content, t->len) != 0) continue;
            size_t b = i, e = i + t->len, k;
            while (t->lstrip && (k = space_before(s, floor, b)) > 0) b -= k;
            while (t->rstrip && e < n && (k = space_at(s, n, e)) > 0) e += k;
            *which = a, *ms = b, *me = e;
            return 1;
        }
    }
    return 0;
}

fsdp_status tok_json_encode(const tok_json *j, const char *text, size_t len, int add_special, int32_t **ids,
                            size_t *n) {
    *ids = NULL;
    *n = 0;
    ids_list out = {0}, sym = {0};
    int ok = 1;
    for (int i = 0; add_special && ok && i < j->nbefore; i++) ok = ids_push(&out, j->before[i]);
    size_t seg = 0;
    while (ok) {
        int which = -1;
        size_t ms = len, me = len;
        int found = j->nadded && find_added(j, text, len, seg, seg, &which, &ms, &me);
        ok = encode_segment(j, text + seg, ms - seg, seg == 0, &sym, &out);
        if (!found) break;
        if (ok) ok = ids_push(&out, j->added[which].id);
        seg = me;
    }
    for (int i = 0; add_special && ok && i < j->nafter; i++) ok = ids_push(&out, j->after[i]);
    free(sym.v);
    if (!ok || !ids_push(&out, 0)) {  // (the extra slot keeps an empty encoding non-NULL)
        free(out.v);
        return fsdp_error(FSDP_ERR_NOMEM, "encoding %zu bytes of text: out of memory, or a tokenizer.json regex "
                          "backtracking past its step budget", len);
    }
    *ids = out.v;
    *n = out.n - 1;
    return FSDP_OK;
}

// ---- decoding

// Replaces l's strings from index a on by their concatenation
static int fuse_from(tj_strings *l, size_t a) {
    if (l->n <= a + 1) return 1;
    size_t total = 0;
    for (size_t i = a; i < l->n; i++) total += l->len[i];
    char *o = malloc(total + 1);
    if (!o) return 0;
    size_t k = 0;
    for (size_t i = a; i < l->n; i++) memcpy(o + k, l->s[i], l->len[i]), k += l->len[i], free(l->s[i]);
    o[k] = 0;
    l->s[a] = o, l->len[a] = k, l->n = a + 1;
    return 1;
}

// <0xHH>: the byte, or -1
static int fallback_byte(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || !s[3] || !s[4]) return -1;
    const char *a = strchr(hex, s[3]), *b = strchr(hex, s[4]);
    return a && b ? (int)((a - hex) * 16 + (b - hex)) : -1;
}

static int decode_byte_level(tj_strings *l) {
    static int inverse[324];  // GPT-2 alphabet character -> byte + 1 (0: none); built on first use
    if (!inverse['!']) {
        for (int b = 0; b < 256; b++) inverse[tok_byte_char(b)] = b + 1;
    }
    for (size_t i = 0; i < l->n; i++) {
        char *o = malloc(l->len[i] + 1);
        if (!o) return 0;
        size_t k = 0, at = 0;
        int outside = 0;
        while (at < l->len[i] && !outside) {
            uint32_t cp;
            at += tok_utf8_get((const unsigned char *)l->s[i] + at, l->len[i] - at, &cp);
            outside = cp >= 324 || !inverse[cp];
            if (!outside) o[k++] = (char)(inverse[cp] - 1);
        }
        if (outside) {
            free(o);  // a character outside the alphabet: the token stays as it is
            continue;
        }
        o[k] = 0;
        free(l->s[i]);
        l->s[i] = o, l->len[i] = k;
    }
    return 1;
}

int tj_decode_chain(const tok_json *j, tj_strings *l, int first, int strip) {
    if (!j->has_decoder) {  // the library joins the tokens with spaces
        tj_strings joined = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (!tj_strings_push(&joined, l->s[i], l->len[i])) return tj_strings_free(&joined), 0;
            if (i + 1 < l->n && !tj_strings_push(&joined, " ", 1)) return tj_strings_free(&joined), 0;
        }
        tj_strings_free(l);
        *l = joined;
        return 1;
    }
    for (int d = 0; d < j->ndecs; d++) {
        const tj_decoder *z = &j->decs[d];
        switch (z->kind) {
        case DEC_BYTE_LEVEL:
            if (!decode_byte_level(l)) return 0;
            break;
        case DEC_FUSE:
            if (!fuse_from(l, 0)) return 0;
            break;
        case DEC_BYTE_FALLBACK: {  // each run of <0xHH> tokens becomes one token of their bytes
            size_t w = 0;
            for (size_t i = 0; i < l->n;) {
                size_t e = i;
                while (e < l->n && fallback_byte(l->s[e], l->len[e]) >= 0) e++;
                if (e == i) {
                    l->s[w] = l->s[i], l->len[w] = l->len[i], w++, i++;
                    continue;
                }
                char *o = malloc(e - i + 1);
                if (!o) return 0;
                for (size_t k = i; k < e; k++) o[k - i] = (char)fallback_byte(l->s[k], l->len[k]), free(l->s[k]);
                o[e - i] = 0;
                l->s[w] = o, l->len[w] = e - i, w++, i = e;
            }
            l->n = w;
            break;
        }
        case DEC_METASPACE:
        case DEC_REPLACE:
            for (size_t i = 0; i < l->n; i++) {
                char *o;
                size_t on;
                if (!replace_all(l->s[i], l->len[i], z->kind == DEC_REPLACE ? z->a : z->replacement,
                                 z->kind == DEC_REPLACE ? z->b : " ", &o, &on))
                    return 0;
                if (z->kind == DEC_METASPACE && i == 0 && first && z->prepend_scheme != PREPEND_NEVER && on && o[0] == ' ')
                    memmove(o, o + 1, on--);
                free(l->s[i]);
                l->s[i] = o, l->len[i] = on;
            }
            break;
        case DEC_STRIP:
            for (size_t i = 0; strip && i < l->n; i++) {
                size_t k = strlen(z->a), b = 0, e = l->len[i];
                for (int c = 0; c < z->start && b + k <= e && memcmp(l->s[i] + b, z->a, k) == 0; c++) b += k;
                for (int c = 0; c < z->stop && e >= b + k && memcmp(l->s[i] + e - k, z->a, k) == 0; c++) e -= k;
                memmove(l->s[i], l->s[i] + b, e - b);
                l->len[i] = e - b;
                l->s[i][l->len[i]] = 0;
            }
            break;
        }
    }
    return 1;
}

fsdp_status tok_json_decode(const tok_json *j, const int32_t *ids, size_t n, int skip_special, unsigned char **out,
                            size_t *len) {
    *out = NULL;
    *len = 0;
    tj_strings l = {0};
    int ok = 1;
    for (size_t i = 0; ok && i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= j->vocab || !j->token[id] || (skip_special && j->is_special[id])) continue;
        ok = tj_strings_push(&l, j->token[id], strlen(j->token[id]));
    }
    ok = ok && tj_decode_chain(j, &l, 1, 1) && fuse_from(&l, 0) && (l.n || tj_strings_push(&l, "", 0));
    if (!ok) {
        tj_strings_free(&l);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    }
    *out = (unsigned char *)l.s[0];
    *len = l.len[0];
    free(l.s), free(l.len);
    return FSDP_OK;
}
