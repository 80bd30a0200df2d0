// train_log.c: progress line, JSON lines log and the loss-curve plot (gnuplot) of fsdp-train.
#include "cli/train_log.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int train_log_open(train_log *log, const char *jsonl_path, int steps, int append) {
    memset(log, 0, sizeof *log);
    log->capacity = steps > 0 ? steps : 1;
    log->history = calloc((size_t)log->capacity, sizeof(train_record));
    if (!log->history) {
        fprintf(stderr, "fsdp-train: out of memory for the training log\n");
        return -1;
    }
    if (jsonl_path && !(log->jsonl = fopen(jsonl_path, append ? "a" : "w"))) {
        fprintf(stderr, "fsdp-train: --log-jsonl %s: cannot open for writing\n", jsonl_path);
        return -1;
    }
    return 0;
}

static void format_eta(double seconds, char *buf, size_t cap) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
}

// A record carries a validation loss when val_loss is not negative; a NaN one counts (and shows as nan/null).
static int evaluated(const train_record *r) { return !(r->val_loss < 0); }

// JSON has no NaN or Inf: a non-finite value is written as null. buf: (cap) the text
static void json_number(double v, char *buf, size_t cap) {
    if (isfinite(v)) snprintf(buf, cap, "%.17g", v);  // round-trips: runs compare bit for bit
    else snprintf(buf, cap, "null");
}

void train_log_step(train_log *log, const train_record *r, int total_steps, double elapsed_s, int steps_done) {
    char eta[32];
    double per_step = steps_done > 0 ? elapsed_s / steps_done : r->ms_step / 1e3;
    format_eta(per_step * (total_steps - r->step - 1), eta, sizeof eta);
    printf("step %d loss %.6f", r->step, r->loss);
    if (evaluated(r)) printf(" val %.4f", r->val_loss);
    printf(" | grad norm %.4g | lr %.2e | %.0f tok/s | %.0f ms | comm %.1f%% | mem %.0f MiB | eta %s\n", r->grad_norm,
           r->lr, r->tokens_per_s, r->ms_step, r->exposed_comm_pct, r->peak_mem_bytes / 1048576.0, eta);
    fflush(stdout);
    if (log->jsonl) {
        char loss[32], norm[32];  // a skipped non-finite step records null
        json_number(r->loss, loss, sizeof loss);
        json_number(r->grad_norm, norm, sizeof norm);
        fprintf(log->jsonl,
                "{\"step\": %d, \"loss\": %s, \"grad_norm\": %s, \"lr\": %.9g, \"tokens_per_s\": %.3f, "
                "\"ms_step\": %.3f, \"exposed_comm_pct\": %.3f, \"peak_mem_bytes\": %.0f",
                r->step, loss, norm, r->lr, r->tokens_per_s, r->ms_step, r->exposed_comm_pct, r->peak_mem_bytes);
        if (evaluated(r)) {
            char val[32];
            json_number(r->val_loss, val, sizeof val);
            fprintf(log->jsonl, ", \"val_loss\": %s", val);
        }
        fprintf(log->jsonl, "}\n");
        fflush(log->jsonl);
    }
    if (log->count < log->capacity) log->history[log->count++] = *r;
}

// Writes s as a gnuplot single-quoted string: a quote inside is doubled (so any file name is safe).
static void gnuplot_quoted(FILE *gp, const char *s) {
    fputc('\'', gp);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', gp);
        fputc(*s, gp);
    }
    fputc('\'', gp);
}

int train_log_plot(const train_log *log, const char *png_path) {
    char data[] = "/tmp/fsdp-plot-XXXXXX";
    int fd = mkstemp(data);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "fsdp-train: --plot: cannot create a temporary data file\n");
        return -1;
    }
    int have_val = 0;
    for (int i = 0; i < log->count; i++) {
        const train_record *r = &log->history[i];
        if (evaluated(r)) have_val = 1;
        fprintf(f, "%d %.9g\n", r->step, r->loss);
    }
    fprintf(f, "\n\n");
    for (int i = 0; i < log->count; i++)
        if (evaluated(&log->history[i])) fprintf(f, "%d %.9g\n", log->history[i].step, log->history[i].val_loss);
    fclose(f);
    char tmp_png[4096];
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%d", png_path, (int)getpid());
    // gnuplot quiet (a PNG it cannot place must not reach our stdout); SIGPIPE ignored meanwhile, so a
    // gnuplot that is missing or exits early is an error message, not the death of the trainer
    void (*old_sigpipe)(int) = signal(SIGPIPE, SIG_IGN);
    FILE *gp = popen("gnuplot >/dev/null 2>&1", "w");
    if (!gp) {
        signal(SIGPIPE, old_sigpipe);
        unlink(data);
        fprintf(stderr, "fsdp-train: --plot: cannot run gnuplot (apt-get install gnuplot-nox)\n");
        return -1;
    }
    fprintf(gp, "set terminal pngcairo size 900,500 noenhanced\nset output ");
    gnuplot_quoted(gp, tmp_png);
    fprintf(gp, "\nset xlabel 'step'\nset ylabel 'loss'\nset grid\nset title 'fsdp-train loss'\n");
    fprintf(gp, "plot '%s' index 0 using 1:2 with lines lw 2 title 'train'%s\n", data,
            have_val ? ", '' index 1 using 1:2 with linespoints lw 2 title 'validation'" : "");
    int rc = pclose(gp);
    signal(SIGPIPE, old_sigpipe);
    unlink(data);
    if (rc != 0 || rename(tmp_png, png_path) != 0) {
        unlink(tmp_png);
        fprintf(stderr, "fsdp-train: --plot %s: gnuplot failed (is gnuplot-nox installed?)\n", png_path);
        return -1;
    }
    return 0;
}

void train_log_close(train_log *log) {
    if (log->jsonl) fclose(log->jsonl);
    free(log->history);
    memset(log, 0, sizeof *log);
}
