// output_paths.c: checks that the output files and directories of a run are writable before it starts.
#include "cli/output_paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ckpt/hf_dir.h"

// The probe's size: a real write of a block, which a full filesystem refuses (an empty file it takes).
#define PROBE_BYTES (64 * 1024)

// Proves dir is a writable directory with room for a block: creates a probe file in it, writes
// PROBE_BYTES, fsyncs and removes it. why: (cap) the reason on failure. Returns 0 or -1.
static int probe_directory(const char *dir, char *why, size_t cap) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(why, cap, "directory %s is not usable: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "%s is not a directory", dir);
        return -1;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.fsdp-write-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(why, cap, "directory %s is not writable: %s", dir, strerror(errno));
        return -1;
    }
    static const char block[PROBE_BYTES];  // zeros
    size_t done = 0;
    int err = 0;
    while (done < sizeof block && !err) {
        ssize_t n = write(fd, block + done, sizeof block - done);
        if (n > 0) done += (size_t)n;
        else if (n == 0 || errno != EINTR) err = n == 0 ? ENOSPC : errno;
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    unlink(probe);
    if (err) {
        snprintf(why, cap, "directory %s cannot be written: a %d KiB test write failed: %s", dir, PROBE_BYTES / 1024,
                 strerror(err));
        return -1;
    }
    return 0;
}

// A file to be written: not a directory, and its directory writable. why: (cap) the reason on failure.
static int check_file(const char *path, char *why, size_t cap) {
    size_t len = strlen(path);
    struct stat st;
    if (path[len - 1] == '/' || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        snprintf(why, cap, "is a directory; expected a file name");
        return -1;
    }
    char parent[4096];  // the directory part of path ("." when there is none)
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == path) snprintf(parent, sizeof parent, "/");
    else snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    if (probe_directory(parent, why, cap)) return -1;
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        snprintf(why, cap, "exists and is not writable");
        return -1;
    }
    return 0;
}

// A Hugging Face model directory to be written: absent or replaceable (hf_dir_check_target), and its
// parent writable. why: (cap) the reason on failure.
static int check_hf_dir(const char *path, char *why, size_t cap) {
    if (hf_dir_check_target(path) != FSDP_OK) {  // its message, less the path the caller prints
        const char *msg = fsdp_last_error();
        size_t n = strlen(path);
        snprintf(why, cap, "%s", strncmp(msg, path, n) == 0 && msg[n] == ':' ? msg + n + 2 : msg);
        return -1;
    }
    char parent[4096];  // the directory part of path ("." when there is none)
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *slash = memrchr(path, '/', len);
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == path) snprintf(parent, sizeof parent, "/");
    else snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    return probe_directory(parent, why, cap);
}

// A directory: created when missing and create is set (*created = 1 then), then probed.
static int check_directory(const char *path, int create, int *created, char *why, size_t cap) {
    struct stat st;
    if (create && stat(path, &st) != 0 && errno == ENOENT) {
        if (mkdir(path, 0755) != 0) {
            snprintf(why, cap, "cannot create the directory: %s", strerror(errno));
            return -1;
        }
        *created = 1;
    }
    if (stat(path, &st) != 0) {
        snprintf(why, cap, "%s", create ? strerror(errno) : "no such directory (create it first)");
        return -1;
    }
    return probe_directory(path, why, cap);
}

