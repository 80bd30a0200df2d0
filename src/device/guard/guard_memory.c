// guard_memory.c: the guard device's memory (guard_memory.h). One arena of reserved address space (PROT_NONE,
// MAP_NORESERVE) per device; allocations are page-rounded blocks from it, first fit, and a freed block
// is given back to the OS (MADV_DONTNEED), so it reads as zeros when it is handed out again. The
// outermost fsdp_dev_enter opens [base, base + top) and the registered regions with one mprotect each;
// the matching leave closes them. A host access in between (from above the layer) faults: the SIGSEGV
// handler names the allocation or region, prints a backtrace and lets the process die of SIGSEGV.
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device/guard/guard_memory.h"

#define GUARD_RESERVE_MAX ((size_t)64 << 30)  // address space, not memory
#define GUARD_RESERVE_MIN ((size_t)1 << 30)
// The arena starts on a huge-page boundary and asks for transparent huge pages: opening and closing it
// is an mprotect over every page in use, and with 2 MiB pages that is 512 times fewer entries to change
// (at 4 KiB pages a 1 GiB model spent ~50 ms per mprotect, two per kernel call).
#define GUARD_HUGE ((size_t)2 << 20)
#define GUARD_MAX_DEVICES 8
#define GUARD_ALTSTACK_BYTES ((size_t)64 << 10)

static _Atomic(fsdp_dev *) guard_devices[GUARD_MAX_DEVICES];  // the open guard devices (the fault handler's)
static pthread_mutex_t guard_devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction previous_segv;  // chained for faults outside every guard device
static int handler_installed;

// A failed mprotect inside the layer leaves no way to go on (and no status to return).
static void guard_die(const char *what, const void *p, size_t len) {
    fprintf(stderr, "fsdp guard device: %s(%p, %zu bytes) failed: %s\n", what, p, len, strerror(errno));
    abort();
}

static void protect(void *p, size_t len, int prot) {
    if (len && mprotect(p, len, prot) != 0) guard_die("mprotect", p, len);
}

static void set_open(dev_guard *g, int open) {
    size_t span = (g->top + GUARD_HUGE - 1) / GUARD_HUGE * GUARD_HUGE;  // whole huge pages: none is split
    protect(g->base, span < g->reserved ? span : g->reserved, open ? PROT_READ | PROT_WRITE : PROT_NONE);
    for (int i = 0; i < g->n_regions; i++) protect(g->regions[i].p, g->regions[i].len, open ? g->regions[i].prot : PROT_NONE);
}

void dev_guard_enter(fsdp_dev *d) {
    dev_guard *g = d->ctx;
    pthread_mutex_lock(&g->lock);
    if (g->depth++ == 0) set_open(g, 1);
    pthread_mutex_unlock(&g->lock);
}

void dev_guard_leave(fsdp_dev *d) {
    dev_guard *g = d->ctx;
    pthread_mutex_lock(&g->lock);
    FSDP_ASSERT(g->depth > 0);
    if (--g->depth == 0) set_open(g, 0);
    pthread_mutex_unlock(&g->lock);
}

// ---------------------------------------------------------------------------------------------
// The fault handler: async-signal-safe calls only (write, backtrace_symbols_fd, sigaction, raise).

typedef struct {
    char buf[768];
    size_t n;
} report;

static void put_str(report *r, const char *s) {
    while (*s && r->n < sizeof r->buf) r->buf[r->n++] = *s++;
}

static void put_num(report *r, uintptr_t v, unsigned base) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    if (base == 16) put_str(r, "0x");
    while (n && r->n < sizeof r->buf) r->buf[r->n++] = digits[--n];
}

// Writes the report for an access at a, when a is d's memory; returns 1 if it was.
static int describe(const dev_guard *g, const unsigned char *a, report *r) {
    for (int i = 0; i < g->n_regions; i++) {
        const guard_region *reg = &g->regions[i];
        if ((uintptr_t)a - (uintptr_t)reg->p < reg->len) {
            put_str(r, "registered memory '");
            put_str(r, reg->what);
            put_str(r, "' of ");
            put_num(r, reg->bytes, 10);
            put_str(r, " bytes at offset ");
            put_num(r, (uintptr_t)a - (uintptr_t)reg->p, 10);
            return 1;
        }
    }
    size_t off = (size_t)((uintptr_t)a - (uintptr_t)g->base);  // wraps around below the arena
    if (off >= g->reserved) return 0;
    int lo = 0, hi = g->n_blocks - 1;  // the block with the largest off <= off
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (g->blocks[mid].off <= off) lo = mid;
        else hi = mid - 1;
    }
    const guard_block *b = g->n_blocks ? &g->blocks[lo] : NULL;
    if (b && b->cat >= 0 && off >= b->off && off < b->off + b->len) {
        put_str(r, "allocation of ");
        put_num(r, b->bytes, 10);
        put_str(r, " bytes (category ");
        put_str(r, fsdp_mem_category_name((fsdp_mem_category)b->cat));
        put_str(r, ") at offset ");
        put_num(r, off - b->off, 10);
    } else {
        put_str(r, "no live allocation there (freed, or never allocated)");
    }
    return 1;
}

