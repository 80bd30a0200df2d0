// cli_args.c: flag parsing with range checks and one-line errors.
#include "cli/cli_args.h"
#include "core/tunables.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static void print_help(const char *prog, const char *summary, const cli_arg *args, int nargs) {
    printf("usage: %s [flags]\n%s\n\nflags:\n", prog, summary);
    for (int i = 0; i < nargs; i++) {
        const cli_arg *a = &args[i];
        char def[64] = "";
        switch (a->type) {
        case ARG_INT: snprintf(def, sizeof def, " (default %d)", *(int *)a->target); break;
        case ARG_FLOAT: snprintf(def, sizeof def, " (default %g)", (double)*(float *)a->target); break;
        case ARG_STRING:
        case ARG_LIST:
            if (*(const char **)a->target) snprintf(def, sizeof def, " (default %s)", *(const char **)a->target);
            break;
        case ARG_BOOL: break;
        case ARG_CHOICE: {
            int idx = *(int *)a->target;
            const char *c = a->choices;
            for (int k = 0; k < idx && c; k++) c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL;
            if (c) snprintf(def, sizeof def, " (default %.*s)", (int)strcspn(c, "|"), c);
            break;
        }
        }
        const char *meta = a->type == ARG_BOOL ? "" : a->type == ARG_CHOICE ? " {choice}" :
                           a->type == ARG_STRING || a->type == ARG_LIST ? " VALUE" : " N";
        printf("  %s%s%s\n      %s%s%s\n", a->name, meta, "", a->help, def,
               a->type == ARG_CHOICE ? "" : "");
        if (a->type == ARG_CHOICE) printf("      one of: %s\n", a->choices);
    }
    printf("  --env\n      print the FSDP_* environment variables fsdp.c reads (name, default, meaning) and exit\n");
    printf("\nA switch (a flag without a value) is turned off again with --no-NAME, e.g. after a --config file.\n");
}

// ARG_LIST values: each list flag's joined text in a buffer of its own, reachable from here until the
// process ends (a later parse of the same target reuses it).
typedef struct {
    const char **target;
    char *text;       // the joined values, or NULL before the second value
    int from_config;  // the values so far came from a --config file
} list_state;
static list_state lists[8];
// The argv index where the command line resumes after a --config file's flags (cli_config_argv; 0: no
// file): a list flag given on the command line replaces the file's values instead of adding to them.
static int config_end;

// Adds value to the list flag at target (on_command_line: value is typed, not from --config). 0, or -1
// when out of memory (or of list slots).
static int list_add(void *target, const char *value, int on_command_line) {
    const char **t = target, *old = *t;
    int slot = 0;
    while (slot < 8 && lists[slot].target && lists[slot].target != t) slot++;
    if (slot == 8) return -1;
    if (lists[slot].target != t) lists[slot] = (list_state){t, NULL, 0};
    if (old && on_command_line && lists[slot].from_config) old = NULL;  // the command line overrides the file
    lists[slot].from_config = !on_command_line;
    if (!old || old == value) {
        *t = value;
        return 0;
    }
    size_t len = strlen(old) + strlen(value) + 2;
    char *text = malloc(len);  // (len,) "old,value"
    if (!text) return -1;
    snprintf(text, len, "%s,%s", old, value);
    free(lists[slot].text);  // after the copy: old may be it
    lists[slot].text = text;
    *t = text;
    return 0;
}

static int choice_index(const char *choices, const char *value) {
    int idx = 0;
    for (const char *c = choices; c; idx++) {
        size_t len = strcspn(c, "|");
        if (strlen(value) == len && strncasecmp(c, value, len) == 0) return idx;  // FULL_SHARD == full_shard
        c = c[len] ? c + len + 1 : NULL;
    }
    return -1;
}

// Edit distance between a and b (insertions, deletions, substitutions), for names up to 63 characters.
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    int row[64];  // (lb + 1,) the previous row of the distance table, updated in place
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

// The flag an unknown `flag` most likely meant: the shortest name it is a prefix of (--clip, --clip-grad
// -> --clip-grad-norm), else the nearest name within a third of its length in edits; NULL when none is.
static const char *closest_flag(const char *flag, const cli_arg *args, int nargs) {
    const char *best = NULL;
    size_t n = strlen(flag);
    for (int k = 0; k < nargs && n > 2; k++)
        if (strncmp(args[k].name, flag, n) == 0 && (!best || strlen(args[k].name) < strlen(best))) best = args[k].name;
    if (best) return best;
    int best_d = (int)(n / 3) + 1;
    for (int k = 0; k < nargs; k++) {
        int d = edit_distance(flag, args[k].name);
        if (d < best_d) best_d = d, best = args[k].name;
    }
    return best;
}

