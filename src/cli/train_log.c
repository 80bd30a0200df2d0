// train_log.c: progress line, JSON lines log and the loss-curve plot (gnuplot) of fsdp-train.
#include "cli/train_log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int train_log_open(train_log *log, const char *jsonl_path, int steps) {
    memset(log, 0, sizeof *log);
    log->capacity = steps > 0 ? steps : 1;
    log->history = calloc((size_t)log->capacity, sizeof(train_record));
    if (!log->history) {
        fprintf(stderr, "fsdp-train: out of memory for the training log\n");
        return -1;
    }
    if (jsonl_path && !(log->jsonl = fopen(jsonl_path, "w"))) {
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

void train_log_step(train_log *log, const train_record *r, int total_steps, double elapsed_s, int steps_done) {
    char eta[32];
    double per_step = steps_done > 0 ? elapsed_s / steps_done : r->ms_step / 1e3;
    format_eta(per_step * (total_steps - r->step - 1), eta, sizeof eta);
    printf("step %d loss %.6f", r->step, r->loss);
    if (r->val_loss >= 0) printf(" val %.4f", r->val_loss);
    printf(" | lr %.2e | %.0f tok/s | %.0f ms | comm %.1f%% | mem %.0f MiB | eta %s\n", r->lr, r->tokens_per_s,
           r->ms_step, r->exposed_comm_pct, r->peak_mem_bytes / 1048576.0, eta);
    fflush(stdout);
    if (log->jsonl) {
        char loss[32];  // JSON has no NaN or Inf: a skipped non-finite step records null
        if (isfinite(r->loss)) snprintf(loss, sizeof loss, "%.9g", r->loss);
        else snprintf(loss, sizeof loss, "null");
        fprintf(log->jsonl,
                "{\"step\": %d, \"loss\": %s, \"lr\": %.9g, \"tokens_per_s\": %.3f, \"ms_step\": %.3f, "
                "\"exposed_comm_pct\": %.3f, \"peak_mem_bytes\": %.0f",
                r->step, loss, r->lr, r->tokens_per_s, r->ms_step, r->exposed_comm_pct, r->peak_mem_bytes);
        if (r->val_loss >= 0) fprintf(log->jsonl, ", \"val_loss\": %.9g", r->val_loss);
        fprintf(log->jsonl, "}\n");
        fflush(log->jsonl);
    }
    if (log->count < log->capacity) log->history[log->count++] = *r;
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
        if (r->val_loss >= 0) have_val = 1;
        fprintf(f, "%d %.9g\n", r->step, r->loss);
    }
    fprintf(f, "\n\n");
    for (int i = 0; i < log->count; i++)
        if (log->history[i].val_loss >= 0) fprintf(f, "%d %.9g\n", log->history[i].step, log->history[i].val_loss);
    fclose(f);
    char tmp_png[4096];
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%d", png_path, (int)getpid());
    FILE *gp = popen("gnuplot 2>&1", "w");
    if (!gp) {
        unlink(data);
        fprintf(stderr, "fsdp-train: --plot: cannot run gnuplot (apt-get install gnuplot-nox)\n");
        return -1;
    }
    fprintf(gp, "set terminal pngcairo size 900,500 noenhanced\nset output '%s'\n", tmp_png);
    fprintf(gp, "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset title 'fsdp-train loss'\n");
    fprintf(gp, "plot '%s' index 0 using 1:2 with lines lw 2 title 'train'%s\n", data,
            have_val ? ", '' index 1 using 1:2 with linespoints lw 2 title 'validation'" : "");
    int rc = pclose(gp);
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
