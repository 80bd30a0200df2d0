// link_stubs.c: definitions for what fsdp_flags.c's cli_fsdp_build calls (the model, wrapping, loading),
// so that the flag harness links without the whole library. The harness never calls cli_fsdp_build;
// reaching any of these stops the run. fsdp_config_default returns zeros: cli_fsdp_config sets every
// field the flags control.
#include <stdlib.h>

#include "device/device_comm.h"
#include "fsdp/fsdp.h"

fsdp_config fsdp_config_default(void) { return (fsdp_config){0}; }
void nn_sequential_set_checkpointing(nn_sequential *s, int on) { abort(); }
fsdp_status fsdp_wrap(fsdp_state **out, fsdp_model_desc desc, fsdp_config cfg, fsdp_comm *world) { abort(); }
fsdp_status fsdp_init_params(fsdp_state *s, uint64_t seed) { abort(); }
fsdp_status fsdp_load_params(fsdp_state *s, const char *path, const char *alt_prefix, int strict, char *report,
                             size_t report_cap) {
    abort();
}
int fsdp_comm_rank(const fsdp_comm *c) { abort(); }
int fsdp_comm_size(const fsdp_comm *c) { abort(); }
void fsdp_free_state(fsdp_state *s) { abort(); }
fsdp_status fsdp_freeze_matching(nn_params *ps, const char *list) { abort(); }
fsdp_dev *fsdp_dev_default(void) { return NULL; }  // cli_fsdp_config records it; the harness never uses it
// --device opens the device once to report a bad name or a missing GPU as a one-line error: here every
// open fails (no device in the harness), so its capabilities and name are never asked for
fsdp_status fsdp_dev_open(const char *name, fsdp_dev **out) {
    *out = NULL;
    return fsdp_error(FSDP_ERR_INVALID_ARG, "device %s: not in the fuzz harness", name);
}
void fsdp_dev_close(fsdp_dev *d) { abort(); }
void fsdp_dev_capabilities(const fsdp_dev *d, fsdp_dev_caps *out) { abort(); }
const char *fsdp_dev_name(const fsdp_dev *d) { abort(); }
// --comm nccl|host asks the default device (NULL here) whether it can: a one-line error, as a device without
// the transport answers
fsdp_status fsdp_dev_comm_check(const fsdp_dev *d, const char *mode) {
    return fsdp_error(FSDP_ERR_INVALID_ARG, "no device in the fuzz harness for --comm %s", mode);
}