int cli_parse(const char *prog, const char *summary, cli_arg *args, int nargs, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            print_help(prog, summary, args, nargs);
            return 1;
        }
        if (strcmp(flag, "--env") == 0) {  // the FSDP_* environment variables (core/tunables.h)
            fsdp_tunables_print(stdout);
            return 1;
        }
        cli_arg *a = NULL;
        for (int k = 0; k < nargs; k++)
            if (strcmp(args[k].name, flag) == 0) a = &args[k];
        // --no-X turns a switch --X off (as argparse's BooleanOptionalAction): what a --config file
        // switched on can be switched off again on the command line
        if (!a && strncmp(flag, "--no-", 5) == 0)
            for (int k = 0; k < nargs; k++)
                if (args[k].type == ARG_BOOL && strncmp(args[k].name, "--", 2) == 0 && strcmp(args[k].name + 2, flag + 5) == 0) {
                    *(int *)args[k].target = 0;
                    a = &args[k];
                }
        if (a && a->type == ARG_BOOL && strcmp(a->name, flag) != 0) continue;  // the --no- form, done
        if (!a) {
            const char *near = closest_flag(flag, args, nargs);
            if (near) fprintf(stderr, "%s: unknown flag %s (did you mean %s?)\n", prog, flag, near);
            else fprintf(stderr, "%s: unknown flag %s (see --help)\n", prog, flag);
            return -1;
        }
        if (a->type == ARG_BOOL) {
            *(int *)a->target = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s: missing value\n", prog, flag);
            return -1;
        }
        const char *value = argv[++i];
        char *end = NULL;
        errno = 0;
        switch (a->type) {
        case ARG_INT: {
            long v = strtol(value, &end, 10);
            int ranged = a->min <= a->max;  // an unranged flag still takes only what an int holds
            double lo = ranged ? a->min : INT_MIN, hi = ranged ? a->max : INT_MAX;
            if (!*value || *end || errno || v < lo || v > hi || v < INT_MIN || v > INT_MAX) {
                fprintf(stderr, "%s: %s: expected an integer in [%.0f, %.0f], got '%s'\n", prog, flag, lo, hi,
                        value);
                return -1;
            }
            *(int *)a->target = (int)v;
            break;
        }
        case ARG_FLOAT: {
            double v = strtod(value, &end);
            int ranged = a->min <= a->max;  // an unranged flag still takes only what a float holds
            double lo = ranged ? a->min : -FLT_MAX, hi = ranged ? a->max : FLT_MAX;
            if (!*value || *end || errno || !isfinite(v) || v < lo || v > hi || fabs(v) > FLT_MAX) {
                fprintf(stderr, "%s: %s: expected a number in [%g, %g], got '%s'\n", prog, flag, lo, hi, value);
                return -1;
            }
            *(float *)a->target = (float)v;
            break;
        }
        case ARG_STRING:
            if (!*value) {
                fprintf(stderr, "%s: %s: expected a non-empty value\n", prog, flag);
                return -1;
            }
            *(const char **)a->target = value;
            break;
        case ARG_LIST: {  // a repeated flag adds its value: "a,b"
            if (!*value) {
                fprintf(stderr, "%s: %s: expected a non-empty value\n", prog, flag);
                return -1;
            }
            if (list_add(a->target, value, i >= config_end) != 0) {
                fprintf(stderr, "%s: %s: out of memory\n", prog, flag);
                return -1;
            }
            break;
        }
        case ARG_CHOICE: {
            int idx = choice_index(a->choices, value);
            if (idx < 0) {
                fprintf(stderr, "%s: %s: expected one of %s, got '%s'\n", prog, flag, a->choices, value);
                return -1;
            }
            *(int *)a->target = idx;
            break;
        }
        case ARG_BOOL: break;
        }
    }
    return 0;
}

int cli_given(const cli_arg *args, int nargs, int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++) {
        const cli_arg *a = NULL;
        for (int k = 0; k < nargs; k++)
            if (strcmp(args[k].name, argv[i]) == 0) a = &args[k];
        if (!a) continue;
        if (strcmp(a->name, name) == 0) return 1;
        if (a->type != ARG_BOOL) i++;  // skip its value
    }
    return 0;
}

