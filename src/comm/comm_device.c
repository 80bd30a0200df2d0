// comm_device.c: the slot for a device backend's transport on a group (comm.h:
// fsdp_comm_set_device_transport), the process's list of groups that have one (for the watchdog's
// fsdp_comm_abort_device), and the transport's detach when its group is freed (comm_device_detach).
#include <pthread.h>
#include <stddef.h>

#include "comm/comm_group.h"

// The groups with a device transport installed (fsdp_comm_abort_device reaches them from the watchdog's
// thread): a few per device (world, shard and replica groups), COMM_MAX_DEVICE_GROUPS at most.
#define COMM_MAX_DEVICE_GROUPS 64
static fsdp_comm *device_groups[COMM_MAX_DEVICE_GROUPS];
static pthread_mutex_t device_groups_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember_device_group(fsdp_comm *c, int on) {
    pthread_mutex_lock(&device_groups_lock);
    int slot = -1;
    for (int i = 0; i < COMM_MAX_DEVICE_GROUPS; i++) {
        if (device_groups[i] == c) device_groups[i] = NULL;
        if (!device_groups[i] && slot < 0) slot = i;
    }
    if (on && slot >= 0) device_groups[slot] = c;
    pthread_mutex_unlock(&device_groups_lock);
}

void fsdp_comm_abort_device(void) {
    pthread_mutex_lock(&device_groups_lock);
    for (int i = 0; i < COMM_MAX_DEVICE_GROUPS; i++) {
        fsdp_comm *c = device_groups[i];
        if (c && c->device && c->device->abort) c->device->abort(c, c->device_ctx);
    }
    pthread_mutex_unlock(&device_groups_lock);
}

void comm_device_detach(fsdp_comm *c) {
    if (!c->device) return;
    if (c->device->detach) c->device->detach(c, c->device_ctx);
    remember_device_group(c, 0);
    c->device = NULL, c->device_ctx = NULL;
}

fsdp_status fsdp_comm_set_device_transport(fsdp_comm *c, const fsdp_comm_transport *t, void *ctx) {
    if (t && (!t->name || (t->iall_gather && !t->all_gather) || (t->ireduce_scatter && !t->reduce_scatter) ||
              (t->iall_reduce && !t->all_reduce) ||
              ((t->iall_gather || t->ireduce_scatter || t->iall_reduce) && (!t->test || !t->wait || !t->release))))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_comm_set_device_transport: transport %s lacks a name, a "
                          "blocking form of a nonblocking one, or test/wait/release", t->name ? t->name : "(unnamed)");
    c->device = t;
    c->device_ctx = t ? ctx : NULL;
    remember_device_group(c, t != NULL);
    return FSDP_OK;
}
