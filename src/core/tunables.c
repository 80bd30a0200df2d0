// tunables.c: the FSDP_* environment registry (tunables.h).
#include "core/tunables.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

typedef struct {
    const char *name, *dflt, *meaning;
} tunable;

static const tunable registry[FSDP_ENV_COUNT] = {
#define FSDP_TUNABLE_ENTRY(id, d, m) {"FSDP_" #id, d, m},
    FSDP_TUNABLE_LIST(FSDP_TUNABLE_ENTRY)
#undef FSDP_TUNABLE_ENTRY
};

const char *fsdp_tunable(fsdp_tunable_id id) {
    const char *v = getenv(registry[id].name);
    return v && *v ? v : NULL;
}

const char *fsdp_tunable_name(fsdp_tunable_id id) { return registry[id].name; }

// Edit distance of a and b (each shorter than 64 characters; longer: a large number).
static int distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n >= 64 || m >= 64) return 1000;
    int row[65];  // (m + 1,) the previous row of the table
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

void fsdp_tunables_warn_unknown(const char *prog) {
    static int warned;
    if (warned) return;
    warned = 1;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "FSDP_", 5) != 0) continue;
        char name[128];
        size_t len = strcspn(*e, "=");
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, *e, len);
        name[len] = 0;
        int known = 0, best = 1000;
        const char *close = NULL;
        for (int i = 0; i < FSDP_ENV_COUNT && !known; i++) {
            known = strcmp(name, registry[i].name) == 0;
            int d = distance(name, registry[i].name);
            if (d < best) best = d, close = registry[i].name;
        }
        if (known) continue;
        if (close && best <= 3)
            fprintf(stderr, "%s: warning: %s is set but fsdp.c reads no such variable (did you mean %s? `%s --env` "
                    "lists them)\n", prog, name, close, prog);
        else
            fprintf(stderr, "%s: warning: %s is set but fsdp.c reads no such variable (`%s --env` lists them)\n", prog,
                    name, prog);
    }
}

void fsdp_tunables_print(FILE *f) {
    fprintf(f, "| variable | default | meaning |\n| --- | --- | --- |\n");
    for (int i = 0; i < FSDP_ENV_COUNT; i++)
        fprintf(f, "| `%s` | %s | %s |\n", registry[i].name, registry[i].dflt, registry[i].meaning);
}