int cli_check_output_paths(const char *prog, const cli_output_path *paths, int n, fsdp_comm *world) {
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    char why[4400] = "";
    const cli_output_path *bad = NULL;  // the first failing entry on this rank
    const char *created_dir = NULL;     // a directory this rank created (removed again on failure)
    for (int i = 0; i < n && !bad; i++) {
        const cli_output_path *p = &paths[i];
        if (!p->path || (p->kind != CLI_OUT_DIR_EVERY_RANK && R != 0)) continue;
        int created = 0, rc = p->kind == CLI_OUT_FILE     ? check_file(p->path, why, sizeof why)
                              : p->kind == CLI_OUT_HF_DIR ? check_hf_dir(p->path, why, sizeof why)
                                                          : check_directory(p->path, p->kind == CLI_OUT_DIR_CREATE,
                                                                            &created, why, sizeof why);
        if (created) created_dir = p->path;
        if (rc) bad = p;
    }
    float mine = bad ? 1.0f : 0.0f, *failed = calloc((size_t)N, sizeof(float));  // failed: (N,) 1 per failing rank
    if (!failed || fsdp_all_gather(world, &mine, failed, 1, FSDP_F32) != FSDP_OK) {
        fprintf(stderr, "%s: checking the output paths: cannot exchange the results between ranks\n", prog);
        free(failed);
        if (created_dir) rmdir(created_dir);
        return 2;
    }
    int first_bad = -1;
    for (int r = N - 1; r >= 0; r--)
        if (failed[r] != 0.0f) first_bad = r;
    free(failed);
    if (first_bad < 0) return 0;
    if (R == first_bad) fprintf(stderr, "%s: %s %s: %s\n", prog, bad->flag, bad->path, why);
    if (created_dir) rmdir(created_dir);
    return 2;
}

// One output's demand on its filesystem.
typedef struct {
    const char *flag, *path;  // path: a file (checked in its directory) or a directory
    int64_t bytes;
    char what[96];  // how the bytes were counted
} space_need;

// dir: (cap,) the existing directory need n's bytes go into (a file's directory; "." for a bare name).
static void need_directory(const space_need *n, int is_file, char *dir, size_t cap) {
    const char *slash = strrchr(n->path, '/');
    if (!is_file) snprintf(dir, cap, "%s", n->path);
    else if (!slash) snprintf(dir, cap, ".");
    else if (slash == n->path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - n->path), n->path);
}

int cli_check_save_space(const char *prog, const nn_params *ps, const cli_ckpt_options *ckpt, const char *save_path,
                         int steps, fsdp_comm *world) {
    int64_t params = nn_params_numel(ps), trainable = 0;
    for (int i = 0; i < ps->count; i++)
        if (!ps->items[i].frozen) trainable += ps->items[i].numel;
    int several = ckpt && ckpt->save_every > 0 && ckpt->save_every < steps;
    space_need needs[2] = {{"--ckpt-dir", ckpt ? ckpt->dir : NULL, (4 * params + 8 * trainable) * (several ? 2 : 1), ""},
                           {"--save", save_path, 4 * params, ""}};
    snprintf(needs[0].what, sizeof needs[0].what, "%s4 B x %lld parameters + 8 B x %lld trainable%s",
             several ? "two checkpoints of " : "", (long long)params, (long long)trainable, several ? " each" : "");
    snprintf(needs[1].what, sizeof needs[1].what, "4 B x %lld parameters", (long long)params);
    char why[4400] = "";
    if (fsdp_comm_rank(world) == 0) {
        dev_t devs[2] = {0, 0};
        unsigned long long avail[2] = {0, 0};
        int64_t total[2] = {0, 0};
        for (int i = 0; i < 2 && !why[0]; i++) {
            char dir[4096];
            struct stat st;
            struct statvfs vfs;
            if (!needs[i].path) continue;
            need_directory(&needs[i], i == 1, dir, sizeof dir);
            if (stat(dir, &st) != 0 || statvfs(dir, &vfs) != 0) continue;  // (the path check reported it)
            devs[i] = st.st_dev;
            avail[i] = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
            total[i] = needs[i].bytes + (i == 1 && needs[0].path && devs[0] == st.st_dev ? total[0] : 0);
            if ((unsigned long long)total[i] > avail[i])
                snprintf(why, sizeof why, "%s: %s %s: the run's saves need %lld bytes (%s%s) but only %llu bytes are "
                         "free there", prog, needs[i].flag, needs[i].path, (long long)total[i], needs[i].what,
                         total[i] > needs[i].bytes ? ", with --ckpt-dir's on the same filesystem" : "", avail[i]);
        }
        if (why[0]) fprintf(stderr, "%s\n", why);
    }
    double short_of_space = why[0] ? 1.0 : 0.0;
    if (fsdp_all_reduce_double(world, &short_of_space) != FSDP_OK) {
        fprintf(stderr, "%s: checking the free space: cannot exchange the result between ranks\n", prog);
        return 2;
    }
    return short_of_space > 0.0 ? 2 : 0;
}
