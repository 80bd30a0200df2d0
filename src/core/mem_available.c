// mem_available.c: the memory this process's host can still give it (mem_available.h): MemAvailable,
// lowered by any memory cgroup limit on the way from this process's cgroup up to the root.
#include "core/mem_available.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tunables.h"

// The number a one-value file (memory.max, memory.current, ...) starts with: 1 and *v, or 0 when the
// file is missing or holds no number (cgroup v2 writes "max" for no limit).
static int read_value(const char *path, double *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64];
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    char *end = NULL;
    double x = ok ? strtod(buf, &end) : 0.0;
    if (!ok || end == buf) return 0;
    *v = x;
    return 1;
}

// The value of the line "key N ..." of a file such as /proc/meminfo or memory.stat; 0 when absent.
static double read_field(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0.0;
    char line[256];
    size_t n = strlen(key);
    double v = 0.0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ' ') {
            v = strtod(line + n + 1, NULL);
            break;
        }
    fclose(f);
    return v;
}

// One cgroup hierarchy's files: the limit, the usage, memory.stat's page-cache line, the value at and
// above which a limit means none, and the source's name.
typedef struct {
    const char *limit, *usage, *cache_key;
    double unlimited;
    const char *source;
} cgroup_files;

// From root + path up to root: at each level with a limit, limit - usage + page cache (at least 0, at most
// the limit); lowers *best where that is less.
static void cgroup_walk(const char *root, const char *path, const cgroup_files *cf, fsdp_mem_available_info *best) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s%s", root, strcmp(path, "/") == 0 ? "" : path);
    size_t root_len = strlen(root);
    for (;;) {
        char file[2200];
        double limit = 0.0, usage = 0.0;
        snprintf(file, sizeof file, "%s/%s", dir, cf->limit);
        if (read_value(file, &limit) && limit < cf->unlimited) {
            snprintf(file, sizeof file, "%s/%s", dir, cf->usage);
            (void)read_value(file, &usage);
            snprintf(file, sizeof file, "%s/memory.stat", dir);
            double avail = limit - usage + read_field(file, cf->cache_key);
            avail = avail < 0.0 ? 0.0 : avail > limit ? limit : avail;
            if (best->bytes < 0.0 || avail < best->bytes) {
                best->bytes = avail;
                best->source = cf->source;
            }
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= root_len || !slash || (size_t)(slash - dir) < root_len) break;
        *slash = 0;
    }
}

// Whether the comma-separated controller list holds "memory".
static int has_memory(const char *list, size_t len) {
    for (const char *p = list; p < list + len;) {
        const char *comma = memchr(p, ',', (size_t)(list + len - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(list + len - p);
        if (n == 6 && strncmp(p, "memory", 6) == 0) return 1;
        p += n + 1;
    }
    return 0;
}

fsdp_mem_available_info fsdp_mem_available(void) {
    fsdp_mem_available_info r = {-1.0, ""};
    const char *test = fsdp_tunable(FSDP_ENV_TEST_MEM_AVAILABLE);
    if (test && *test) {
        r.bytes = strtod(test, NULL);
        r.source = "FSDP_TEST_MEM_AVAILABLE";
        return r;
    }
    double kib = read_field("/proc/meminfo", "MemAvailable:");
    if (kib > 0.0) {
        r.bytes = kib * 1024.0;
        r.source = "MemAvailable";
    }
    static const cgroup_files v2 = {"memory.max", "memory.current", "file", 1e300, "cgroup memory.max"};
    static const cgroup_files v1 = {"memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache", 4.6e18,
                                    "cgroup memory.limit_in_bytes"};  // v1 writes ~2^63 for no limit
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[2048];
    while (f && fgets(line, sizeof line, f)) {  // "hierarchy:controllers:path"
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;  // the two separators in line
        if (!c2 || c2[1] != '/') continue;
        if (strncmp(line, "0::", 3) == 0) {  // v2: mounted at /sys/fs/cgroup, or beside v1 at .../unified
            cgroup_walk("/sys/fs/cgroup", c2 + 1, &v2, &r);
            cgroup_walk("/sys/fs/cgroup/unified", c2 + 1, &v2, &r);
        } else if (has_memory(c1 + 1, (size_t)(c2 - c1 - 1))) {
            cgroup_walk("/sys/fs/cgroup/memory", c2 + 1, &v1, &r);
        }
    }
    if (f) fclose(f);
    return r;
}
