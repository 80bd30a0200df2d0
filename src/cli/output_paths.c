// output_paths.c: checks that the output files and directories of a run are writable before it starts.
#include "cli/output_paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Proves dir is a writable directory by creating and removing a probe file in it. why: (cap) the reason
// on failure. Returns 0 or -1.
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
    close(fd);
    unlink(probe);
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
        int created = 0, rc = p->kind == CLI_OUT_FILE ? check_file(p->path, why, sizeof why)
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
