// tok_regex.c: the pattern parsed into a tree, emitted as a program for a backtracking machine (as in
// Russ Cox's re1 "backtrack"): CHAR/CLASS/ANY consume a code point, SPLIT x y tries x then y, JMP, LOOK
// runs a lookahead's sub-program at the position, MATCH ends. Counted repetition is emitted as copies.
#include "data/tok_regex.h"

#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_common.h"
#include "data/unicode_classes.h"

enum { PROP_L = 1, PROP_N = 2, PROP_S = 4, PROP_D = 8 };  // \p{L} \p{N} \s [0-9]

typedef struct {
    uint32_t (*ranges)[2];  // (nranges, 2) inclusive code-point ranges
    int nranges, props, nprops, negated, fold;  // props: PROP_* in the class; nprops: their complements
} char_class;

enum { N_CHAR, N_ANY, N_CLASS, N_CAT, N_ALT, N_REPEAT, N_LOOK };
typedef struct node node;
struct node {
    int kind;
    uint32_t c;          // N_CHAR
    int fold;            // N_CHAR: case-insensitive
    int cls;             // N_CLASS: index into the class list
    node **kids;         // N_CAT, N_ALT: (nkids,); N_REPEAT, N_LOOK: (1,)
    int nkids;
    int min, max, lazy;  // N_REPEAT (max -1: unbounded)
    int negative;        // N_LOOK
};

enum { OP_CHAR, OP_CHAR_FOLD, OP_ANY, OP_CLASS, OP_SPLIT, OP_JMP, OP_LOOK, OP_MATCH };
typedef struct {
    int op, x, y;  // CHAR: x the code point; CLASS: x the class; SPLIT: x first, y second; JMP: x;
                   // LOOK: x negative, y the pc after the sub-program (which starts at pc + 1)
} instr;

struct tok_regex {
    instr *prog;          // (nprog,)
    int nprog, cap;
    char_class *classes;  // (nclasses,)
    int nclasses;
};

typedef struct {
    const uint32_t *p;  // the pattern's code points, (n,)
    size_t n, pos;
    int fold;           // inside (?i:...)
    const char *err;
    tok_regex *re;
} parser;

static uint32_t fold_char(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c == 0x17F) return 's';
    if (c == 0x212A) return 'k';
    return c;
}

static node *new_node(parser *ps, int kind) {
    node *n = calloc(1, sizeof *n);
    if (!n) ps->err = "out of memory";
    else n->kind = kind;
    return n;
}

static void free_node(node *n) {
    if (!n) return;
    for (int i = 0; i < n->nkids; i++) free_node(n->kids[i]);
    free(n->kids);
    free(n);
}

static int add_kid(parser *ps, node *n, node *k) {
    node **g = realloc(n->kids, sizeof *g * (size_t)(n->nkids + 1));
    if (!g) {
        ps->err = "out of memory";
        free_node(k);
        return 0;
    }
    n->kids = g;
    n->kids[n->nkids++] = k;
    return 1;
}

static int peek(parser *ps) { return ps->pos < ps->n ? (int)ps->p[ps->pos] : -1; }

static int add_range(parser *ps, char_class *c, uint32_t lo, uint32_t hi) {
    uint32_t(*g)[2] = realloc(c->ranges, sizeof *g * (size_t)(c->nranges + 1));
    if (!g) {
        ps->err = "out of memory";
        return 0;
    }
    c->ranges = g;
    c->ranges[c->nranges][0] = lo, c->ranges[c->nranges][1] = hi;
    c->nranges++;
    return 1;
}

