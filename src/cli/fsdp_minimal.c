// fsdp_minimal.c: the seed's "Minimal FSDP Setup" in C:
//   model = FSDP(nn.Sequential(*[nn.TransformerEncoderLayer(d, h, ffn, dropout) for _ in range(L)]))
//   opt = AdamW(model.parameters(), lr); x = randn(seq, batch, d)
//   for step in range(steps): zero_grad; loss = model(x).abs().mean(); loss.backward(); opt.step()
// Runs as a plain process or under any MPI launcher. --batch B is the per-rank micro-batch, as in
// fsdp-train; x holds the global batch G = world x --grad-accum x B (--global-batch G sets it directly):
// rank r takes batch columns [r*G/N, (r+1)*G/N), split into --grad-accum micro-batches. Rank 0 prints
// "step K loss L" with the global mean loss.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "cli/cli_args.h"
#include "cli/cli_threads.h"
#include "cli/fsdp_flags.h"
#include "cli/memory_check.h"
#include "cli/minimal_flags.h"
#include "cli/model_config.h"
#include "cli/output_paths.h"
#include "cli/train_ckpt.h"
#include "cli/train_lineage.h"
#include "cli/train_loop.h"
#include "comm/comm.h"
#include "core/alloc.h"
#include "fsdp/fsdp.h"
#include "kernels/kernels.h"
#include "nn/encoder_stack.h"
#include "nn/loss.h"
#include "core/tunables.h"

// The configuration the files record: nn.TransformerEncoderLayer's arguments (PyTorch names) and the
// layer count, with the flags setting them.
static const cli_config_field encoder_fields[] = {
    {"num_layers", "--layers"}, {"d_model", "--d-model"}, {"nhead", "--heads"}, {"dim_feedforward", "--ffn"},
    {"activation", "--activation"}, {"norm_first", "--norm-first"}, {"batch_first", "--batch-first"}};

static int rank0;  // this process prints the log and the errors

static int fail(const char *msg) {
    fprintf(stderr, "fsdp-minimal: %s\n", msg);
    return 1;
}

// The global x: (seq, global_batch, d), or (global_batch, seq, d) when batch_first.
static fsdp_status load_input(const minimal_options *o, float *x) {
    int64_t shape[3] = {o->batch_first ? o->training.global_batch : o->seq, o->batch_first ? o->seq : o->training.global_batch, o->d_model};
    if (!o->input_path) {
        fsdp_rng rng = {(uint64_t)o->training.seed, fsdp_hash_name("input.x")};
        fsdp_rng_normal(rng, 0, x, (size_t)(shape[0] * shape[1] * shape[2]), 0.0f, 1.0f);
        return FSDP_OK;
    }
    st_file *f = NULL;
    FSDP_CHECK(st_open(o->input_path, &f));
    fsdp_status s = st_read_f32(f, "x", x, 3, shape);
    st_close(f);
    return s;
}

// Copies batch columns [b0, b0 + nb) of the global x into dst, in the same layout with batch nb.
static void take_columns(const minimal_options *o, const float *x, float *dst, int b0, int nb) {
    size_t C = (size_t)o->d_model;
    for (int t = 0; t < o->seq; t++)
        for (int b = 0; b < nb; b++) {
            const float *src = o->batch_first ? x + ((size_t)(b0 + b) * o->seq + t) * C
                                              : x + ((size_t)t * o->training.global_batch + b0 + b) * C;
            float *d = o->batch_first ? dst + ((size_t)b * o->seq + t) * C : dst + ((size_t)t * nb + b) * C;
            memcpy(d, src, C * sizeof(float));
        }
}

