// fuzz_ckpt_marker.c: the checkpoint directory's text formats: the completion marker DONE
// (fsdp_ckpt_parse_marker) and the step_NNNNNNNN directory names (fsdp_ckpt_parse_step_name).
// The first byte picks which; the rest is the input.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_dir.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {  // a directory entry's name: accepted names are exactly what step_dir writes
        char *name = malloc(len + 1), path[64];
        FUZZ_REQUIRE(name != NULL);
        memcpy(name, text, len);
        name[len] = 0;
        int64_t step = -1;
        if (fsdp_ckpt_parse_step_name(name, &step)) {
            FUZZ_REQUIRE(step >= 0);
            fsdp_ckpt_step_dir("r", step, path, sizeof path);
            FUZZ_REQUIRE(strncmp(path, "r/", 2) == 0 && strcmp(path + 2, name) == 0);
        }
        free(name);
        return 0;
    }
    fsdp_marker_file files[4];
    int n = -1;
    fsdp_clear_error();
    if (fsdp_ckpt_parse_marker("DONE", text, len, files, 4, &n) != FSDP_OK) {
        fuzz_check_error("DONE");
        return 0;
    }
    FUZZ_REQUIRE(n >= 0 && n <= 4);
    for (int i = 0; i < n; i++) {
        size_t k = strlen(files[i].name);
        FUZZ_REQUIRE(k > 0 && k < FSDP_MARKER_NAME_MAX && !strchr(files[i].name, '/') && files[i].name[0] != '.');
        for (int j = 0; j < i; j++) FUZZ_REQUIRE(strcmp(files[i].name, files[j].name) != 0);
    }
    return 0;
}
