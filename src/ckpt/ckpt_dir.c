// ckpt_dir.c: finding, rotating and archiving checkpoints in a checkpoint directory, the run each
// belongs to, and reading the completion marker DONE.
#include "ckpt/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "core/fault_inject.h"

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

static int cmp_step(const void *a, const void *b) {
    int64_t x = ((const fsdp_ckpt_entry *)a)->step, y = ((const fsdp_ckpt_entry *)b)->step;
    return (x > y) - (x < y);
}

#define JOURNAL_NAME ".archiving"
#define TRASH_PREFIX ".trash-"

// The archiving journal of root: *after = the step above which entries are set aside (-1: all) and
// name (cap,) the archive directory's name; *pending = 0 when there is none.
static fsdp_status read_journal(const char *root, int *pending, long long *after, char *name, size_t cap) {
    char path[4200], text[512];
    snprintf(path, sizeof path, "%s/%s", root, JOURNAL_NAME);
    *pending = 0;
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    char fmt[32], got[256];
    snprintf(fmt, sizeof fmt, "after %%lld into %%%zus", sizeof got - 1);
    if (sscanf(text, fmt, after, got) != 2 || *after < -1 || strchr(got, '/') || got[0] == '.')
        return fsdp_error(FSDP_ERR_FORMAT, "%s: expected 'after <step> into <name>' (a damaged archiving journal)", path);
    snprintf(name, cap, "%s", got);
    *pending = 1;
    return FSDP_OK;
}

// Every step_* entry of root, sorted by step (set_aside: also those an archiving journal names).
static fsdp_status scan(const char *root, int set_aside, fsdp_ckpt_entry **list, int *n) {
    *list = NULL;
    *n = 0;
    int pending = 0;
    long long after = -1;
    char name[256];
    if (!set_aside) FSDP_CHECK(read_journal(root, &pending, &after, name, sizeof name));
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: cannot list: %s", root, strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        if (!fsdp_ckpt_parse_step_name(e->d_name, &step) || (pending && step > after)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            fsdp_ckpt_entry *grown = realloc(*list, sizeof(fsdp_ckpt_entry) * (size_t)cap);
            if (!grown) {
                closedir(d);
                free(*list);
                *list = NULL;
                *n = 0;
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
    if (*n) qsort(*list, (size_t)*n, sizeof(fsdp_ckpt_entry), cmp_step);
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_list(const char *root, fsdp_ckpt_entry **list, int *n) { return scan(root, 0, list, n); }

fsdp_status fsdp_ckpt_latest(const char *root, char *out, size_t cap, int *found) {
    fsdp_ckpt_entry *list;
    int n;
    *found = 0;
    FSDP_CHECK(scan(root, 0, &list, &n));
    for (int i = n - 1; i >= 0; i--)
        if (list[i].complete) {
            fsdp_ckpt_step_dir(root, list[i].step, out, cap);
            *found = 1;
            break;
        }
    free(list);
    return FSDP_OK;
}

// ------------------------------------------------------------------------------------- lineages

fsdp_status fsdp_ckpt_new_run_id(char *out) {
    unsigned char bytes[FSDP_CKPT_RUN_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t r = getrandom(bytes + got, sizeof bytes - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return fsdp_error(FSDP_ERR_IO, "cannot make a run id: getrandom: %s", strerror(errno));
        got += (size_t)r;
    }
    for (size_t i = 0; i < sizeof bytes; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    return FSDP_OK;
}

void fsdp_ckpt_meta_file(const char *dir, char *path, size_t cap) {
    snprintf(path, cap, "%s/model.safetensors", dir);
    int full = access(path, F_OK) == 0;
    snprintf(path, cap, full ? "%s/optimizer.safetensors" : "%s/index.safetensors", dir);
}

void fsdp_ckpt_run_of(const char *dir, char *run_id, size_t cap, int64_t *step) {
    char path[4200];
    fsdp_ckpt_meta_file(dir, path, sizeof path);
    snprintf(run_id, cap, "%s", "");
    *step = -1;
    st_file *f = NULL;
    if (st_open(path, &f) != FSDP_OK) {
        fsdp_clear_error();
        return;
    }
    const char *id = st_metadata(f, FSDP_CKPT_RUN_KEY), *s = st_metadata(f, "step");
    if (id) snprintf(run_id, cap, "%s", id);
    if (s) *step = strtoll(s, NULL, 10);
    st_close(f);
}

// -------------------------------------------------------------------------------------- removal

// Deletes the files of a checkpoint directory, then the directory (checkpoints are flat).
// crash_point: the fault hook's point (-1: none): 1 dies after the first file is deleted.
static void remove_tree(const char *path, int crash_point) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char child[4096 + 256];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            unlink(child);
            if (crash_point == 1) fsdp_fault_die();
        }
        closedir(d);
    }
    rmdir(path);
}

// Renames root/step_<step> to a hidden name, then deletes it (see fsdp_ckpt_rotate). crash_point: the
// fault hook's (-1: none): 0 dies after the rename, 1 after the first file, 2 once it is gone.
static fsdp_status remove_checkpoint(const char *root, int64_t step, int crash_point) {
    char dir[4096], trash[4300];
    fsdp_ckpt_step_dir(root, step, dir, sizeof dir);
    snprintf(trash, sizeof trash, "%s/" TRASH_PREFIX "step_%08lld.%ld", root, (long long)step, (long)getpid());
    if (rename(dir, trash) != 0)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot remove (rotation, --keep-last): %s", dir, strerror(errno));
    if (crash_point == 0) fsdp_fault_die();
    remove_tree(trash, crash_point);
    if (crash_point == 2) fsdp_fault_die();
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_rotate(const char *root, int keep, const char *run_id) {
    if (keep < 1) return FSDP_OK;
    fsdp_ckpt_entry *list;
    int n;
    FSDP_CHECK(scan(root, 0, &list, &n));
    int kept = 0;
    int64_t newest_kept = -1;
    fsdp_status st = FSDP_OK;
    for (int i = n - 1; i >= 0 && st == FSDP_OK; i--) {
        int remove = 0;
        if (list[i].complete) {
            char dir[4096], id[64];
            int64_t step;
            fsdp_ckpt_step_dir(root, list[i].step, dir, sizeof dir);
            fsdp_ckpt_run_of(dir, id, sizeof id, &step);
            if (!run_id[0] || strcmp(id, run_id) != 0) continue;  // another run's, or one without an id
            if (kept < keep) {
                if (kept++ == 0) newest_kept = list[i].step;
                continue;
            }
            remove = 1;
        } else {
            remove = newest_kept >= 0 && list[i].step < newest_kept;
        }
        if (remove) st = remove_checkpoint(root, list[i].step, fsdp_fault_crash_in_rotate(newest_kept));
    }
    free(list);
    return st;
}

// ------------------------------------------------------------------------------------- archiving

// Writes text to path through a temporary file, fsync'ed, then renamed over path.
static fsdp_status write_atomically(const char *path, const char *text) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        if (!bad) err = errno;
        unlink(tmp);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot write: %s", path, strerror(err));
    }
    return FSDP_OK;
}