// Writes the first micro-batch outputs of every rank as the global y (rank 0 writes). y: local (seq, nb, d)
// on the device, read back here first.
static fsdp_status dump_output(const minimal_options *o, fsdp_comm *world, fsdp_stream *stream, const float *y,
                               int nb) {
    int N = fsdp_comm_size(world);
    size_t local = (size_t)o->seq * nb * o->d_model, C = (size_t)o->d_model;
    float *all = malloc(sizeof(float) * local * (size_t)N), *glob = malloc(sizeof(float) * local * (size_t)N);
    fsdp_status s = all && glob ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    int R = fsdp_comm_rank(world);
    if (s == FSDP_OK) s = fsdp_dev_read(stream, all + (size_t)R * local, y, sizeof(float) * local);
    if (s == FSDP_OK) s = fsdp_all_gather(world, all + (size_t)R * local, all, local, FSDP_F32);
    for (int r = 0; r < N && s == FSDP_OK; r++)  // rank r's block holds global columns [r*nb, (r+1)*nb)
        for (int t = 0; t < o->seq; t++)
            for (int b = 0; b < nb; b++) {
                const float *src = all + (size_t)r * local +
                                   (o->batch_first ? ((size_t)b * o->seq + t) * C : ((size_t)t * nb + b) * C);
                int gb = r * nb + b;
                float *d = o->batch_first ? glob + ((size_t)gb * o->seq + t) * C : glob + ((size_t)t * o->training.global_batch + gb) * C;
                memcpy(d, src, C * sizeof(float));
            }
    if (s == FSDP_OK && fsdp_comm_rank(world) == 0) {
        int64_t shape[3] = {o->batch_first ? o->training.global_batch : o->seq, o->batch_first ? o->seq : o->training.global_batch, o->d_model};
        st_writer *w = st_writer_new(o->dump_output_path);
        s = w ? st_writer_add(w, "y", ST_F32, 3, shape, glob) : FSDP_ERR_NOMEM;
        if (w) s = s == FSDP_OK ? st_writer_commit(w) : (st_writer_free(w), s);
    }
    free(all);
    free(glob);
    return s;
}

// The checks made before anything is built: the flags, the memory the run needs, --ckpt-dir (created,
// locked and its lineage decided; released by main's cli_ckpt_close), the output paths, the batch, and
// the FSDP configuration (*cfg). threads: the thread choice, printed by --summary once the output paths
// are known to be good. Returns 0, or 2 after a one-line error.
static int prepare_run(minimal_options *o, fsdp_comm *world, const fsdp_threads_choice *threads, fsdp_config *cfg) {
    int N = fsdp_comm_size(world), R = fsdp_comm_rank(world);
    if (cli_fsdp_check_flags("fsdp-minimal", &o->fsdp, R)) return 2;
    const cli_model_config *flags = &o->config;
    if (cli_training_optimizer("fsdp-minimal", &o->training, &o->fsdp, flags->args, flags->nargs, flags->argc,
                               flags->argv, R, &o->training.optimizer_config))
        return 2;
    if (cli_memory_check_minimal(o, threads->threads, world)) return 2;  // before anything is built or written
    if (cli_ckpt_open("fsdp-minimal", &o->fsdp.ckpt, 1, world)) return 2;
    const cli_output_path outputs[] = {
        {"--ckpt-dir", o->fsdp.ckpt.dir, CLI_OUT_DIR_CREATE}, {"--offload-dir", o->fsdp.offload_dir, CLI_OUT_DIR_EVERY_RANK},
        {"--save", o->training.save_path, CLI_OUT_FILE}, {"--dump-grads", o->training.dump_grads_path, CLI_OUT_FILE},
        {"--dump-output", o->dump_output_path, CLI_OUT_FILE}};
    if (cli_check_output_paths("fsdp-minimal", outputs, (int)(sizeof outputs / sizeof *outputs), world)) return 2;
    char line[160];
    if (o->fsdp.summary && R == 0) printf("%s\n", fsdp_threads_describe(threads, line, sizeof line));
    const cli_model_config *c = &o->config;
    if (cli_training_resolve_batch("fsdp-minimal", &o->training, &o->fsdp, c->args, c->nargs, c->argc, c->argv, N,
                                   R == 0))
        return 2;
    if (cli_fsdp_config("fsdp-minimal", &o->fsdp, cfg)) return 2;
    if (o->dump_output_path && o->training.grad_accum != 1) {
        fprintf(stderr, "fsdp-minimal: --dump-output needs --grad-accum 1\n");
        return 2;
    }
    return 0;
}

// nn.TransformerEncoderLayer's arguments from the flags.
static nn_block_config layer_config(const minimal_options *o) {
    nn_block_config layer = nn_encoder_layer_defaults(o->d_model, o->heads);
    layer.d_ff = o->ffn;
    layer.dropout = layer.attn_dropout = o->dropout;
    layer.activation = o->activation ? FSDP_ACT_GELU : FSDP_ACT_RELU;
    layer.norm_first = o->norm_first;
    layer.batch_first = o->batch_first;
    layer.causal = o->causal;
    return layer;
}

