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
#include "comm/comm.h"
#include "core/alloc.h"
#include "core/timer.h"
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

// threads: the thread choice, printed by --summary once the output paths are known to be good.
static int run(minimal_options *o, fsdp_comm *world, const fsdp_threads_choice *threads) {
    int N = fsdp_comm_size(world), R = fsdp_comm_rank(world);
    if (cli_fsdp_check_flags("fsdp-minimal", &o->fsdp, R)) return 2;
    if (cli_memory_check_minimal(o, threads->threads, world)) return 2;  // before anything is built or written
    // --ckpt-dir: created, locked and its lineage decided (released by main's cli_ckpt_close)
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
    int micro = o->training.batch, local_batch = o->training.global_batch / N;  // per micro-step and per step, on this rank
    fsdp_config cfg;
    if (cli_fsdp_config("fsdp-minimal", &o->fsdp, &cfg)) return 2;
    if (o->dump_output_path && o->training.grad_accum != 1) {
        fprintf(stderr, "fsdp-minimal: --dump-output needs --grad-accum 1\n");
        return 2;
    }
    nn_block_config layer = nn_encoder_layer_defaults(o->d_model, o->heads);
    layer.d_ff = o->ffn;
    layer.dropout = layer.attn_dropout = o->dropout;
    layer.activation = o->activation ? FSDP_ACT_GELU : FSDP_ACT_RELU;
    layer.norm_first = o->norm_first;
    layer.batch_first = o->batch_first;
    layer.causal = o->causal;
    // Everything below is released at `done`, on every return path (the error paths included).
    int rc = 0;
    nn_encoder_stack model;
    fsdp_state *fs = NULL;
    // host: inputs [seq, batch, d_model] and this rank's micro-batches; device: the micro-batches, dL/dy and
    // the loss (1,) of the last micro-step
    float *x = NULL, *xm = NULL, *xm_dev = NULL, *dy = NULL;
    double *loss_dev = NULL;
    double *micro_losses = NULL;  // (grad_accum,) this rank's micro-steps' mean losses
    if (nn_encoder_stack_create(&model, layer, o->layers) != FSDP_OK) goto failed;
    // room for what the saves will write, before the model is built and trained
    if (cli_check_save_space("fsdp-minimal", &model.params, &o->fsdp.ckpt, o->training.save_path, o->training.steps, world)) {
        rc = 2;
        goto done;
    }
    fsdp_model_desc desc = {&model.params, &model.seq, "TransformerEncoderLayer", "%d."};
    if ((rc = cli_fsdp_build("fsdp-minimal", &o->fsdp, desc, cfg, world, (uint64_t)o->training.seed, o->training.init_path, NULL, &fs)))
        goto done;
    if (cli_config_to_state(&o->config, fs)) {
        rc = 1;
        goto done;
    }
    if (o->fsdp.summary && R == 0) cli_config_print(&o->config, stdout);  // the resolved flags
    if (o->fsdp.summary && R == 0) fsdp_print_summary(fs, stdout);

    fsdp_dev *dev = fsdp_state_device(fs);
    fsdp_stream *stream = fsdp_dev_stream(dev, FSDP_STREAM_COMPUTE);
    size_t C = (size_t)o->d_model, global_n = (size_t)o->seq * o->training.global_batch * C, micro_n = (size_t)o->seq * micro * C;
    x = malloc(sizeof(float) * global_n);
    xm = malloc(sizeof(float) * micro_n * (size_t)o->training.grad_accum);
    xm_dev = fsdp_dev_alloc(dev, sizeof(float) * micro_n * (size_t)o->training.grad_accum, FSDP_MEM_ACTIVATIONS);
    dy = fsdp_dev_alloc(dev, sizeof(float) * micro_n, FSDP_MEM_ACTIVATIONS);
    loss_dev = fsdp_dev_alloc(dev, sizeof(double), FSDP_MEM_OTHER);
    micro_losses = malloc(sizeof(double) * (size_t)o->training.grad_accum);
    if (!x || !xm || !xm_dev || !dy || !loss_dev || !micro_losses) {
        rc = fail("out of memory");
        goto done;
    }
    if (load_input(o, x) != FSDP_OK) goto failed;
    for (int m = 0; m < o->training.grad_accum; m++) take_columns(o, x, xm + (size_t)m * micro_n, R * local_batch + m * micro, micro);
    if (fsdp_copy_h2d(stream, xm_dev, xm, sizeof(float) * micro_n * (size_t)o->training.grad_accum) != FSDP_OK ||
        fsdp_stream_synchronize(stream) != FSDP_OK)
        goto failed;
    free(x);
    free(xm);
    x = xm = NULL;
    fsdp_adamw_config ac = fsdp_adamw_defaults();
    ac.lr = o->training.lr;
    ac.weight_decay = o->training.weight_decay;
    if (fsdp_optimizer_create(fs, ac) != FSDP_OK) goto failed;

    cli_ckpt_catch_signals();
    int start_step = 0;
    if (cli_ckpt_resume(fs, &o->fsdp.ckpt, o->training.global_batch, R, &start_step) != FSDP_OK) goto failed;
    if (cli_ckpt_check_steps("fsdp-minimal", o->training.steps, start_step, R)) {
        rc = 2;
        goto done;
    }
    double total_time = 0.0, total_comm = 0.0;
    for (int step = start_step; step < o->training.steps; step++) {
        double t0 = fsdp_now_sec(), c0 = fsdp_exposed_comm_seconds(fs);
        fsdp_zero_grad(fs);
        double loss = 0.0;
        // --deterministic: micro-step m is chunk R x grad_accum + m of the step (the columns it takes), its
        // loss gradient that of its own mean (the engine divides the exact sum by det_chunks), its dropout
        // keyed on the chunk
        int det = o->fsdp.deterministic;
        for (int m = 0; m < o->training.grad_accum; m++) {
            uint64_t micro_id = (uint64_t)step * (uint64_t)o->training.grad_accum + (uint64_t)m;
            if (det) micro_id = ((uint64_t)step * (uint64_t)N + (uint64_t)R) * (uint64_t)o->training.grad_accum + (uint64_t)m;
            nn_ctx ctx = fsdp_model_ctx(fs, 1, (uint64_t)o->training.seed, micro_id);
            int sync = !o->training.no_sync || m == o->training.grad_accum - 1;
            const float *xin = xm_dev + (size_t)m * micro_n, *y = NULL;
            if (fsdp_begin_forward(fs, sync) != FSDP_OK ||
                nn_sequential_forward(&ctx, &model.seq, xin, micro, o->seq, &y) != FSDP_OK)
                goto failed;
            nn_abs_mean_forward(&ctx, loss_dev, y, micro_n);
            double micro_loss = 0.0;
            if (fsdp_dev_read(stream, &micro_loss, loss_dev, sizeof micro_loss) != FSDP_OK) goto failed;  // the log's
            loss += micro_loss / o->training.grad_accum;
            micro_losses[m] = micro_loss;
            if (step == 0 && m == 0 && o->dump_output_path && dump_output(o, world, stream, y, micro) != FSDP_OK)
                goto failed;
            nn_abs_mean_backward(&ctx, dy, y, micro_n, det ? 1.0f : 1.0f / (float)o->training.grad_accum);
            if (nn_sequential_backward(&ctx, &model.seq, dy, xin, NULL) != FSDP_OK || fsdp_end_backward(fs) != FSDP_OK)
                goto failed;
        }
        if (det) {  // the chunks' losses summed in chunk order
            if (fsdp_det_mean(world, micro_losses, o->training.grad_accum, 1, &loss) != FSDP_OK) goto failed;
        } else {
            if (fsdp_all_reduce_double(world, &loss) != FSDP_OK) goto failed;
            loss /= N;
        }
        double norm = 0.0;
        if (o->training.clip > 0.0f || det) {  // clip_grad_norm_ over the true global norm of the sharded gradients
            if (fsdp_grad_norm(fs, &norm) != FSDP_OK) goto failed;
            if (o->training.clip > 0.0f) fsdp_scale_grads(fs, fsdp_clip_coefficient(norm, o->training.clip));
        }
        // the gradients the optimizer sees (after clipping), for the parity tests
        if (step == 0 && o->training.dump_grads_path && fsdp_save_full(fs, o->training.dump_grads_path, 1) != FSDP_OK)
            goto failed;
        fsdp_optimizer_step(fs, o->training.lr);
        if (step > start_step) {
            total_time += fsdp_now_sec() - t0;
            total_comm += fsdp_exposed_comm_seconds(fs) - c0;
        }
        if (R == 0) {
            if (det)  // every bit: runs on other world sizes compare these exactly
                printf("step %d loss %.17g grad_norm %.17g\n", step, loss, norm);
            else if (o->training.clip > 0.0f) printf("step %d loss %.9g grad_norm %.9g\n", step, loss, norm);
            else printf("step %d loss %.9g\n", step, loss);
            fflush(stdout);
        }
        int stop = 0;  // SIGINT/SIGTERM: every rank stops after this step, saves, exits 130
        if (cli_ckpt_stop_requested(world, &stop) != FSDP_OK) goto failed;
        if (stop && R == 0)  // said before the save: mpirun may stop forwarding output once the ranks exit
            cli_ckpt_say_interrupted("fsdp-minimal", step,
                                     o->fsdp.ckpt.dir ? "saving a checkpoint (--resume auto continues)" : "");
        if (cli_ckpt_due(&o->fsdp.ckpt, step + 1, o->training.steps, stop) &&
            cli_ckpt_save(fs, &o->fsdp.ckpt, step + 1, o->training.seed, o->training.global_batch, R) != FSDP_OK)
            goto failed;
        if (stop) {
            rc = 130;
            goto done;
        }
    }
    if (o->training.steps - start_step > 1 && R == 0)
        printf("mean (steps %d..%d): %.2f ms/step, %.0f tok/s, exposed comm %.1f%%, peak memory %.1f MiB\n",
               start_step + 1, o->training.steps - 1, total_time * 1e3 / (o->training.steps - 1 - start_step),
               (double)o->seq * o->training.global_batch * (o->training.steps - 1 - start_step) / total_time,
               100.0 * total_comm / total_time, (double)fsdp_mem_peak_total() / 1048576.0);
    double shard_sent = 0.0, replica_sent = 0.0, run_steps = o->training.steps - start_step > 0 ? o->training.steps - start_step : 1;
    fsdp_comm_bytes_by_group(fs, &shard_sent, &replica_sent);
    if (o->fsdp.summary && R == 0)  // this rank's memory after training, by category (bytes), and bytes sent
        printf("memory rank 0: parameters %zu gradients %zu optimizer %zu unsharded_peak %zu activations_peak %zu "
               "bytes_sent_per_step %.0f shard_group_bytes_per_step %.0f replica_group_bytes_per_step %.0f\n",
               fsdp_mem_current(FSDP_MEM_PARAMS), fsdp_mem_current(FSDP_MEM_GRADS), fsdp_mem_current(FSDP_MEM_OPTIM),
               fsdp_mem_peak(FSDP_MEM_UNSHARDED), fsdp_mem_peak(FSDP_MEM_ACTIVATIONS),
               fsdp_comm_bytes_sent(fs) / run_steps, shard_sent / run_steps, replica_sent / run_steps);
    if (o->training.save_path && cli_save_weights("fsdp-minimal", fs, o->training.save_path, R) != FSDP_OK) goto failed;
    goto done;
failed:
    rc = fail(fsdp_last_error());
done:
    if (fs) {
        fsdp_dev_free(fsdp_state_device(fs), xm_dev);
        fsdp_dev_free(fsdp_state_device(fs), dy);
        fsdp_dev_free(fsdp_state_device(fs), loss_dev);
    }
    fsdp_free_state(fs);
    nn_encoder_stack_free(&model);
    free(x);
    free(xm);
    free(micro_losses);
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