// After a backslash: a class escape (\p{L} \s \d ... : *props / *nprops set, returns 2) or a single
// character (*c, returns 1); 0 on an unsupported escape.
static int parse_escape(parser *ps, uint32_t *c, int *props, int *nprops) {
    int e = peek(ps);
    ps->pos++;
    *props = *nprops = 0;
    switch (e) {
    case 'r': *c = '\r'; return 1;
    case 'n': *c = '\n'; return 1;
    case 't': *c = '\t'; return 1;
    case 'f': *c = '\f'; return 1;
    case 'v': *c = '\v'; return 1;
    case 's': *props = PROP_S; return 2;
    case 'S': *nprops = PROP_S; return 2;
    case 'd': *props = PROP_D; return 2;
    case 'D': *nprops = PROP_D; return 2;
    case 'p':
    case 'P': {
        uint32_t name = 0;
        if (peek(ps) == '{' && ps->pos + 2 < ps->n && ps->p[ps->pos + 2] == '}') name = ps->p[ps->pos + 1], ps->pos += 3;
        else if (peek(ps) == 'L' || peek(ps) == 'N') name = (uint32_t)peek(ps), ps->pos++;  // \pL \pN
        int prop = name == 'L' ? PROP_L : name == 'N' ? PROP_N : 0;
        if (!prop) {
            ps->err = "a Unicode property other than \\p{L} and \\p{N}";
            return 0;
        }
        *(e == 'p' ? props : nprops) = prop;
        return 2;
    }
    default:
        if (e > 0 && e < 128 && !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))) {
            *c = (uint32_t)e;  // escaped punctuation stands for itself
            return 1;
        }
        ps->err = e < 0 ? "a trailing backslash" : "an escape it does not know (\\w, \\b, \\x, \\A, backreferences, ...)";
        return 0;
    }
}

static node *parse_class(parser *ps) {
    ps->pos++;  // '['
    char_class c = {NULL, 0, 0, 0, 0, ps->fold};
    if (peek(ps) == '^') c.negated = 1, ps->pos++;
    int first = 1;
    while (!ps->err) {
        int ch = peek(ps);
        if (ch < 0) {
            ps->err = "an unterminated [...] class";
            break;
        }
        if (ch == ']' && !first) {
            ps->pos++;
            break;
        }
        first = 0;
        if (ch == '[') {
            ps->err = "a nested class or POSIX bracket in [...]";
            break;
        }
        uint32_t lo = (uint32_t)ch;
        ps->pos++;
        if (ch == '\\') {
            int props, nprops, k = parse_escape(ps, &lo, &props, &nprops);
            if (k == 0) break;
            if (k == 2) {
                c.props |= props, c.nprops |= nprops;
                continue;
            }
        }
        uint32_t hi = lo;
        if (peek(ps) == '-' && ps->pos + 1 < ps->n && ps->p[ps->pos + 1] != ']') {
            ps->pos++;
            int h = peek(ps);
            ps->pos++;
            hi = (uint32_t)h;
            if (h == '\\') {
                int props, nprops;
                if (parse_escape(ps, &hi, &props, &nprops) != 1) {
                    if (!ps->err) ps->err = "a class escape as a range's end";
                    break;
                }
            }
            if (hi < lo) {
                ps->err = "a range whose end is below its start";
                break;
            }
        }
        if (!add_range(ps, &c, lo, hi)) break;
    }
    tok_regex *re = ps->re;
    char_class *g = ps->err ? NULL : realloc(re->classes, sizeof *g * (size_t)(re->nclasses + 1));
    node *n = g ? new_node(ps, N_CLASS) : NULL;
    if (g) re->classes = g;
    if (!n) {
        if (!ps->err) ps->err = "out of memory";
        free(c.ranges);
        return NULL;
    }
    n->cls = re->nclasses;
    re->classes[re->nclasses++] = c;
    return n;
}

static node *parse_alt(parser *ps);

// One atom: a character, '.', a class, an escape or a group
static node *parse_atom(parser *ps) {
    int ch = peek(ps);
    if (ch == '(') {
        ps->pos++;
        int fold = ps->fold, look = -1;
        if (peek(ps) == '?') {
            ps->pos++;
            int k = peek(ps);
            ps->pos++;
            if (k == ':') {
            } else if (k == 'i' && peek(ps) == ':') {
                ps->pos++;
                ps->fold = 1;
            } else if (k == '!' || k == '=') {
                look = k == '!';
            } else {
                ps->err = "a group kind other than (?:...), (?i:...), (?!...) and (?=...)";
                return NULL;
            }
        }
        node *inner = parse_alt(ps);
        ps->fold = fold;
        if (!inner) return NULL;
        if (peek(ps) != ')') {
            free_node(inner);
            ps->err = "an unbalanced '('";
            return NULL;
        }
        ps->pos++;
        if (look < 0) return inner;
        node *n = new_node(ps, N_LOOK);
        if (!n || !add_kid(ps, n, inner)) {
            if (!n) free_node(inner);
            free_node(n);
            return NULL;
        }
        n->negative = look;
        return n;
    }
    if (ch == '[') return parse_class(ps);
    if (ch == '^' || ch == '$') {
        ps->err = "anchors (^, $)";
        return NULL;
    }
    ps->pos++;
    if (ch == '.') return new_node(ps, N_ANY);
    uint32_t c = (uint32_t)ch;
    if (ch == '\\') {
        int props, nprops, k = parse_escape(ps, &c, &props, &nprops);
        if (k == 0) return NULL;
        if (k == 2) {  // a class of one escape
            char_class cc = {NULL, 0, props, nprops, 0, 0};
            char_class *g = realloc(ps->re->classes, sizeof *g * (size_t)(ps->re->nclasses + 1));
            node *n = g ? new_node(ps, N_CLASS) : NULL;
            if (g) ps->re->classes = g;
            if (!n) {
                ps->err = "out of memory";
                return NULL;
            }
            n->cls = ps->re->nclasses;
            ps->re->classes[ps->re->nclasses++] = cc;
            return n;
        }
    }
    node *n = new_node(ps, N_CHAR);
    if (n) n->c = ps->fold ? fold_char(c) : c, n->fold = ps->fold;
    return n;
}

