// ckpt_lock.h: one job per checkpoint directory. The job that writes checkpoints into ROOT holds an
// advisory lock (flock) on ROOT/.lock for its lifetime; the file names the holder ("host H pid P
// since YYYY-MM-DD HH:MM:SS UTC"). The kernel drops the lock when the holder exits in any way (kill -9
// included), so a stale file from a killed job never blocks the next one.
#pragma once
#include <stddef.h>

#include "core/status.h"

#define FSDP_CKPT_LOCK_NAME ".lock"

// Takes the lock on root (an existing directory) without waiting: *fd = the open lock file (keep it
// open while the job runs; fsdp_ckpt_unlock releases it). When another process holds it: FSDP_ERR_IO
// with the message "ROOT is in use by another job (host H, pid P, since ...)"; the file is untouched.
fsdp_status fsdp_ckpt_lock(const char *root, int *fd);
// Releases the lock taken by fsdp_ckpt_lock (fd < 0: nothing to do); the file stays (it names the last
// holder, and a lock file nobody holds blocks nothing).
void fsdp_ckpt_unlock(int fd);
