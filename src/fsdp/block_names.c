// block_names.c: a parameter's block from its name (block_names.h). The format is split once into the
// literal text before and after its integer conversion; a name is then matched against the head, the
// digits after it are read one at a time (each prefix of them a candidate block, in increasing order, so
// the first that fits is the lowest block whose prefix starts the name) and the candidate confirmed: the
// tail follows its canonical digits (a plain %d), or the format printed for it starts the name.
#include "fsdp/block_names.h"

#include <stdio.h>
#include <string.h>

// Appends c to buf (cap NN_NAME_MAX, *len characters so far); 0 when it does not fit.
static int put(char *buf, int *len, char c) {
    if (*len >= NN_NAME_MAX - 1) return 0;
    buf[(*len)++] = c;
    buf[*len] = 0;
    return 1;
}

void fsdp_block_names_init(fsdp_block_names *bn, const char *format, int n_blocks) {
    memset(bn, 0, sizeof *bn);
    bn->format = format;
    bn->n_blocks = n_blocks;
    bn->mode = 2;
    char *out = bn->head;  // the text being collected: head, then after the conversion tail
    int *len = &bn->head_len;
    int conversions = 0, plain = 0, ok = format != NULL;
    for (const char *p = format; ok && *p; p++) {
        if (*p != '%' || p[1] == '%') {  // literal text ("%%" prints one '%')
            if (*p == '%') p++;
            ok = put(out, len, *p);
            continue;
        }
        const char *q = p + 1;  // flags, width and precision (no '*', no length modifier), then d, i or u
        q += strspn(q, "-+ #0");
        q += strspn(q, "0123456789");
        if (*q == '.') q += 1 + strspn(q + 1, "0123456789");
        ok = conversions == 0 && (*q == 'd' || *q == 'i' || *q == 'u');
        plain = q == p + 1;
        conversions++;
        out = bn->tail;
        len = &bn->tail_len;
        p = q;
    }
    if (ok && conversions == 1) bn->mode = plain ? 0 : 1;
}

// The old way, for formats the parse does not cover: the first block whose prefix starts the name.
static int scan(const fsdp_block_names *bn, const char *name) {
    for (int b = 0; b < bn->n_blocks; b++) {
        char prefix[NN_NAME_MAX + 32];
        snprintf(prefix, sizeof prefix, bn->format, b);
        if (strncmp(name, prefix, strlen(prefix)) == 0) return b;
    }
    return -1;
}

int fsdp_block_names_find(const fsdp_block_names *bn, const char *name) {
    if (bn->mode == 2) return scan(bn, name);
    if (strncmp(name, bn->head, (size_t)bn->head_len) != 0) return -1;
    const char *d = name + bn->head_len;  // the number's text
    if (bn->mode == 1) d += strspn(d, " +");  // padding and sign flags print these before the digits
    long long v = 0;
    for (int k = 0; d[k] >= '0' && d[k] <= '9'; k++) {  // candidate v: the first k + 1 digits
        v = v * 10 + (d[k] - '0');
        if (v >= bn->n_blocks) return -1;  // later candidates are only larger
        if (bn->mode == 0) {
            if (k > 0 && d[0] == '0') return -1;  // a leading zero: %d never prints one
            if (strncmp(d + k + 1, bn->tail, (size_t)bn->tail_len) == 0) return (int)v;
        } else {
            char prefix[NN_NAME_MAX + 32];
            snprintf(prefix, sizeof prefix, bn->format, (int)v);
            if (strncmp(name, prefix, strlen(prefix)) == 0) return (int)v;
        }
    }
    return -1;
}