// Reads digits at the position into *v; 0 where there are none
static int parse_int(parser *ps, int *v) {
    int k = 0;
    *v = 0;
    while (peek(ps) >= '0' && peek(ps) <= '9' && *v < 100000) *v = *v * 10 + (peek(ps) - '0'), ps->pos++, k++;
    return k > 0;
}

static int nullable(const node *n) {
    switch (n->kind) {
    case N_CAT:
        for (int i = 0; i < n->nkids; i++)
            if (!nullable(n->kids[i])) return 0;
        return 1;
    case N_ALT:
        for (int i = 0; i < n->nkids; i++)
            if (nullable(n->kids[i])) return 1;
        return 0;
    case N_REPEAT: return n->min == 0 || nullable(n->kids[0]);
    case N_LOOK: return 1;
    default: return 0;
    }
}

static node *parse_repeat(parser *ps) {
    node *a = parse_atom(ps);
    while (a && !ps->err) {
        int ch = peek(ps), min, max;
        if (ch == '?') min = 0, max = 1;
        else if (ch == '*') min = 0, max = -1;
        else if (ch == '+') min = 1, max = -1;
        else if (ch == '{') {
            size_t save = ps->pos++;
            if (!parse_int(ps, &min)) {
                ps->pos = save;  // a literal '{'
                break;
            }
            max = min;
            if (peek(ps) == ',') {
                ps->pos++;
                if (!parse_int(ps, &max)) max = -1;
            }
            if (peek(ps) != '}' || (max >= 0 && max < min) || min > 1000 || max > 1000) {
                ps->err = "a malformed or too large {m,n}";
                break;
            }
        } else break;
        ps->pos++;
        int lazy = peek(ps) == '?';
        if (lazy) ps->pos++;
        if (peek(ps) == '+') {
            ps->err = "possessive quantifiers";
            break;
        }
        if (max < 0 && nullable(a)) {
            ps->err = "an unbounded repetition of something that can match nothing";
            break;
        }
        node *r = new_node(ps, N_REPEAT);
        if (!r || !add_kid(ps, r, a)) {
            if (!r) free_node(a);
            free_node(r);
            return NULL;
        }
        r->min = min, r->max = max, r->lazy = lazy;
        a = r;
    }
    if (ps->err) {
        free_node(a);
        return NULL;
    }
    return a;
}

static node *parse_cat(parser *ps) {
    node *n = new_node(ps, N_CAT);
    while (n && !ps->err && peek(ps) >= 0 && peek(ps) != '|' && peek(ps) != ')') {
        node *k = parse_repeat(ps);
        if (!k || !add_kid(ps, n, k)) break;
    }
    if (ps->err) {
        free_node(n);
        return NULL;
    }
    return n;
}

static node *parse_alt(parser *ps) {
    node *n = new_node(ps, N_ALT);
    while (n && !ps->err) {
        node *k = parse_cat(ps);
        if (!k || !add_kid(ps, n, k)) break;
        if (peek(ps) != '|') break;
        ps->pos++;
    }
    if (ps->err) {
        free_node(n);
        return NULL;
    }
    return n;
}

// ---- emitting the program

static int emit(tok_regex *re, int op, int x, int y) {
    if (re->nprog == re->cap) {
        int cap = re->cap ? re->cap * 2 : 64;
        instr *g = realloc(re->prog, sizeof *g * (size_t)cap);
        if (!g) return -1;
        re->prog = g, re->cap = cap;
    }
    re->prog[re->nprog] = (instr){op, x, y};
    return re->nprog++;
}

