// ckpt_dir.c: finding and rotating checkpoints in a checkpoint directory.
#include "ckpt/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fsdp_ckpt_step_dir(const char *root, int64_t step, char *out, size_t cap) {
    snprintf(out, cap, "%s/step_%08lld", root, (long long)step);
}

typedef struct {
    int64_t step;
    int complete;
} entry;

static int cmp_step(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return (x > y) - (x < y);
}

// All step_* entries of root, sorted by step. *list is malloc'ed.
static fsdp_status scan(const char *root, entry **list, int *n) {
    *list = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: cannot list: %s", root, strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "step_%lld%c", &step, &tail) != 1) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            entry *grown = realloc(*list, sizeof(entry) * (size_t)cap);
            if (!grown) {
                closedir(d);
                return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
            }
            *list = grown;
        }
        char marker[4096 + 300];
        snprintf(marker, sizeof marker, "%s/%s/DONE", root, e->d_name);
        (*list)[*n].step = step;
        (*list)[(*n)++].complete = access(marker, F_OK) == 0;
    }
    closedir(d);
    if (*n) qsort(*list, (size_t)*n, sizeof(entry), cmp_step);
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_latest(const char *root, char *out, size_t cap, int *found) {
    entry *list;
    int n;
    *found = 0;
    FSDP_CHECK(scan(root, &list, &n));
    for (int i = n - 1; i >= 0; i--)
        if (list[i].complete) {
            fsdp_ckpt_step_dir(root, list[i].step, out, cap);
            *found = 1;
            break;
        }
    free(list);
    return FSDP_OK;
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char child[4096 + 256];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            unlink(child);
        }
        closedir(d);
    }
    rmdir(path);
}

fsdp_status fsdp_ckpt_rotate(const char *root, int keep) {
    if (keep < 1) return FSDP_OK;
    entry *list;
    int n;
    FSDP_CHECK(scan(root, &list, &n));
    int newest_complete = -1, kept = 0;
    for (int i = n - 1; i >= 0; i--)
        if (list[i].complete && newest_complete < 0) newest_complete = i;
    for (int i = newest_complete; i >= 0; i--) {
        if (list[i].complete && kept < keep) {
            kept++;
            continue;
        }
        char dir[4096];
        fsdp_ckpt_step_dir(root, list[i].step, dir, sizeof dir);
        remove_tree(dir);
    }
    free(list);
    return FSDP_OK;
}
