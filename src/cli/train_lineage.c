// train_lineage.c: the lock on --ckpt-dir and the lineage decision of a run (train_lineage.h).
#include "cli/train_lineage.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/ckpt_lock.h"

// Whether checkpoint dir is an entry of root itself (root/step_NNNNNNNN, however either is spelt).
static int entry_of_root(const char *root, const char *dir) {
    char parent[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = 0;
    char *slash = strrchr(parent, '/');
    int64_t step;
    if (!fsdp_ckpt_parse_step_name(slash ? slash + 1 : parent, &step)) return 0;
    if (slash == parent) snprintf(parent, sizeof parent, "/");
    else if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    return realpath(parent, a) && realpath(root, b) && strcmp(a, b) == 0;
}

// "run ID" or "no run id" for messages. out: (cap,)
static const char *run_words(const char *id, char *out, size_t cap) {
    if (id[0]) snprintf(out, cap, "run %s", id);
    else snprintf(out, cap, "no run id");
    return out;
}

// rank 0: the lineage decision for o (see train_lineage.h); on failure (FSDP_ERR_INVALID_ARG: the
// directory is refused) the message is the line to print, starting with prog.
static fsdp_status decide(const char *prog, cli_ckpt_options *o) {
    char resume[4096], newest[4096] = "", newest_run[64] = "", words[96], words2[96];
    int found = 0, n = 0;
    fsdp_ckpt_entry *list = NULL;
    fsdp_status st = cli_ckpt_resume_dir(o, resume, sizeof resume, &found);
    if (st == FSDP_OK) st = fsdp_ckpt_list(o->dir, &list, &n);
    if (st != FSDP_OK) {
        char why[1024];  // (fsdp_error writes over fsdp_last_error)
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        return fsdp_error(st, "%s: %s", prog, why);
    }
    int64_t newest_step = -1;
    for (int i = n - 1; i >= 0 && newest_step < 0; i--)
        if (list[i].complete) newest_step = list[i].step;
    if (newest_step >= 0) {
        int64_t step;
        fsdp_ckpt_step_dir(o->dir, newest_step, newest, sizeof newest);
        fsdp_ckpt_run_of(newest, newest_run, sizeof newest_run, &step);
    }
    char resumed_run[64] = "";
    int64_t resumed_step = 0;
    if (found) fsdp_ckpt_run_of(resume, resumed_run, sizeof resumed_run, &resumed_step);
    if (resumed_step < 0) resumed_step = 0;  // unreadable: the load names what is wrong
    int conflict = 0;  // a complete checkpoint of another history in the directory
    for (int i = 0; i < n && !conflict && found; i++) {
        if (!list[i].complete) continue;
        char dir[4096], id[64];
        int64_t step;
        fsdp_ckpt_step_dir(o->dir, list[i].step, dir, sizeof dir);
        fsdp_ckpt_run_of(dir, id, sizeof id, &step);
        conflict = list[i].step > resumed_step || strcmp(id, resumed_run) != 0;
    }
    int any_newer = 0;  // complete checkpoints past the resumed one (a crashed save's leftovers do not count)
    for (int i = 0; i < n; i++) any_newer |= list[i].complete && list[i].step > resumed_step;
    free(list);
    o->archive_after = -2;
    o->resumed_from = found ? resumed_step : 0;
    if (o->new_run) {
        if (n > 0) {
            o->archive_after = -1;
            snprintf(o->archive_why, sizeof o->archive_why, "new-run");
        }
        return fsdp_ckpt_new_run_id(o->run_id);
    }
    if (!found && newest_step >= 0)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: --ckpt-dir %s holds the checkpoints of another run (newest: %s, "
                          "%s): continue it with --resume auto, or start a new run with --new-run (they move to "
                          "%s/archive/, nothing is deleted)", prog, o->dir, newest,
                          run_words(newest_run, words, sizeof words), o->dir);
    if (found && entry_of_root(o->dir, resume)) {  // the directory's own checkpoint: continue, or branch
        if (any_newer) {
            o->archive_after = resumed_step;
            snprintf(o->archive_why, sizeof o->archive_why, "branch-at-step_%08lld", (long long)resumed_step);
        }
    } else if (found && conflict) {
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: --ckpt-dir %s holds checkpoints (newest: %s, %s) that --resume %s "
                          "(%s, step %lld) does not continue: resume from the directory itself (--resume auto), "
                          "start a new run with --new-run (they move to %s/archive/, nothing is deleted), or use "
                          "another --ckpt-dir", prog, o->dir, newest, run_words(newest_run, words, sizeof words), resume,
                          run_words(resumed_run, words2, sizeof words2), (long long)resumed_step, o->dir);
    }
    size_t run_len = strlen(resumed_run);
    if (found && run_len > 0 && run_len < sizeof o->run_id) {
        memcpy(o->run_id, resumed_run, run_len + 1);  // (fits: checked above)
        return FSDP_OK;
    }
    return fsdp_ckpt_new_run_id(o->run_id);  // a fresh start, or a checkpoint written before run ids
}

// rank 0: creates and locks o->dir, recovers it and decides; the message to print on failure.
static fsdp_status open_dir(const char *prog, cli_ckpt_options *o) {
    struct stat st;
    if (mkdir(o->dir, 0755) == 0) o->created_dir = 1;
    else if (errno != EEXIST)  // (EEXIST: it exists, or another job made it a moment ago)
        return fsdp_error(FSDP_ERR_IO, "%s: --ckpt-dir %s: cannot create the directory: %s", prog, o->dir,
                          strerror(errno));
    if (stat(o->dir, &st) != 0) {
        return fsdp_error(FSDP_ERR_IO, "%s: --ckpt-dir %s: %s", prog, o->dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: --ckpt-dir %s is not a directory", prog, o->dir);
    }
    char why[1024];  // a copy of the failing call's message (fsdp_error writes over fsdp_last_error)
    if (fsdp_ckpt_lock(o->dir, &o->lock_fd) != FSDP_OK) {
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        return fsdp_error(FSDP_ERR_IO, "%s: --ckpt-dir %s", prog, why);
    }
    o->opened = 1;
    if (fsdp_ckpt_recover(o->dir) != FSDP_OK) {
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        return fsdp_error(FSDP_ERR_IO, "%s: --ckpt-dir %s: %s", prog, o->dir, why);
    }
    return decide(prog, o);
}

int cli_ckpt_open(const char *prog, cli_ckpt_options *o, int writes, fsdp_comm *world) {
    o->opened = o->created_dir = o->saved = 0;
    o->lock_fd = -1;
    o->run_id[0] = 0;
    o->resumed_from = 0;
    o->archive_after = -2;
    if (!writes || !o->dir) return 0;
    double failed = 0.0;
    if (fsdp_comm_rank(world) == 0 && open_dir(prog, o) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        failed = 1.0;
    }
    if (fsdp_all_reduce_double(world, &failed) != FSDP_OK) {
        fprintf(stderr, "%s: --ckpt-dir: cannot exchange the result between ranks\n", prog);
        failed = 1.0;
    }
    if (failed > 0.0) {
        cli_ckpt_close(o);
        return 2;
    }
    return 0;
}

void cli_ckpt_close(cli_ckpt_options *o) {
    if (o->created_dir && o->saved == 0) {  // nothing of this run in it: leave no empty directory behind
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", o->dir, FSDP_CKPT_LOCK_NAME);
        if (o->opened) unlink(path);
        rmdir(o->dir);  // only if empty
    }
    if (o->opened) fsdp_ckpt_unlock(o->lock_fd);
    o->opened = o->created_dir = 0;
    o->lock_fd = -1;
}
