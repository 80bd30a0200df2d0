// ckpt_lock.c: the advisory lock on a checkpoint directory (see ckpt_lock.h).
#include "ckpt/ckpt_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

// A holder's line that could not be written in full: none rather than a torn one.
static void holder_unknown(int f) {
    if (ftruncate(f, 0) != 0) return;
}

fsdp_status fsdp_ckpt_lock(const char *root, int *fd) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", root, FSDP_CKPT_LOCK_NAME);
    *fd = -1;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) return fsdp_error(FSDP_ERR_IO, "%s: cannot create the lock file: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[256] = "";
        ssize_t n = 0;
        // the holder writes its line just after it takes the lock: give a job that started together
        // with this one a moment to have written it
        for (int tries = 0; tries < 50 && (n = pread(f, holder, sizeof holder - 1, 0)) <= 0; tries++) {
            struct timespec pause = {0, 10 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        close(f);
        if (err != EWOULDBLOCK)
            return fsdp_error(FSDP_ERR_IO, "%s: cannot lock: %s", path, strerror(err));
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        return fsdp_error(FSDP_ERR_IO, "%s is in use by another job (%s): wait for it to end, or use another "
                          "directory", root, holder[0] ? holder : "holder unknown");
    }
    char host[128] = "?", line[256], when[32] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int len = snprintf(line, sizeof line, "host %s, pid %ld, since %s\n", host, (long)getpid(), when);
    // the holder's line is for messages only: a failure to write it does not stop the job
    if (ftruncate(f, 0) == 0 && pwrite(f, line, (size_t)len, 0) != len) holder_unknown(f);
    *fd = f;
    return FSDP_OK;
}

void fsdp_ckpt_unlock(int fd) {
    if (fd < 0) return;
    flock(fd, LOCK_UN);
    close(fd);
}
