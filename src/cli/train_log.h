// train_log.h: what fsdp-train shows and records: the progress line, --log-jsonl and --plot.
#pragma once
#include <stdio.h>

typedef struct {
    int step;
    double loss;
    double lr;
    double tokens_per_s;
    double ms_step;
    double exposed_comm_pct;
    double peak_mem_bytes;
    double val_loss;  // < 0 when not evaluated this step (a NaN one was evaluated: shown as nan, null in JSON)
    double grad_norm; // the global L2 norm of the gradients before clipping (every step)
} train_record;

typedef struct {
    FILE *jsonl;           // NULL when --log-jsonl is off
    train_record *history; // (capacity,) every step, for --plot
    int count, capacity;
} train_log;

// Opens --log-jsonl when path is non-NULL: a fresh run starts the file anew, a resumed run (append = 1)
// appends to it, so the records of the run it continues stay. Returns 0, or -1 with a message on stderr.
int train_log_open(train_log *log, const char *jsonl_path, int steps, int append);
// Prints the progress line (with ETA from the mean step time so far) and appends to the JSONL file.
void train_log_step(train_log *log, const train_record *r, int total_steps, double elapsed_s, int steps_done);
// Draws loss (and val loss) against step into a PNG with gnuplot; returns 0, or -1 with a message.
int train_log_plot(const train_log *log, const char *png_path);
void train_log_close(train_log *log);
