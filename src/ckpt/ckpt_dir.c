// ckpt_dir.c: finding and rotating checkpoints in a checkpoint directory, and reading the completion
// marker DONE.
#include "ckpt/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fsdp_ckpt_step_dir(const char *root, int64_t step, char *out, size_t cap) {
    snprintf(out, cap, "%s/step_%08lld", root, (long long)step);
}

int fsdp_ckpt_parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *digits = name + 5;
    size_t n = strspn(digits, "0123456789");
    // exactly what fsdp_ckpt_step_dir writes: at least 8 digits, no extra leading zero, nothing after
    if (n < 8 || digits[n] || (n > 8 && digits[0] == '0') || n > 18) return 0;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (digits[i] - '0');  // < 10^18: no overflow
    *step = v;
    return 1;
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
        int64_t step;
        if (!fsdp_ckpt_parse_step_name(e->d_name, &step)) continue;
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

// --------------------------------------------------------------------------------- the marker DONE

// 1 if name[0..len) is a plain file name: [A-Za-z0-9._-], not starting with '.', shorter than
// FSDP_MARKER_NAME_MAX.
static int plain_file_name(const char *name, size_t len) {
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    if (len == 0 || len >= FSDP_MARKER_NAME_MAX || name[0] == '.') return 0;
    for (size_t i = 0; i < len; i++)
        if (!name[i] || !strchr(ok, name[i])) return 0;
    return 1;
}

// Parses one "<file> <8 hex digits>" line (line[0..len), no newline) into *out, or returns 0.
static int parse_file_line(const char *line, size_t len, fsdp_marker_file *out) {
    const char *space = memchr(line, ' ', len);
    if (!space) return 0;
    size_t name_len = (size_t)(space - line), hex_len = len - name_len - 1;
    if (!plain_file_name(line, name_len) || hex_len != 8) return 0;
    uint32_t crc = 0;
    for (size_t i = 0; i < 8; i++) {
        char c = space[1 + i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        crc = crc << 4 | (uint32_t)d;
    }
    memcpy(out->name, line, name_len);
    out->name[name_len] = 0;
    out->crc = crc;
    return 1;
}

fsdp_status fsdp_ckpt_parse_marker(const char *path, const char *text, size_t len, fsdp_marker_file *files, int max,
                                   int *n) {
    *n = 0;
    size_t pos = 0;
    for (int line_no = 1; pos < len; line_no++) {
        const char *line = text + pos, *nl = memchr(line, '\n', len - pos);
        if (!nl)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: line %d lacks its newline (a truncated marker?)", path, line_no);
        size_t line_len = (size_t)(nl - line);
        pos += line_len + 1;
        if (line_no == 1) {
            if (line_len != 8 || memcmp(line, "complete", 8) != 0)
                return fsdp_error(FSDP_ERR_FORMAT, "%s: line 1 must be 'complete'", path);
            continue;
        }
        fsdp_marker_file f;
        if (!parse_file_line(line, line_len, &f))
            return fsdp_error(FSDP_ERR_FORMAT, "%s: line %d: expected '<file name> <crc32 as 8 lowercase hex "
                              "digits>'", path, line_no);
        for (int i = 0; i < *n; i++)
            if (!strcmp(files[i].name, f.name))
                return fsdp_error(FSDP_ERR_FORMAT, "%s: line %d: '%s' is listed twice", path, line_no, f.name);
        if (*n == max)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: more than %d files listed", path, max);
        files[(*n)++] = f;
    }
    if (pos == 0) return fsdp_error(FSDP_ERR_FORMAT, "%s: empty (line 1 must be 'complete')", path);
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_read_marker(const char *dir, fsdp_marker_file *files, int max, int *n) {
    char path[4200], text[FSDP_MARKER_MAX_BYTES + 1];
    *n = 0;
    snprintf(path, sizeof path, "%s/DONE", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (errno == ENOENT)
            return fsdp_error(FSDP_ERR_MISSING, "%s: no completion marker DONE: the checkpoint is incomplete", dir);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    size_t len = fread(text, 1, sizeof text, fp);
    int failed = ferror(fp);
    fclose(fp);
    if (failed) return fsdp_error(FSDP_ERR_IO, "%s: read failed", path);
    if (len > FSDP_MARKER_MAX_BYTES)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: longer than %d bytes", path, FSDP_MARKER_MAX_BYTES);
    return fsdp_ckpt_parse_marker(path, text, len, files, max, n);
}
