// fuzz_cli_flags.c: the flag parser (cli_parse) with the shared FSDP flags of fsdp-train and
// fsdp-minimal plus one flag of every kind (ranged and unranged int and float, string, bool, choice),
// then cli_fsdp_config. The input is argv[1..], arguments separated by NUL bytes. Run it with
// -close_fd_mask=3: --help and the error lines go to stdout and stderr.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/fsdp_flags.h"
#include "fuzz_check.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);  // (size + 1,): the arguments, NUL-separated
    char *argv[MAX_ARGS + 1] = {"fuzz"};
    int argc = 1;
    FUZZ_REQUIRE(text != NULL);
    memcpy(text, data, size);
    text[size] = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i += strlen(text + i) + 1) argv[argc++] = text + i;

    cli_fsdp_options o;
    cli_fsdp_defaults(&o);
    int ranged = 5, unranged = 7, b = 0, choice = 1;
    float rf = 0.5f, uf = 1.0f;
    const char *str = NULL;
    cli_arg args[8 + CLI_FSDP_NFLAGS] = {
        {"--ranged-int", ARG_INT, &ranged, "an int in [-3, 1e6]", -3, 1e6, NULL},
        {"--int", ARG_INT, &unranged, "any int", 1, 0, NULL},
        {"--ranged-float", ARG_FLOAT, &rf, "a number in [0, 1]", 0, 1, NULL},
        {"--float", ARG_FLOAT, &uf, "any number", 1, 0, NULL},
        {"--string", ARG_STRING, &str, "a string", 1, 0, NULL},
        {"--bool", ARG_BOOL, &b, "a switch", 1, 0, NULL},
        {"--choice", ARG_CHOICE, &choice, "a choice", 1, 0, "a|bb||ccc"},
        {"--choice1", ARG_CHOICE, &choice, "a one-way choice", 1, 0, "only"},
    };
    int nargs = cli_fsdp_add_flags(args, 8, &o);
    int r = cli_parse("fuzz", "a fuzzed command line", args, nargs, argc, argv);
    FUZZ_REQUIRE(r == 0 || r == 1 || r == -1);
    const char *last_int = NULL, *last_float = NULL;
    if (r == 0) {
        FUZZ_REQUIRE(ranged >= -3 && ranged <= 1000000);
        FUZZ_REQUIRE(rf >= 0 && rf <= 1 && isfinite(uf));
        FUZZ_REQUIRE(choice >= 0 && choice <= 3 && (str == NULL || *str));
        FUZZ_REQUIRE(o.strategy >= 0 && o.strategy <= 4 && o.limit_all_gathers >= 0 && o.ckpt.save_every >= 0);
        // the unranged flags hold exactly what was given (nothing truncated or overflowed)
        for (int i = 1; i + 1 < argc; i++) {
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) break;
            if (!strcmp(argv[i], "--bool") || !strcmp(argv[i], "--forward-prefetch") ||
                !strcmp(argv[i], "--activation-checkpointing") || !strcmp(argv[i], "--cpu-offload") ||
                !strcmp(argv[i], "--summary") || !strcmp(argv[i], "--init-nonstrict"))
                continue;  // takes no value
            const char *v = argv[++i];
            if (!strcmp(argv[i - 1], "--int")) last_int = v;
            if (!strcmp(argv[i - 1], "--float")) last_float = v;
        }
        FUZZ_REQUIRE(!last_int || strtol(last_int, NULL, 10) == unranged);
        FUZZ_REQUIRE(!last_float || (double)(float)strtod(last_float, NULL) == (double)uf);
        fsdp_config cfg;
        (void)cli_fsdp_config("fuzz", &o, &cfg);
        (void)cli_fsdp_check_flags("fuzz", &o, 1);  // rank 1: checks without printing
    }
    free(text);
    return 0;
}