// Emits n; 0 when out of memory (or the program grows past 1 << 20 instructions)
static int gen(tok_regex *re, const node *n) {
    if (re->nprog > (1 << 20)) return 0;
    switch (n->kind) {
    case N_CHAR: return emit(re, n->fold ? OP_CHAR_FOLD : OP_CHAR, (int)n->c, 0) >= 0;
    case N_ANY: return emit(re, OP_ANY, 0, 0) >= 0;
    case N_CLASS: return emit(re, OP_CLASS, n->cls, 0) >= 0;
    case N_CAT:
        for (int i = 0; i < n->nkids; i++)
            if (!gen(re, n->kids[i])) return 0;
        return 1;
    case N_ALT: {
        if (n->nkids == 1) return gen(re, n->kids[0]);
        int *jumps = malloc(sizeof *jumps * (size_t)n->nkids), ok = jumps != NULL;
        for (int i = 0; ok && i < n->nkids; i++) {
            int split = i + 1 < n->nkids ? emit(re, OP_SPLIT, 0, 0) : -1;
            if (i + 1 < n->nkids && split < 0) ok = 0;
            if (ok && split >= 0) re->prog[split].x = split + 1;
            ok = ok && gen(re, n->kids[i]);
            jumps[i] = ok && i + 1 < n->nkids ? emit(re, OP_JMP, 0, 0) : -1;
            if (ok && i + 1 < n->nkids && jumps[i] < 0) ok = 0;
            if (ok && split >= 0) re->prog[split].y = re->nprog;
        }
        for (int i = 0; ok && i + 1 < n->nkids; i++) re->prog[jumps[i]].x = re->nprog;
        free(jumps);
        return ok;
    }
    case N_REPEAT: {
        const node *k = n->kids[0];
        for (int i = 0; i < n->min; i++)
            if (!gen(re, k)) return 0;
        if (n->max < 0) {  // L: SPLIT body, out; body; JMP L
            int split = emit(re, OP_SPLIT, 0, 0);
            if (split < 0 || !gen(re, k) || emit(re, OP_JMP, split, 0) < 0) return 0;
            re->prog[split].x = n->lazy ? re->nprog : split + 1;
            re->prog[split].y = n->lazy ? split + 1 : re->nprog;
            return 1;
        }
        int count = n->max - n->min;
        int *splits = malloc(sizeof *splits * (size_t)(count ? count : 1)), ok = splits != NULL;
        for (int i = 0; ok && i < count; i++) {  // each optional copy: SPLIT copy, out
            splits[i] = emit(re, OP_SPLIT, 0, 0);
            ok = splits[i] >= 0 && gen(re, k);
        }
        for (int i = 0; ok && i < count; i++) {
            re->prog[splits[i]].x = n->lazy ? re->nprog : splits[i] + 1;
            re->prog[splits[i]].y = n->lazy ? splits[i] + 1 : re->nprog;
        }
        free(splits);
        return ok;
    }
    case N_LOOK: {
        int look = emit(re, OP_LOOK, n->negative, 0);
        if (look < 0 || !gen(re, n->kids[0]) || emit(re, OP_MATCH, 0, 0) < 0) return 0;
        re->prog[look].y = re->nprog;
        return 1;
    }
    }
    return 0;
}

fsdp_status tok_regex_compile(const char *pattern, const char *where, tok_regex **out) {
    *out = NULL;
    size_t len = strlen(pattern), n = 0;
    uint32_t *cp = malloc(sizeof *cp * (len + 1));
    tok_regex *re = calloc(1, sizeof *re);
    if (!cp || !re) {
        free(cp), free(re);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory compiling a regex", where);
    }
    for (size_t i = 0; i < len; n++) i += tok_utf8_get((const unsigned char *)pattern + i, len - i, &cp[n]);
    parser ps = {cp, n, 0, 0, NULL, re};
    node *root = parse_alt(&ps);
    if (root && peek(&ps) == ')') ps.err = "an unbalanced ')'";
    if (root && !ps.err && (!gen(re, root) || emit(re, OP_MATCH, 0, 0) < 0)) ps.err = "out of memory";
    free_node(root);
    free(cp);
    if (ps.err || !root) {
        const char *why = ps.err ? ps.err : "out of memory";
        tok_regex_free(re);
        return fsdp_error(FSDP_ERR_FORMAT, "%s: unsupported regex '%s': %s", where, pattern, why);
    }
    *out = re;
    return FSDP_OK;
}

