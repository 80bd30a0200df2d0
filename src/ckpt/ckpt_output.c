// ckpt_output.c: the outputs a checkpoint tool may write (see ckpt_output.h).
#include "ckpt/ckpt_output.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "core/path_canon.h"

// Whether dir holds the completion marker DONE (it is a checkpoint).
static int holds_marker(const char *dir) {
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/DONE", dir);
    return access(path, F_OK) == 0;
}

// What the existing directory dir holds: *step_entries = whether any entry is named step_NNNNNNNN,
// *entries = entries other than "." and "..". Returns 0, or -1 when it cannot be listed.
static int list_entries(const char *dir, int *step_entries, int *entries) {
    *step_entries = *entries = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int64_t step;
        (*entries)++;
        if (fsdp_ckpt_parse_step_name(e->d_name, &step)) *step_entries = 1;
    }
    closedir(d);
    return 0;
}

// The one-line refusal: "OUT: why (the source is SRC)".
#define REFUSE(...) fsdp_error(FSDP_ERR_INVALID_ARG, __VA_ARGS__)

fsdp_status fsdp_ckpt_check_output(const char *src, const char *out, fsdp_ckpt_out_kind kind) {
    char s[PATH_MAX], o[PATH_MAX], parent[PATH_MAX];
    FSDP_CHECK(fsdp_path_canonical(src, s, sizeof s));
    FSDP_CHECK(fsdp_path_canonical(out, o, sizeof o));
    fsdp_path_dirname(o, parent, sizeof parent);
    const char *name = fsdp_path_basename(o);
    int64_t step;
    if (strcmp(o, s) == 0) return REFUSE("%s: is the source checkpoint itself (the source is %s)", out, src);
    if (fsdp_path_within(o, s))
        return REFUSE("%s: lies inside the source checkpoint (the source is %s)", out, src);
    if (fsdp_path_within(s, o))
        return REFUSE("%s: holds the source checkpoint: writing there would overwrite it (the source is %s)", out, src);
    if (holds_marker(parent))
        return REFUSE("%s: lies inside the checkpoint %s, whose files it would change (the source is %s)", out, parent,
                      src);
    if (kind == FSDP_CKPT_OUT_FILE && strcmp(name, "DONE") == 0)
        return REFUSE("%s: is named DONE, the completion marker: %s would read as a complete checkpoint (the source "
                      "is %s)", out, parent, src);
    if (fsdp_ckpt_parse_step_name(name, &step))
        return REFUSE("%s: is named like a checkpoint of a --ckpt-dir (step_NNNNNNNN): --resume %s would read it; "
                      "choose another name (the source is %s)", out, parent, src);
    struct stat st;
    if (kind == FSDP_CKPT_OUT_FILE || stat(o, &st) != 0) return FSDP_OK;  // a new directory
    if (!S_ISDIR(st.st_mode))
        return REFUSE("%s: exists and is not a directory; expected a new directory (the source is %s)", out, src);
    int steps = 0, entries = 0;
    if (list_entries(o, &steps, &entries) != 0)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot list: %s", out, strerror(errno));
    if (steps)
        return REFUSE("%s: is a checkpoint root (it holds step_NNNNNNNN entries): --resume %s would read the files "
                      "written there (the source is %s)", out, out, src);
    if (entries)
        return REFUSE("%s: exists and is not empty; expected a new or empty directory (nothing is overwritten; the "
                      "source is %s)", out, src);
    return FSDP_OK;
}
