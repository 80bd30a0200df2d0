// st_alloc.h: the two allocation helpers the safetensors reader and writer share (internal to src/ckpt).
#pragma once
#include <stdlib.h>
#include <string.h>

// malloc'd copy of s, or NULL.
static inline char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

// Makes room for `need` elements of `elem` bytes: returns arr or a larger realloc'd array (updating
// *cap), or NULL with arr untouched.
static inline void *grow(void *arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return arr;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(arr, (size_t)nc * elem);
    if (q) *cap = nc;
    return q;
}