int cli_value_text(const cli_arg *a, char *buf, size_t cap) {
    switch (a->type) {
    case ARG_INT: snprintf(buf, cap, "%d", *(int *)a->target); return 1;
    case ARG_FLOAT: {  // the shortest text that reads back as the same float
        float v = *(float *)a->target;
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, cap, "%.*g", digits, (double)v);
            if (strtof(buf, NULL) == v) break;
        }
        return 1;
    }
    case ARG_BOOL: snprintf(buf, cap, "%s", *(int *)a->target ? "true" : "false"); return 1;
    case ARG_STRING:
    case ARG_LIST:
        if (!*(const char **)a->target) return 0;
        snprintf(buf, cap, "%s", *(const char **)a->target);
        return 1;
    case ARG_CHOICE: {
        const char *c = a->choices;
        for (int k = 0; k < *(int *)a->target && c; k++) c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL;
        if (!c) return 0;
        snprintf(buf, cap, "%.*s", (int)strcspn(c, "|"), c);
        return 1;
    }
    }
    return 0;
}

// The copies cli_value_set made of string values: (n_owned,) each a NUL-terminated string that some
// flag's target points at. A value set again (a --config file's, then a directory's config.json) frees
// the copy it replaces; the rest stay reachable from here until the process ends.
static char **owned;
static int n_owned, cap_owned;

static int own_string(const char **target, char *copy) {
    for (int i = 0; i < n_owned; i++)
        if (owned[i] == *target) {
            free(owned[i]);
            owned[i] = copy;
            *target = copy;
            return 0;
        }
    if (n_owned == cap_owned) {
        int cap = cap_owned ? 2 * cap_owned : 16;
        char **grown = realloc(owned, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        owned = grown;
        cap_owned = cap;
    }
    owned[n_owned++] = copy;
    *target = copy;
    return 0;
}

int cli_value_set(const cli_arg *a, const char *text) {
    int v = 0;
    if (a->type == ARG_INT) {
        char *end = NULL;
        errno = 0;
        long l = strtol(text, &end, 10);
        int ranged = a->min <= a->max;
        if (!*text || *end || errno || l < INT_MIN || l > INT_MAX || (ranged && (l < a->min || l > a->max))) return -1;
        v = (int)l;
    } else if (a->type == ARG_BOOL) {
        if (strcmp(text, "true") && strcmp(text, "false")) return -1;
        v = strcmp(text, "true") == 0;
    } else if (a->type == ARG_CHOICE) {
        if ((v = choice_index(a->choices, text)) < 0) return -1;
    } else if (a->type == ARG_STRING) {  // copied: the text may be a file's, freed before the flag is read
        char *copy = strdup(text);
        if (!copy || own_string((const char **)a->target, copy) != 0) {
            free(copy);
            return -1;
        }
        return 0;
    } else if (a->type == ARG_FLOAT) {
        char *end = NULL;
        errno = 0;
        float f = strtof(text, &end);
        if (!*text || *end || errno || f != f || (a->min <= a->max && (f < a->min || f > a->max))) return -1;
        *(float *)a->target = f;
        return 0;
    } else {
        return -1;
    }
    *(int *)a->target = v;
    return 0;
}

// ------------------------------------------------------------------------------------ --config FILE

static char *config_text;   // (CONFIG_MAX_BYTES + 2,) the file, cut into NUL-terminated names and values
static char **config_argv;  // (argc + 2 * lines + 1,) the expanded argv; both live until the process ends

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) *--end = 0;
    return s;
}

#define CONFIG_MAX_BYTES (1 << 20)

