// cuda_dlopen.c: cuda_dlopen.h's two steps (the first file that loads, a symbol into a typed slot).
#ifdef FSDP_HAVE_CUDA
#include "device/cuda/cuda_dlopen.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *cuda_dl_open_first(const char *const *names, size_t n, char *errors, size_t cap) {
    if (cap) errors[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) continue;
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) return lib;
        const char *e = dlerror();
        size_t used = strlen(errors);
        if (used + 1 < cap) snprintf(errors + used, cap - used, "%s%s", used ? "; " : "", e ? e : names[i]);
    }
    return NULL;
}

int cuda_dl_bind(void *lib, const char *name, void *slot, size_t slot_size, const char *what, char *why, size_t cap) {
    void *sym = dlsym(lib, name);
    if (!sym) {
        snprintf(why, cap, "%s lacks %s (%s)", what, name, dlerror());
        return 0;
    }
    memcpy(slot, &sym, slot_size);  // object pointer to function pointer, as POSIX dlsym intends
    return 1;
}

#else
typedef int fsdp_no_cuda_dlopen;  // without CUDA this file is empty (ISO C wants a declaration)
#endif
