// cli_args.h: a small table-driven flag parser for the command-line tools. Every flag has a type,
// a default (whatever the target holds before parsing) and a help line; `--help` prints them all.
// Invalid values give one line naming the flag and what was expected.
#pragma once
#include <stddef.h>
#include <stdint.h>

// ARG_LIST: a string flag that may be given more than once; the values are joined with commas
typedef enum { ARG_INT, ARG_FLOAT, ARG_STRING, ARG_BOOL, ARG_CHOICE, ARG_LIST } cli_arg_type;

typedef struct {
    const char *name;     // "--layers"
    cli_arg_type type;
    void *target;         // int*, float*, const char** (string, list), int* (bool, choice index)
    const char *help;
    double min, max;      // numeric range (inclusive); ignored when min > max
    const char *choices;  // ARG_CHOICE: "relu|gelu" -> index stored in *(int*)target
} cli_arg;

// Parses argv; returns 0 on success, 1 after printing --help, -1 after printing an error line.
int cli_parse(const char *prog, const char *summary, cli_arg *args, int nargs, int argc, char **argv);

// Whether flag `name` was given on the command line (a default is not), walking argv as cli_parse does.
int cli_given(const cli_arg *args, int nargs, int argc, char **argv, const char *name);
// a's current value as text: the number, the choice's name, true/false, the string; 0 when it has none
// (an unset string), 1 when written.
int cli_value_text(const cli_arg *a, char *buf, size_t cap);
// Sets an int, float, string (copied), bool or choice flag's target from such text; -1 (target untouched) when it does not parse
// or is outside the flag's range.
int cli_value_set(const cli_arg *a, const char *text);

// --config FILE: the flags as a file, one a line: "name value", "name = value" or, for a switch, "name"
// ("name = false" leaves it off); name with or without its "--"; '#' starts a comment; a value may be
// double-quoted. When argv holds "--config FILE", replaces *argc and *argv with argv[0], "--config FILE",
// the file's flags and then the rest of the command line, so that a flag given on the command line
// overrides the file's (and counts as given, for cli_given) while the file's flags count as given too.
// The new argv lives until the process ends. Returns 0 (argv untouched without --config), or -1 after
// printing one line naming the file, the line and what was expected.
int cli_config_argv(const char *prog, const cli_arg *args, int nargs, int *argc, char ***argv);
