// cli_args.h: a small table-driven flag parser for the command-line tools. Every flag has a type,
// a default (whatever the target holds before parsing) and a help line; `--help` prints them all.
// Invalid values give one line naming the flag and what was expected.
#pragma once
#include <stdint.h>

typedef enum { ARG_INT, ARG_FLOAT, ARG_STRING, ARG_BOOL, ARG_CHOICE } cli_arg_type;

typedef struct {
    const char *name;     // "--layers"
    cli_arg_type type;
    void *target;         // int*, float*, const char**, int* (bool, choice index)
    const char *help;
    double min, max;      // numeric range (inclusive); ignored when min > max
    const char *choices;  // ARG_CHOICE: "relu|gelu" -> index stored in *(int*)target
} cli_arg;

// Parses argv; returns 0 on success, 1 after printing --help, -1 after printing an error line.
int cli_parse(const char *prog, const char *summary, cli_arg *args, int nargs, int argc, char **argv);
