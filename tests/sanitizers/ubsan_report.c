// ubsan_report.c: linked into every executable of the sanitized build (FSDP_SANITIZE). UBSan (GCC's
// libubsan next to libasan) ignores log_path and reports on stderr only, where a test that captures a
// child's stderr and expects it to fail would never show it. UBSan calls this hook on each report:
// it writes the finding into $SANITIZER_REPORTS_DIR (set by run-sanitized.sh), which fails the test.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void __ubsan_on_report(void);
void __ubsan_get_current_report_data(const char **kind, const char **message, const char **file, unsigned *line,
                                     unsigned *col, char **memory_addr);

void __ubsan_on_report(void) {
    const char *dir = getenv("SANITIZER_REPORTS_DIR");
    if (!dir) return;
    const char *kind = "", *message = "", *file = "";  // owned by the runtime, valid during the report
    unsigned line = 0, col = 0;
    char *addr = NULL;  // unused: the memory the report points at
    __ubsan_get_current_report_data(&kind, &message, &file, &line, &col, &addr);
    char path[4096];
    snprintf(path, sizeof path, "%s/ubsan.%ld", dir, (long)getpid());
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "UndefinedBehaviorSanitizer: %s: %s at %s:%u:%u (the stack is on the process's stderr)\n", kind,
            message, file ? file : "?", line, col);
    fclose(f);
}