void tok_regex_free(tok_regex *re) {
    if (!re) return;
    for (int i = 0; i < re->nclasses; i++) free(re->classes[i].ranges);
    free(re->classes), free(re->prog);
    free(re);
}

// ---- matching

static int has_props(uint32_t c, int props) {
    if (c == UINT32_MAX) return 0;  // a stray byte is in no class
    return ((props & PROP_L) && fsdp_unicode_is_letter(c)) || ((props & PROP_N) && fsdp_unicode_is_number(c)) ||
           ((props & PROP_S) && fsdp_unicode_is_space(c)) || ((props & PROP_D) && c >= '0' && c <= '9');
}

static int class_has_one(const char_class *k, uint32_t c) {
    for (int i = 0; i < k->nranges; i++)
        if (c >= k->ranges[i][0] && c <= k->ranges[i][1]) return 1;
    if (has_props(c, k->props)) return 1;
    for (int b = 1; b <= PROP_D; b <<= 1)
        if ((k->nprops & b) && !has_props(c, b)) return 1;
    return 0;
}

static int class_has(const char_class *k, uint32_t c) {
    int in = class_has_one(k, c);
    if (!in && k->fold && c != UINT32_MAX) {  // the other cases of an ASCII letter (and long s, Kelvin)
        uint32_t f = fold_char(c), variants[4] = {f, f >= 'a' && f <= 'z' ? f - 32 : f, f == 's' ? 0x17F : f,
                                                  f == 'k' ? 0x212A : f};
        for (int i = 0; i < 4 && !in; i++) in = variants[i] != c && class_has_one(k, variants[i]);
    }
    return in != k->negated;
}

typedef struct {
    int pc;
    size_t pos;
} thread;

typedef struct {
    thread *stack;  // (cap,) the alternatives still to try; a lookahead's run uses the part above its caller's
    size_t cap;
} backtrack;

// The end of the match of the program from pc at pos, or -1 (-2 when out of memory or past *budget
// steps); base: where this run's part of bt's stack starts
static long run(const tok_regex *re, backtrack *bt, size_t base, int pc, size_t pos, const uint32_t *cp, size_t n,
                long *budget) {
    size_t top = base;
    for (;;) {
        if (--*budget < 0) return -2;
        const instr *in = &re->prog[pc];
        int fail = 0;
        switch (in->op) {
        case OP_CHAR: fail = pos >= n || cp[pos] != (uint32_t)in->x; pos++, pc++; break;
        case OP_CHAR_FOLD:
            fail = pos >= n || cp[pos] == UINT32_MAX || fold_char(cp[pos]) != (uint32_t)in->x;
            pos++, pc++;
            break;
        case OP_ANY: fail = pos >= n || cp[pos] == '\n'; pos++, pc++; break;
        case OP_CLASS: fail = pos >= n || !class_has(&re->classes[in->x], cp[pos]); pos++, pc++; break;
        case OP_JMP: pc = in->x; break;
        case OP_SPLIT:
            if (top == bt->cap) {
                size_t c = bt->cap ? bt->cap * 2 : 256;
                thread *g = realloc(bt->stack, sizeof *g * c);
                if (!g) return -2;
                bt->stack = g, bt->cap = c;
            }
            bt->stack[top++] = (thread){in->y, pos};
            pc = in->x;
            break;
        case OP_LOOK: {
            long r = run(re, bt, top, pc + 1, pos, cp, n, budget);
            if (r == -2) return -2;
            fail = (r >= 0) == in->x;
            pc = in->y;
            break;
        }
        case OP_MATCH: return (long)pos;
        }
        if (fail) {
            if (top == base) return -1;
            top--;
            pc = bt->stack[top].pc, pos = bt->stack[top].pos;
        }
    }
}

int tok_regex_find(const tok_regex *re, const uint32_t *cp, size_t n, size_t from, size_t *start, size_t *end) {
    backtrack bt = {NULL, 0};
    // the family patterns take a few steps per character they match; a pattern that backtracks far more
    // (nested quantifiers) is stopped instead of running for hours
    long budget = 1000000 + 64 * (long)(n - from);
    for (size_t i = from; i < n; i++) {
        long e = run(re, &bt, 0, 0, i, cp, n, &budget);
        if (e == -2) {
            free(bt.stack);
            return -1;
        }
        if (e > (long)i) {
            free(bt.stack);
            *start = i, *end = (size_t)e;
            return 1;
        }
    }
    free(bt.stack);
    return 0;
}