static void die_of(int sig) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);  // delivered when the handler returns: the process dies of it
}

static void guard_segv(int sig, siginfo_t *si, void *uctx) {
    const unsigned char *a = si->si_addr;
    report r = {.n = 0};
    put_str(&r, "fsdp guard device: host access to device memory at ");
    put_num(&r, (uintptr_t)a, 16);
    put_str(&r, " outside the device layer: ");
    for (int i = 0; i < GUARD_MAX_DEVICES; i++) {
        fsdp_dev *d = atomic_load(&guard_devices[i]);
        if (d && describe(d->ctx, a, &r)) {
            put_str(&r, "\n");
            ssize_t w = write(STDERR_FILENO, r.buf, r.n);
            (void)w;
            void *frames[64];
            backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
            die_of(sig);
            return;
        }
    }
    if (previous_segv.sa_flags & SA_SIGINFO) {
        if (previous_segv.sa_sigaction) {
            previous_segv.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (previous_segv.sa_handler != SIG_DFL && previous_segv.sa_handler != SIG_IGN) {
        previous_segv.sa_handler(sig);
        return;
    }
    die_of(sig);
}

// Once per process, under guard_devices_lock.
static fsdp_status install_handler(void) {
    if (handler_installed) return FSDP_OK;
    void *frames[2];
    backtrace(frames, 2);  // loads libgcc's unwinder now, so the handler's backtrace does not allocate
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE)) {  // keep one already there (ASan's)
        void *mem = mmap(NULL, GUARD_ALTSTACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem != MAP_FAILED) {
            stack_t ss = {.ss_sp = mem, .ss_size = GUARD_ALTSTACK_BYTES, .ss_flags = 0};
            if (sigaltstack(&ss, NULL) != 0) munmap(mem, GUARD_ALTSTACK_BYTES);
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_segv;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    if (sigaction(SIGSEGV, &sa, &previous_segv) != 0)
        return fsdp_error(FSDP_ERR_INTERNAL, "guard device: sigaction(SIGSEGV) failed: %s", strerror(errno));
    handler_installed = 1;
    return FSDP_OK;
}

// ---------------------------------------------------------------------------------------------
// Opening and closing

fsdp_status dev_guard_open(fsdp_dev *d) {
    dev_guard *g = calloc(1, sizeof *g);
    if (!g) return fsdp_error(FSDP_ERR_NOMEM, "guard device: out of memory");
    d->ctx = g;
    g->page = (size_t)sysconf(_SC_PAGESIZE);
    void *base = MAP_FAILED;
    for (g->reserved = GUARD_RESERVE_MAX; g->reserved >= GUARD_RESERVE_MIN; g->reserved /= 2) {
        base = mmap(NULL, g->reserved + GUARD_HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base != MAP_FAILED) break;
    }
    if (base != MAP_FAILED) {
        g->map = base;
        g->map_len = g->reserved + GUARD_HUGE;
        base = (void *)(((uintptr_t)base + GUARD_HUGE - 1) / GUARD_HUGE * GUARD_HUGE);
        madvise(base, g->reserved, MADV_HUGEPAGE);  // a hint: where THP is off it is plain pages
    }
    if (base == MAP_FAILED) {
        fsdp_status st = fsdp_error(FSDP_ERR_NOMEM, "guard device: cannot reserve %zu MiB of address space: %s",
                                    GUARD_RESERVE_MIN >> 20, strerror(errno));
        free(g), d->ctx = NULL;
        return st;
    }
    g->base = base;
    pthread_mutex_init(&g->lock, NULL);
    pthread_mutex_lock(&guard_devices_lock);
    fsdp_status st = install_handler();
    int slot = -1;
    for (int i = 0; st == FSDP_OK && i < GUARD_MAX_DEVICES && slot < 0; i++)
        if (!atomic_load(&guard_devices[i])) slot = i;
    if (st == FSDP_OK && slot < 0)
        st = fsdp_error(FSDP_ERR_INVALID_ARG, "guard device: at most %d may be open at once", GUARD_MAX_DEVICES);
    if (st == FSDP_OK) atomic_store(&guard_devices[slot], d);
    pthread_mutex_unlock(&guard_devices_lock);
    if (st != FSDP_OK) {
        munmap(g->map, g->map_len);
        pthread_mutex_destroy(&g->lock);
        free(g), d->ctx = NULL;
    }
    return st;
}

void dev_guard_close(fsdp_dev *d) {
    dev_guard *g = d->ctx;
    pthread_mutex_lock(&guard_devices_lock);
    for (int i = 0; i < GUARD_MAX_DEVICES; i++)
        if (atomic_load(&guard_devices[i]) == d) atomic_store(&guard_devices[i], NULL);
    pthread_mutex_unlock(&guard_devices_lock);
    for (int i = 0; i < g->n_blocks; i++)  // what was never freed goes with the arena
        if (g->blocks[i].cat >= 0) fsdp_mem_track((fsdp_mem_category)g->blocks[i].cat, g->blocks[i].bytes, -1);
    for (int i = 0; i < g->n_regions; i++) mprotect(g->regions[i].p, g->regions[i].len, g->regions[i].prot);
    munmap(g->map, g->map_len);
    free(g->blocks);
    free(g->regions);
    pthread_mutex_destroy(&g->lock);
    free(g), d->ctx = NULL;
}

// ---------------------------------------------------------------------------------------------
// Blocks

// Makes room for one more block at index `at` (under g->lock); 0, or -1 when out of memory.
static int insert_block(dev_guard *g, int at, guard_block b) {
    if (g->n_blocks == g->cap_blocks) {
        int cap = g->cap_blocks ? 2 * g->cap_blocks : 64;
        guard_block *nb = realloc(g->blocks, sizeof *nb * (size_t)cap);
        if (!nb) return -1;
        g->blocks = nb;
        g->cap_blocks = cap;
    }
    memmove(&g->blocks[at + 1], &g->blocks[at], sizeof *g->blocks * (size_t)(g->n_blocks - at));
    g->blocks[at] = b;
    g->n_blocks++;
    return 0;
}

static void remove_block(dev_guard *g, int at) {
    memmove(&g->blocks[at], &g->blocks[at + 1], sizeof *g->blocks * (size_t)(g->n_blocks - at - 1));
    g->n_blocks--;
}

void *dev_guard_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    FSDP_ASSERT(cat >= 0 && cat < FSDP_MEM_NCATEGORIES);
    dev_guard *g = d->ctx;
    size_t len = ((bytes ? bytes : 1) + g->page - 1) / g->page * g->page;
    if (len < bytes) len = SIZE_MAX;  // overflow: fails below
    pthread_mutex_lock(&g->lock);
    int i = 0;
    while (i < g->n_blocks && !(g->blocks[i].cat < 0 && g->blocks[i].len >= len)) i++;
    int ok;
    if (i < g->n_blocks) {  // first fit; the rest of the hole stays free
        guard_block rest = {g->blocks[i].off + len, g->blocks[i].len - len, 0, -1};
        ok = rest.len == 0 || insert_block(g, i + 1, rest) == 0;
        if (ok) g->blocks[i].len = len;
    } else {  // from the top of the arena
        ok = len <= g->reserved - g->top && insert_block(g, i, (guard_block){g->top, len, 0, -1}) == 0;
        if (ok) g->top += len;
    }
    if (!ok) {
        size_t top = g->top;
        pthread_mutex_unlock(&g->lock);
        fsdp_error(FSDP_ERR_NOMEM, "guard device: out of memory allocating %zu bytes for %s (%zu of %zu MiB of the arena in use)",
                   bytes, fsdp_mem_category_name(cat), top >> 20, g->reserved >> 20);
        return NULL;
    }
    guard_block *b = &g->blocks[i];
    b->bytes = bytes;
    b->cat = (int)cat;
    unsigned char *p = g->base + b->off;
    // zeros (never touched, or given back with MADV_DONTNEED when it was freed), written once here as
    // the CPU device's fsdp_alloc does, so the pages are resident and the OS's figures match the accounting
    protect(p, len, PROT_READ | PROT_WRITE);
    memset(p, 0, bytes);
    if (g->depth == 0) protect(p, len, PROT_NONE);  // allocated inside a call: stays open
    pthread_mutex_unlock(&g->lock);
    fsdp_mem_track(cat, bytes, +1);
    return p;
}

void dev_guard_free(fsdp_dev *d, void *p) {
    dev_guard *g = d->ctx;
    unsigned char *a = p;
    pthread_mutex_lock(&g->lock);
    int i = -1;
    size_t off = (size_t)((uintptr_t)a - (uintptr_t)g->base);
    if (off < g->top) {
        int lo = 0, hi = g->n_blocks - 1;
        while (lo <= hi && i < 0) {
            int mid = (lo + hi) / 2;
            if (g->blocks[mid].off == off) i = mid;
            else if (g->blocks[mid].off < off) lo = mid + 1;
            else hi = mid - 1;
        }
    }
    if (i < 0 || g->blocks[i].cat < 0) {
        fprintf(stderr, "fsdp guard device: fsdp_dev_free(%p): not a live allocation of this device (freed twice?)\n", p);
        abort();
    }
    guard_block *b = &g->blocks[i];
    fsdp_mem_category cat = (fsdp_mem_category)b->cat;
    size_t bytes = b->bytes;
    if (madvise(a, b->len, MADV_DONTNEED) != 0) guard_die("madvise", a, b->len);
    if (g->depth > 0) protect(a, b->len, PROT_NONE);  // freed inside a call: closed now
    b->cat = -1;
    b->bytes = 0;
    if (i + 1 < g->n_blocks && g->blocks[i + 1].cat < 0) {  // merge with the free neighbours
        b->len += g->blocks[i + 1].len;
        remove_block(g, i + 1);
    }
    if (i > 0 && g->blocks[i - 1].cat < 0) {
        g->blocks[i - 1].len += g->blocks[i].len;
        remove_block(g, i);
        i--;
    }
    if (i == g->n_blocks - 1) {  // a free block at the top: the top comes down
        g->top = g->blocks[i].off;
        g->n_blocks--;
    }
    pthread_mutex_unlock(&g->lock);
    fsdp_mem_track(cat, bytes, -1);
}

// ---------------------------------------------------------------------------------------------
// Registered host memory

fsdp_status dev_guard_register(fsdp_dev *d, void *p, size_t bytes, const char *what) {
    dev_guard *g = d->ctx;
    unsigned char *a = p;
    size_t len = (bytes + g->page - 1) / g->page * g->page;
    fsdp_status st = FSDP_OK;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->n_regions && st == FSDP_OK; i++)
        if ((uintptr_t)a < (uintptr_t)g->regions[i].p + g->regions[i].len && (uintptr_t)g->regions[i].p < (uintptr_t)a + len)
            st = fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_dev_register(%s): %p overlaps registered memory '%s'", what, p,
                            g->regions[i].what);
    if (st == FSDP_OK && g->n_regions == g->cap_regions) {
        int cap = g->cap_regions ? 2 * g->cap_regions : 16;
        guard_region *nr = realloc(g->regions, sizeof *nr * (size_t)cap);
        if (nr) {
            g->regions = nr;
            g->cap_regions = cap;
        } else {
            st = fsdp_error(FSDP_ERR_NOMEM, "fsdp_dev_register(%s): out of memory", what);
        }
    }
    int prot = PROT_READ | PROT_WRITE;
    if (st == FSDP_OK && mprotect(a, len, prot) != 0) {  // a read-only mapping stays read-only inside the layer
        prot = PROT_READ;
        if (errno != EACCES || mprotect(a, len, prot) != 0)
            st = fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_dev_register(%s): mprotect(%p, %zu bytes) failed: %s", what, p,
                            len, strerror(errno));
    }
    if (st == FSDP_OK) {
        guard_region *r = &g->regions[g->n_regions++];
        r->p = a;
        r->len = len;
        r->bytes = bytes;
        r->prot = prot;
        snprintf(r->what, sizeof r->what, "%s", what);
        if (g->depth == 0) protect(a, len, PROT_NONE);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

void dev_guard_unregister(fsdp_dev *d, void *p) {
    dev_guard *g = d->ctx;
    pthread_mutex_lock(&g->lock);
    int i = 0;
    while (i < g->n_regions && g->regions[i].p != p) i++;
    if (i == g->n_regions) {
        fprintf(stderr, "fsdp guard device: fsdp_dev_unregister(%p): not registered\n", p);
        abort();
    }
    protect(g->regions[i].p, g->regions[i].len, g->regions[i].prot);
    g->regions[i] = g->regions[--g->n_regions];
    pthread_mutex_unlock(&g->lock);
}