// Moves root's step_* entries newer than after into root/archive/name, then drops the journal.
static fsdp_status finish_archive(const char *root, long long after, const char *name, int *moved) {
    fsdp_ckpt_entry *list;
    int n;
    char target[4300], from[4096], to[4400], journal[4200];
    *moved = 0;
    FSDP_CHECK(scan(root, 1, &list, &n));
    snprintf(target, sizeof target, "%s/archive", root);
    fsdp_status st = mkdir(target, 0755) == 0 || errno == EEXIST ? FSDP_OK
                     : fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", target, strerror(errno));
    snprintf(target, sizeof target, "%s/archive/%s", root, name);
    if (st == FSDP_OK && mkdir(target, 0755) != 0 && errno != EEXIST)
        st = fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", target, strerror(errno));
    for (int i = 0; i < n && st == FSDP_OK; i++) {
        if (list[i].step <= after) continue;
        fsdp_ckpt_step_dir(root, list[i].step, from, sizeof from);
        snprintf(to, sizeof to, "%s/step_%08lld", target, (long long)list[i].step);
        if (rename(from, to) != 0)
            st = fsdp_error(FSDP_ERR_IO, "%s: cannot move to %s: %s", from, to, strerror(errno));
        else
            ++*moved;
    }
    free(list);
    snprintf(journal, sizeof journal, "%s/%s", root, JOURNAL_NAME);
    if (st == FSDP_OK && unlink(journal) != 0 && errno != ENOENT)
        st = fsdp_error(FSDP_ERR_IO, "%s: cannot remove: %s", journal, strerror(errno));
    return st;
}

fsdp_status fsdp_ckpt_archive(const char *root, int64_t after, const char *why, const char *reason, char *where,
                              size_t cap, int *moved) {
    *moved = 0;
    FSDP_CHECK(fsdp_ckpt_recover(root));
    fsdp_ckpt_entry *list;
    int n, any = 0;
    FSDP_CHECK(scan(root, 1, &list, &n));
    for (int i = 0; i < n; i++) any |= list[i].step > after;
    free(list);
    if (!any) return FSDP_OK;
    char base[4300], name[256], stamp[32] = "00000000-000000", path[4600], text[1024];
    snprintf(base, sizeof base, "%s/archive", root);
    if (mkdir(base, 0755) != 0 && errno != EEXIST)
        return fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", base, strerror(errno));
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int k = 1;; k++) {  // a name of its own, even for several archivings within a second
        if (k == 1) snprintf(name, sizeof name, "%s-%s", stamp, why);
        else snprintf(name, sizeof name, "%s-%s-%d", stamp, why, k);
        snprintf(path, sizeof path, "%s/%s", base, name);
        if (mkdir(path, 0755) == 0) break;
        if (errno != EEXIST || k == 1000) return fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    snprintf(path, sizeof path, "%s/%s/ARCHIVED", base, name);
    snprintf(text, sizeof text, "%s\n", reason);
    FSDP_CHECK(write_atomically(path, text));
    snprintf(path, sizeof path, "%s/%s", root, JOURNAL_NAME);
    snprintf(text, sizeof text, "after %lld into %s\n", (long long)(after < -1 ? -1 : after), name);
    FSDP_CHECK(write_atomically(path, text));  // from here on the entries are set aside
    if (fsdp_fault_crash_in_archive()) fsdp_fault_die();
    FSDP_CHECK(finish_archive(root, after < -1 ? -1 : after, name, moved));
    snprintf(where, cap, "%s/%s", base, name);
    return FSDP_OK;
}

fsdp_status fsdp_ckpt_recover(const char *root) {
    int pending = 0, moved = 0;
    long long after = -1;
    char name[256];
    FSDP_CHECK(read_journal(root, &pending, &after, name, sizeof name));
    if (pending) FSDP_CHECK(finish_archive(root, after, name, &moved));
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: cannot list: %s", root, strerror(errno));
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, TRASH_PREFIX, strlen(TRASH_PREFIX))) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", root, e->d_name);
            remove_tree(path, -1);
        }
    closedir(d);
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
