// hf_dir.c: a Hugging Face model directory written through a temporary one (hf_dir.h).
#include "ckpt/hf_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_value.h"

// Whether a file name is one this tool writes into a model directory.
static int ours(const char *name) {
    unsigned a, b;
    int end = 0;
    if (!strcmp(name, HF_CONFIG_NAME) || !strcmp(name, HF_WEIGHTS_NAME) || !strcmp(name, HF_INDEX_NAME)) return 1;
    return sscanf(name, "model-%5u-of-%5u.safetensors%n", &a, &b, &end) == 2 && end == (int)strlen(name) &&
           strlen(name) == strlen("model-00001-of-00001.safetensors");
}

fsdp_status hf_dir_check_target(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT) return fsdp_error(FSDP_ERR_IO, "%s: %s", dir, strerror(errno));
        return FSDP_OK;  // (its parent is checked by creating the temporary directory)
    }
    if (!S_ISDIR(st.st_mode))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s exists and is not a directory: expected a Hugging Face model "
                          "directory to write (or a path ending in .safetensors for one file)", dir);
    DIR *d = opendir(dir);
    if (!d) return fsdp_error(FSDP_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    int n = 0, config = 0;
    char foreign[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        config |= !strcmp(e->d_name, HF_CONFIG_NAME);
        if (!ours(e->d_name) && !foreign[0]) snprintf(foreign, sizeof foreign, "%.200s", e->d_name);
    }
    closedir(d);
    if (foreign[0])
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: the directory holds %s, which fsdp.c does not write: not replacing "
                          "it (remove it or choose another path)", dir, foreign);
    if (n > 0 && !config)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: the directory holds safetensors files but no config.json: not "
                          "replacing it (remove it or choose another path)", dir);
    return FSDP_OK;
}

fsdp_status hf_dir_begin(const char *dir, char *tmp, size_t cap) {
    FSDP_CHECK(hf_dir_check_target(dir));
    if ((size_t)snprintf(tmp, cap, "%s.tmp.%ld", dir, (long)getpid()) >= cap)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: path too long", dir);
    hf_dir_abort(tmp);  // a leftover of an earlier process with this pid
    if (mkdir(tmp, 0755) != 0)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot create the temporary directory %s: %s", dir, tmp, strerror(errno));
    return FSDP_OK;
}

void hf_dir_abort(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d) return;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%.4000s/%.255s", tmp, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(tmp);
}

// fsyncs the directory holding path (best effort).
static void fsync_parent(const char *path) {
    char parent[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == path) snprintf(parent, sizeof parent, "/");
    else snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

fsdp_status hf_dir_commit(const char *dir, const char *tmp) {
    char old[4200];
    struct stat st;
    int replacing = stat(dir, &st) == 0;
    if (replacing) {
        fsdp_status s = hf_dir_check_target(dir);  // still one of ours
        if (s != FSDP_OK) return s;
        snprintf(old, sizeof old, "%.4000s.old.%ld", dir, (long)getpid());
        hf_dir_abort(old);
        if (rename(dir, old) != 0)
            return fsdp_error(FSDP_ERR_IO, "%s: cannot move the old directory aside to %s: %s", dir, old, strerror(errno));
    }
    if (rename(tmp, dir) != 0) {
        int err = errno;
        if (replacing) (void)rename(old, dir);  // put the old one back
        return fsdp_error(FSDP_ERR_IO, "%s: cannot rename %s into place: %s", dir, tmp, strerror(err));
    }
    fsync_parent(dir);
    if (replacing) hf_dir_abort(old);
    return FSDP_OK;
}

void hf_shard_name(int i, int n, char *name, size_t cap) {
    if (n == 1) snprintf(name, cap, "%s", HF_WEIGHTS_NAME);
    else snprintf(name, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

typedef struct {
    const char *name, *shard;
} index_pair;

static int cmp_pair(const void *a, const void *b) {
    return strcmp(((const index_pair *)a)->name, ((const index_pair *)b)->name);
}

fsdp_status hf_index_write(const char *dir, uint64_t total_bytes, int n, const char *const *names,
                           const char *const *shards) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%.4000s/%s", dir, HF_INDEX_NAME);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    index_pair *pairs = malloc(sizeof *pairs * (size_t)(n ? n : 1));  // (n,)
    if (!pairs) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) pairs[i] = (index_pair){names[i], shards[i]};
    qsort(pairs, (size_t)n, sizeof *pairs, cmp_pair);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(pairs);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {\n", total_bytes);
    for (int i = 0; i < n; i++) {
        fprintf(f, "    ");
        json_write_string(f, pairs[i].name);
        fprintf(f, ": ");
        json_write_string(f, pairs[i].shard);
        fprintf(f, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  }\n}\n");
    free(pairs);
    int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) return FSDP_OK;
    unlink(tmp);
    return fsdp_error(FSDP_ERR_IO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
}
