// cuda_dlopen.h: loading a CUDA library at first use (cuBLAS: cuda_blas.c; NCCL: cuda_nccl_api.c) instead
// of linking it, so a CPU run of a CUDA build never maps it: the first file of a list that loads, and
// its functions bound into a table of typed pointers. CUDA builds only.
#pragma once
#include <stddef.h>

// dlopen (RTLD_NOW | RTLD_LOCAL) of names[0], names[1], ... (n entries; NULL entries skipped) until one
// loads; NULL when none does, with errors (cap bytes) listing each dlerror, "; "-separated.
void *cuda_dl_open_first(const char *const *names, size_t n, char *errors, size_t cap);
// *slot (a function pointer of slot_size bytes) = the symbol `name` of lib: 1; 0 when lib lacks it, with
// why (cap bytes) = "<what> lacks <name> (<dlerror>)".
int cuda_dl_bind(void *lib, const char *name, void *slot, size_t slot_size, const char *what, char *why, size_t cap);
