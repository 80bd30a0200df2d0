// path_canon.c: canonical paths for existing and not-yet-existing files (see path_canon.h).
#include "core/path_canon.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fsdp_status fsdp_path_canonical(const char *path, char *out, size_t cap) {
    if (!path || !*path) return fsdp_error(FSDP_ERR_INVALID_ARG, "an empty path");
    char abs[2 * PATH_MAX + 2];  // path made absolute (the working directory is canonical already)
    if (path[0] == '/') {
        if (strlen(path) >= sizeof abs) return fsdp_error(FSDP_ERR_INVALID_ARG, "%.64s...: path too long", path);
        memcpy(abs, path, strlen(path) + 1);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return fsdp_error(FSDP_ERR_IO, "the working directory cannot be resolved: %s", strerror(errno));
        if (strlen(cwd) + 1 + strlen(path) >= sizeof abs)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "%.64s...: path too long", path);
        strcat(strcat(strcpy(abs, cwd), "/"), path);
    }
    // the longest prefix (ending at a component boundary) that realpath resolves; "/" always does
    char head[sizeof abs], resolved[PATH_MAX];
    size_t cut = strlen(abs);
    for (;;) {
        memcpy(head, abs, cut);
        head[cut] = 0;
        if (realpath(cut ? head : "/", resolved)) break;
        while (cut > 0 && abs[cut - 1] != '/') cut--;  // back to the start of the last component
        while (cut > 0 && abs[cut - 1] == '/') cut--;  // and over the slashes before it
    }
    size_t n = strlen(resolved);
    if (n >= cap) return fsdp_error(FSDP_ERR_INVALID_ARG, "%.64s...: path too long", path);
    memcpy(out, resolved, n + 1);
    // the components that do not exist (yet), applied lexically: the prefix they extend is canonical
    for (const char *c = abs + cut; *c;) {
        while (*c == '/') c++;
        size_t len = strcspn(c, "/");
        if (len == 0 || (len == 1 && c[0] == '.')) {
            c += len;
            continue;
        }
        if (len == 2 && c[0] == '.' && c[1] == '.') {
            char *slash = strrchr(out, '/');  // out is absolute: there is one
            if (slash == out) out[1] = 0;      // "/a" -> "/", and ".." of "/" is "/"
            else *slash = 0;
            n = strlen(out);
        } else {
            size_t sep = strcmp(out, "/") != 0;
            if (n + sep + len >= cap) return fsdp_error(FSDP_ERR_INVALID_ARG, "%.64s...: path too long", path);
            if (sep) out[n++] = '/';
            memcpy(out + n, c, len);
            out[n += len] = 0;
        }
        c += len;
    }
    return FSDP_OK;
}

int fsdp_path_within(const char *inner, const char *outer) {
    size_t n = strlen(outer);
    if (strcmp(outer, "/") == 0) return inner[0] == '/';
    return strncmp(inner, outer, n) == 0 && (inner[n] == 0 || inner[n] == '/');
}

void fsdp_path_dirname(const char *p, char *out, size_t cap) {
    const char *slash = strrchr(p, '/');
    if (!slash) snprintf(out, cap, ".");  // (not canonical: a bare name)
    else if (slash == p) snprintf(out, cap, "/");
    else snprintf(out, cap, "%.*s", (int)(slash - p), p);
}

const char *fsdp_path_basename(const char *p) {
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}