// A run's model, state and device buffers: the context of the step loop's hooks (train_loop.h).
typedef struct {
    minimal_options *o;
    fsdp_comm *world;
    fsdp_state *fs;
    nn_encoder_stack *model;
    fsdp_stream *stream;  // the device's compute stream
    int micro;            // sequences per micro-batch (--batch)
    size_t micro_n;       // floats per micro-batch: seq x micro x d_model
    float *xm_dev;        // (grad_accum, micro_n) device: this rank's micro-batches, in x's layout
    float *dy;            // (micro_n,) device: dL/dy of the current micro-step
    double *loss_dev;     // (1,) device: the current micro-step's loss
} minimal_run;

// Allocates r's device buffers and puts this rank's micro-batches of the global x on the device: rank R
// takes batch columns [R * G / N, (R + 1) * G / N), micro-step m the m-th --batch of them.
static fsdp_status upload_micro_batches(minimal_run *r) {
    const minimal_options *o = r->o;
    int M = o->training.grad_accum, R = fsdp_comm_rank(r->world), local_batch = o->training.global_batch / fsdp_comm_size(r->world);
    fsdp_dev *dev = fsdp_state_device(r->fs);
    size_t global_n = (size_t)o->seq * o->training.global_batch * (size_t)o->d_model;
    float *x = malloc(sizeof(float) * global_n);                    // (global_n,) the global x
    float *xm = malloc(sizeof(float) * r->micro_n * (size_t)M);     // (M, micro_n) this rank's micro-batches
    r->xm_dev = fsdp_dev_alloc(dev, sizeof(float) * r->micro_n * (size_t)M, FSDP_MEM_ACTIVATIONS);
    r->dy = fsdp_dev_alloc(dev, sizeof(float) * r->micro_n, FSDP_MEM_ACTIVATIONS);
    r->loss_dev = fsdp_dev_alloc(dev, sizeof(double), FSDP_MEM_OTHER);
    fsdp_status s = x && xm && r->xm_dev && r->dy && r->loss_dev ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (s == FSDP_OK) s = load_input(o, x);
    for (int m = 0; m < M && s == FSDP_OK; m++)
        take_columns(o, x, xm + (size_t)m * r->micro_n, R * local_batch + m * r->micro, r->micro);
    if (s == FSDP_OK) s = fsdp_copy_h2d(r->stream, r->xm_dev, xm, sizeof(float) * r->micro_n * (size_t)M);
    if (s == FSDP_OK) s = fsdp_stream_synchronize(r->stream);
    free(x);
    free(xm);
    return s;
}

// The step loop's micro-step (train_loop.h): loss = mean(|model(x_m)|), its backward, and the first
// micro-step's output for --dump-output.
static fsdp_status micro_step(void *tool, int step, int m, uint64_t micro_id, int sync, float grad_scale,
                              double *loss) {
    minimal_run *r = tool;
    nn_ctx ctx = fsdp_model_ctx(r->fs, 1, (uint64_t)r->o->training.seed, micro_id);
    const float *xin = r->xm_dev + (size_t)m * r->micro_n, *y = NULL;  // (seq, micro, d_model) device
    FSDP_CHECK(fsdp_begin_forward(r->fs, sync));
    FSDP_CHECK(nn_sequential_forward(&ctx, &r->model->seq, xin, r->micro, r->o->seq, &y));
    nn_abs_mean_forward(&ctx, r->loss_dev, y, r->micro_n);
    FSDP_CHECK(fsdp_dev_read(r->stream, loss, r->loss_dev, sizeof *loss));  // the log's
    if (step == 0 && m == 0 && r->o->dump_output_path) FSDP_CHECK(dump_output(r->o, r->world, r->stream, y, r->micro));
    nn_abs_mean_backward(&ctx, r->dy, y, r->micro_n, grad_scale);
    FSDP_CHECK(nn_sequential_backward(&ctx, &r->model->seq, r->dy, xin, NULL));
    return fsdp_end_backward(r->fs);
}

