// unicode_nfc.c: NFC (unicode_nfc.h) as UAX #15 defines it: decompose fully (Hangul syllables
// algorithmically), put each run of combining marks in canonical order (a stable sort by class), then
// compose each character with the last starter unless a mark between them blocks it.
#include <stdlib.h>

#include "data/unicode_nfc.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21,
       T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static int ccc(uint32_t cp) { return cp > 0x10FFFF ? 0 : fsdp_unicode_ccc(cp); }

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)  // L + V
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);  // LV + T
    return a > 0x10FFFF || b > 0x10FFFF ? 0 : fsdp_unicode_composition(a, b);
}

int fsdp_unicode_nfc(const uint32_t *in, size_t n, uint32_t **out, size_t *out_n) {
    size_t cap = n * 4 + 1, k = 0;  // a canonical decomposition is at most 4 code points (Hangul 3)
    uint32_t *d = malloc(sizeof *d * cap);  // (cap,) the decomposition, then composed in place
    if (!d) return 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = in[i];
        const uint32_t *seq;
        size_t m;
        if (c >= S_BASE && c < S_BASE + S_COUNT) {
            uint32_t s = c - S_BASE;
            d[k++] = L_BASE + s / N_COUNT;
            d[k++] = V_BASE + s % N_COUNT / T_COUNT;
            if (s % T_COUNT) d[k++] = T_BASE + s % T_COUNT;
        } else if (c <= 0x10FFFF && (m = fsdp_unicode_decomposition(c, &seq)) > 0) {
            for (size_t j = 0; j < m; j++) d[k++] = seq[j];
        } else {
            d[k++] = c;
        }
    }
    for (size_t i = 1; i < k; i++) {  // canonical order: insertion sort of marks by class, stable
        int cc = ccc(d[i]);
        if (cc == 0) continue;
        uint32_t c = d[i];
        size_t j = i;
        while (j > 0 && ccc(d[j - 1]) > cc) d[j] = d[j - 1], j--;
        d[j] = c;
    }
    size_t w = 0;
    long starter = -1;  // where the last starter was written
    int last = -1;      // the class of the last character written after it (-1: none)
    for (size_t i = 0; i < k; i++) {
        uint32_t c = d[i];
        int cc = ccc(c);
        if (starter >= 0 && (last < 0 || last < cc)) {
            uint32_t comp = compose(d[starter], c);  // not blocked: no mark between, or only lower classes
            if (comp) {
                d[starter] = comp;
                continue;
            }
        }
        if (cc == 0) starter = (long)w, last = -1;
        else last = cc;
        d[w++] = c;
    }
    *out = d;
    *out_n = w;
    return 1;
}