// Reads the --config file into config_text (NUL-terminated). It must be a regular file of at most
// CONFIG_MAX_BYTES holding text: a NUL byte or another control character (other than tab, CR, LF) is
// an error naming its line. Returns 0, or -1 after printing one line.
static int read_config_text(const char *prog, const char *path) {
    // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "%s: --config %s: cannot open: %s\n", prog, path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX_BYTES) {
        fprintf(stderr, "%s: --config %s: %s; expected a text file of at most 1 MiB\n", prog, path,
                S_ISDIR(st.st_mode) ? "is a directory" : !S_ISREG(st.st_mode) ? "not a regular file" : "too large");
        close(fd);
        return -1;
    }
    free(config_text);
    config_text = malloc(CONFIG_MAX_BYTES + 2);  // (CONFIG_MAX_BYTES + 2,): one byte more shows growth
    size_t got = 0;
    int err = 0;
    while (config_text && got <= CONFIG_MAX_BYTES) {  // to the end, or one byte past the bound
        ssize_t r = read(fd, config_text + got, CONFIG_MAX_BYTES + 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            err = r < 0 ? errno : 0;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (!config_text || err || got > CONFIG_MAX_BYTES) {
        fprintf(stderr, "%s: --config %s: %s\n", prog, path,
                !config_text ? "out of memory" : err ? strerror(err) : "too large; expected a text file of at most 1 MiB");
        return -1;
    }
    config_text[got] = 0;
    int line = 1;
    for (size_t i = 0; i < got; i++) {
        unsigned char ch = (unsigned char)config_text[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            fprintf(stderr, "%s: --config %s: line %d: %s byte 0x%02x: expected a text file\n", prog, path, line,
                    ch ? "a control" : "a NUL", ch);
            return -1;
        }
        line += ch == '\n';
    }
    return 0;
}

int cli_config_argv(const char *prog, const cli_arg *args, int nargs, int *argc, char ***argv) {
    int at = 0;
    config_end = 0;
    for (int i = 1; i < *argc; i++) {
        if (strcmp((*argv)[i], "--config") != 0) continue;
        if (at) {
            fprintf(stderr, "%s: --config given twice (one file; the command line overrides it)\n", prog);
            return -1;
        }
        at = i;
    }
    if (!at) return 0;
    if (at + 1 >= *argc) {
        fprintf(stderr, "%s: --config: expected a file name\n", prog);
        return -1;
    }
    const char *path = (*argv)[at + 1];
    if (read_config_text(prog, path) != 0) return -1;
    int lines = 1;
    for (const char *c = config_text; *c; c++) lines += *c == '\n';
    free(config_argv);
    config_argv = calloc((size_t)(*argc + 2 * lines + 1), sizeof(char *));
    if (!config_argv) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    // argv[0], "--config FILE" (recorded with the settings), the file's flags, then the rest of the
    // command line: cli_parse takes the last value of a flag, so the command line overrides the file.
    int n = 0;
    config_argv[n++] = (*argv)[0];
    config_argv[n++] = (*argv)[at];
    config_argv[n++] = (*argv)[at + 1];
    char *line = config_text;
    for (int line_no = 1; line; line_no++) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *hash = strchr(line, '#');  // a comment runs to the end of the line
        if (hash) *hash = 0;
        char *name = trim(line);
        line = next;
        if (!*name) continue;
        char *value = name + strcspn(name, " \t=");
        if (*value) {
            *value++ = 0;
            value = trim(value);
            if (*value == '=') value = trim(value + 1);
        }
        size_t vlen = strlen(value);
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {  // "a value with spaces"
            value[vlen - 1] = 0;
            value++;
        }
        // the name with or without its leading "--": point at the table's spelling
        const cli_arg *a = NULL;
        for (int k = 0; k < nargs && !a; k++)
            if (!strcmp(args[k].name, name) || !strcmp(args[k].name + 2, name)) a = &args[k];
        if (!a) {
            fprintf(stderr, "%s: --config %s: line %d: unknown flag '%s' (see --help)\n", prog, path, line_no, name);
            return -1;
        }
        if (!strcmp(a->name, "--config")) {
            fprintf(stderr, "%s: --config %s: line %d: a config file cannot name another one\n", prog, path, line_no);
            return -1;
        }
        if (a->type == ARG_BOOL) {  // "flag", "flag = true" or "flag = false"
            if (*value && strcmp(value, "true") && strcmp(value, "false")) {
                fprintf(stderr, "%s: --config %s: line %d: %s: expected true or false, got '%s'\n", prog, path,
                        line_no, a->name, value);
                return -1;
            }
            if (!strcmp(value, "false")) continue;
            config_argv[n++] = (char *)a->name;
            continue;
        }
        if (!*value) {
            fprintf(stderr, "%s: --config %s: line %d: %s: expected a value ('%s VALUE')\n", prog, path, line_no,
                    a->name, a->name + 2);
            return -1;
        }
        config_argv[n++] = (char *)a->name;
        config_argv[n++] = value;
    }
    config_end = n;  // the command line's flags follow
    for (int i = 1; i < *argc; i++)
        if (i != at && i != at + 1) config_argv[n++] = (*argv)[i];
    config_argv[n] = NULL;
    *argc = n;
    *argv = config_argv;
    return 0;
}