// The step loop's log: rank 0 prints "step K loss L" (and the norm with --clip-grad-norm, every bit of
// both under --deterministic, for runs on other world sizes to compare exactly).
static fsdp_status log_step(void *tool, const train_loop_step *s) {
    const minimal_run *r = tool;
    if (fsdp_comm_rank(r->world) != 0) return FSDP_OK;
    if (r->o->fsdp.deterministic) printf("step %d loss %.17g grad_norm %.17g\n", s->step, s->loss, s->norm);
    else if (r->o->training.clip > 0.0f) printf("step %d loss %.9g grad_norm %.9g\n", s->step, s->loss, s->norm);
    else printf("step %d loss %.9g\n", s->step, s->loss);
    fflush(stdout);
    return FSDP_OK;
}

// After the last step: the mean time per step and, with --summary, this rank's memory by category
// (bytes) and the bytes sent (rank 0 prints).
static void print_totals(const minimal_run *r, int start_step, const train_loop_result *t) {
    const minimal_options *o = r->o;
    int R = fsdp_comm_rank(r->world), steps = o->training.steps;
    if (steps - start_step > 1 && R == 0)
        printf("mean (steps %d..%d): %.2f ms/step, %.0f tok/s, exposed comm %.1f%%, peak memory %.1f MiB\n",
               start_step + 1, steps - 1, t->seconds * 1e3 / (steps - 1 - start_step),
               (double)o->seq * o->training.global_batch * (steps - 1 - start_step) / t->seconds,
               100.0 * t->exposed_comm_seconds / t->seconds, (double)fsdp_mem_peak_total() / 1048576.0);
    double shard_sent = 0.0, replica_sent = 0.0, run_steps = steps - start_step > 0 ? steps - start_step : 1;
    fsdp_comm_bytes_by_group(r->fs, &shard_sent, &replica_sent);
    if (o->fsdp.summary && R == 0)
        printf("memory rank 0: parameters %zu gradients %zu optimizer %zu unsharded_peak %zu activations_peak %zu "
               "bytes_sent_per_step %.0f shard_group_bytes_per_step %.0f replica_group_bytes_per_step %.0f\n",
               fsdp_mem_current(FSDP_MEM_PARAMS), fsdp_mem_current(FSDP_MEM_GRADS), fsdp_mem_current(FSDP_MEM_OPTIM),
               fsdp_mem_peak(FSDP_MEM_UNSHARDED), fsdp_mem_peak(FSDP_MEM_ACTIVATIONS),
               fsdp_comm_bytes_sent(r->fs) / run_steps, shard_sent / run_steps, replica_sent / run_steps);
    cli_training_muon_summary(r->fs, o->fsdp.summary, R, run_steps);
}

// Trains from the checkpoint --resume names (or from the start), then prints the totals and writes
// --save. Returns the tool's exit status.
static int train_and_save(minimal_run *r) {
    minimal_options *o = r->o;
    int R = fsdp_comm_rank(r->world);
    if (fsdp_optimizer_create(r->fs, o->training.optimizer_config) != FSDP_OK) return fail(fsdp_last_error());
    cli_ckpt_catch_signals();
    int start_step = 0;
    if (cli_ckpt_resume(r->fs, &o->fsdp.ckpt, o->training.global_batch, R, &start_step) != FSDP_OK)
        return fail(fsdp_last_error());
    if (cli_ckpt_check_steps("fsdp-minimal", o->training.steps, start_step, R)) return 2;
    train_loop loop = {
        .prog = "fsdp-minimal", .fs = r->fs, .world = r->world, .start_step = start_step, .steps = o->training.steps,
        .grad_accum = o->training.grad_accum, .no_sync = o->training.no_sync, .clip = o->training.clip,
        .deterministic = o->fsdp.deterministic, .det_rank_major = 1,  // micro-step m: chunk R x grad_accum + m
        .dump_grads_path = o->training.dump_grads_path, .ckpt = &o->fsdp.ckpt, .seed = o->training.seed,
        .global_batch = o->training.global_batch,
        .stop_detail = o->fsdp.ckpt.dir ? "saving a checkpoint (--resume auto continues)" : "",
        .tool = r, .micro_step = micro_step, .lr = o->training.lr, .log_step = log_step};
    train_loop_result done;
    if (train_loop_run(&loop, &done) != FSDP_OK) return fail(fsdp_last_error());
    if (done.rc) return done.rc;
    print_totals(r, start_step, &done);
    if (o->training.save_path && cli_save_weights("fsdp-minimal", r->fs, o->training.save_path, R) != FSDP_OK)
        return fail(fsdp_last_error());
    return 0;
}

static int run(minimal_options *o, fsdp_comm *world, const fsdp_threads_choice *threads) {
    fsdp_config cfg;
    int rc = prepare_run(o, world, threads, &cfg), R = fsdp_comm_rank(world);
    if (rc) return rc;
    // Everything below is released at `done`, on every return path (the error paths included).
    nn_encoder_stack model;
    minimal_run r = {o, world, NULL, &model, NULL, o->training.batch,
                     (size_t)o->seq * (size_t)o->training.batch * (size_t)o->d_model, NULL, NULL, NULL};
    if (nn_encoder_stack_create(&model, layer_config(o), o->layers) != FSDP_OK) goto failed;
    // room for what the saves will write, before the model is built and trained
    if (cli_check_save_space("fsdp-minimal", &model.params, &o->fsdp.ckpt, o->training.save_path, o->training.steps,
                             world)) {
        rc = 2;
        goto done;
    }
    fsdp_model_desc desc = {&model.params, &model.seq, "TransformerEncoderLayer", "%d.", 0};
    if ((rc = cli_fsdp_build("fsdp-minimal", &o->fsdp, desc, cfg, world, (uint64_t)o->training.seed,
                             o->training.init_path, NULL, &r.fs)))
        goto done;
    if (cli_config_to_state(&o->config, r.fs)) {
        rc = 1;
        goto done;
    }
    if (o->fsdp.summary && R == 0) cli_config_print(&o->config, stdout);  // the resolved flags
    if (o->fsdp.summary && R == 0) fsdp_print_summary(r.fs, stdout);
    r.stream = fsdp_dev_stream(fsdp_state_device(r.fs), FSDP_STREAM_COMPUTE);
    if (upload_micro_batches(&r) != FSDP_OK) goto failed;
    rc = train_and_save(&r);
    goto done;
failed:
    rc = fail(fsdp_last_error());
done:
    if (r.fs) {
        fsdp_dev_free(fsdp_state_device(r.fs), r.xm_dev);
        fsdp_dev_free(fsdp_state_device(r.fs), r.dy);
        fsdp_dev_free(fsdp_state_device(r.fs), r.loss_dev);
    }
    fsdp_free_state(r.fs);
    nn_encoder_stack_free(&model);
    return rc;
}

int main(int argc, char **argv) {
    minimal_options o;
    cli_arg args[MINIMAL_FLAGS_MAX];
    int nargs = minimal_flags(&o, args);
    if (cli_config_argv("fsdp-minimal", args, nargs, &argc, &argv)) return 2;  // --config FILE, then the command line
    int parsed = cli_parse("fsdp-minimal", MINIMAL_SUMMARY, args, nargs, argc, argv);
    if (parsed) return parsed > 0 ? 0 : 2;
    o.config = (cli_model_config){"fsdp-minimal", "transformer_encoder", encoder_fields,
                                  (int)(sizeof encoder_fields / sizeof *encoder_fields), args, nargs, argc, argv};
    if (cli_config_from_inputs(&o.config, o.training.init_path, &o.fsdp.ckpt)) return 2;
    if (o.d_model % o.heads) {
        fprintf(stderr, "fsdp-minimal: --heads %d must divide --d-model %d\n", o.heads, o.d_model);
        return 2;
    }
    if (cli_threads_check_env("fsdp-minimal", o.training.threads)) return 2;
    cli_threads_before_mpi(argv, o.training.threads);
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return fail(fsdp_last_error());
    rank0 = fsdp_comm_rank(world) == 0;
    fsdp_threads_choice threads;
    if (cli_threads_setup("fsdp-minimal", world, o.training.threads, &threads) != FSDP_OK) return fail(fsdp_last_error());
    if (rank0) fsdp_tunables_warn_unknown("fsdp-minimal");  // a misspelt FSDP_* variable
    int rc = run(&o, world, &threads);
    cli_ckpt_close(&o.fsdp.ckpt);
    fsdp_comm_free(world);
    return rc;
}
