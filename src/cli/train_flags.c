// train_flags.c: fsdp-train's defaults and flags (train_flags.h).
#include "cli/train_flags.h"

#include <string.h>


int train_flags(train_options *o, cli_arg *args) {
    memset(o, 0, sizeof *o);
    o->layers = 4, o->d_model = 256, o->heads = 4, o->vocab = 256, o->seq = 128, o->max_seq = 0;
    o->rope_theta = 10000.0f, o->rms_eps = 1e-6f;  // LlamaConfig's defaults
    o->training.batch = 8, o->training.grad_accum = 1, o->training.steps = 300, o->warmup = 20;
    o->training.lr = 1e-3f, o->min_lr = 1e-4f, o->training.weight_decay = 0.01f, o->dropout = 0.0f;
    o->training.clip = 1.0f;
    o->eval_batches = 4, o->collective_timeout = 300;
    o->save_shard_size = "5GB";  // save_pretrained's default max_shard_size
    o->gen = (train_sample_options){NULL, 1.0f, 0, 0, NULL};
    o->lora = (train_lora_options){0, 8.0f, 0.0f, "c_attn", NULL, 0};  // PEFT LoraConfig's defaults for GPT-2
    cli_fsdp_defaults(&o->fsdp);
    cli_arg common[CLI_TRAINING_NFLAGS];  // the flags shared with fsdp-minimal, placed below in this tool's order
    cli_training_flags(&o->training, common);
    const cli_arg own[] = {
        {"--arch", ARG_CHOICE, &o->arch, "the architecture (Hugging Face model_type): GPT-2, or the Llama family (LlamaForCausalLM; Mistral and Qwen2 directories load as it); default: the one --init or --resume records, else gpt2", 1, 0, "gpt2|llama"},
        {"--layers", ARG_INT, &o->layers, "transformer blocks", 1, 1e5, NULL},
        {"--d-model", ARG_INT, &o->d_model, "model width", 1, 1e6, NULL},
        {"--heads", ARG_INT, &o->heads, "attention heads (must divide d_model)", 1, 1e5, NULL},
        {"--vocab", ARG_INT, &o->vocab, "vocabulary size (>= the data's largest token + 1; 256 for bytes)", 2, 1e7, NULL},
        {"--kv-heads", ARG_INT, &o->kv_heads, "Llama: key/value heads of grouped-query attention, dividing --heads (0: --heads)", 0, 1e5, NULL},
        {"--head-dim", ARG_INT, &o->head_dim, "Llama: width of each head (0: d_model / heads)", 0, 1e5, NULL},
        {"--d-ff", ARG_INT, &o->d_ff, "the MLP's inner width (0: 4 x d_model for GPT-2; for Llama 8/3 x d_model rounded up to a multiple of 256, Meta's rule)", 0, 1e7, NULL},
        {"--rope-theta", ARG_FLOAT, &o->rope_theta, "Llama: the rotary embedding's base", 1, 1e12, NULL},
        {"--rope-scaling", ARG_STRING, &o->rope_scaling, "Llama: rope_scaling of type llama3 (Llama 3.1+) as llama3:FACTOR,LOW_FREQ_FACTOR,HIGH_FREQ_FACTOR,ORIGINAL_MAX_POSITIONS, e.g. llama3:32,1,4,8192 (default: none)", 1, 0, NULL},
        {"--rms-eps", ARG_FLOAT, &o->rms_eps, "Llama: RMSNorm's epsilon (rms_norm_eps)", 0, 1, NULL},
        {"--tie-embeddings", ARG_BOOL, &o->tie_embeddings, "Llama: the LM head is the token embedding (tie_word_embeddings)", 1, 0, NULL},
        {"--attention-bias", ARG_BOOL, &o->attention_bias, "Llama: biases on q_proj, k_proj, v_proj and o_proj (attention_bias)", 1, 0, NULL},
        {"--qkv-bias", ARG_BOOL, &o->qkv_bias, "Llama: biases on q_proj, k_proj and v_proj only (Qwen2's)", 1, 0, NULL},
        {"--mlp-bias", ARG_BOOL, &o->mlp_bias, "Llama: biases on gate_proj, up_proj and down_proj (mlp_bias)", 1, 0, NULL},
        {"--seq", ARG_INT, &o->seq, "sequence length", 1, 1e6, NULL},
        {"--max-seq", ARG_INT, &o->max_seq, "position table size (0: --seq)", 0, 1e6, NULL},
        cli_training_flag(common, "--batch"),
        cli_training_flag(common, "--global-batch"),
        cli_training_flag(common, "--grad-accum"),
        cli_training_flag(common, "--no-sync"),
        cli_training_flag(common, "--steps"),
        cli_training_flag(common, "--lr"),
        {"--lr-schedule", ARG_CHOICE, &o->schedule, "after --warmup: cosine decay to --min-lr, or constant", 1, 0, "cosine|constant"},
        {"--min-lr", ARG_FLOAT, &o->min_lr, "final learning rate of the cosine schedule", 0, 1e3, NULL},
        {"--warmup", ARG_INT, &o->warmup, "linear warmup steps", 0, 1e9, NULL},
        cli_training_flag(common, "--weight-decay"),
        {"--dropout", ARG_FLOAT, &o->dropout, "embedding/residual/attention dropout", 0, 0.999, NULL},
        cli_training_flag(common, "--clip-grad-norm"),
        cli_training_flag(common, "--seed"),
        {"--data", ARG_STRING, &o->data_path, "training data: byte-level text, or llm.c .bin tokens (default: built-in corpus)", 1, 0, NULL},
        {"--tokenizer", ARG_STRING, &o->tokenizer_dir, "a Hugging Face tokenizer: a tokenizer.json file, or a directory with tokenizer.json (Llama 3, Qwen2, SmolLM, Llama 2, Mistral, GPT-2: BPE, byte-level or SentencePiece-style) or GPT-2's vocab.json and merges.txt; text --data/--val-data are encoded with it, without special tokens (cached as FILE.<hash>.bin beside them: uint32 tokens above 65,536 ids), --prompt is encoded and the sample decoded through it; --vocab defaults to its size (added tokens included)", 1, 0, NULL},
        {"--val-data", ARG_STRING, &o->val_path, "validation data for --eval-every (an error without it); without --val-data, --eval-every holds out the last 10% of --data", 1, 0, NULL},
        {"--eval-every", ARG_INT, &o->eval_every, "evaluate every N steps and after the last; logged as val (0: never)", 0, 1e9, NULL},
        {"--eval-batches", ARG_INT, &o->eval_batches, "validation micro-batches per evaluation (0: none, with --eval-only)", 0, 1e6, NULL},
        {"--eval-only", ARG_BOOL, &o->eval_only, "evaluate (and generate with --max-new-tokens) the weights of --init or --resume, then exit without training; training flags are errors with it", 1, 0, NULL},
        {"--max-new-tokens", ARG_INT, &o->gen.max_new_tokens, "generate N tokens (bytes of a byte-level model, or --tokenizer's tokens) at the end", 0, 1e6, NULL},
        {"--sample", ARG_INT, &o->gen.max_new_tokens, "alias of --max-new-tokens", 0, 1e6, NULL},
        {"--prompt", ARG_STRING, &o->gen.prompt, "text whose bytes (or, with --tokenizer, tokens) start the generated context (default: a newline)", 1, 0, NULL},
        {"--temperature", ARG_FLOAT, &o->gen.temperature, "sampling temperature (0: greedy argmax)", 0, 1e3, NULL},
        {"--top-k", ARG_INT, &o->gen.top_k, "sample only among the K most likely tokens (0: all)", 0, 1e7, NULL},
        {"--input", ARG_STRING, &o->input_path, "one fixed global batch: safetensors with idx and targets [world*batch, seq]", 1, 0, NULL},
        cli_training_flag(common, "--init"),
        cli_training_flag(common, "--save"),
        {"--save-dtype", ARG_CHOICE, &o->save_dtype, "the dtype of a Hugging Face directory --save's weights (bf16: rounded to nearest even)", 1, 0, "fp32|bf16"},
        {"--save-shard-size", ARG_STRING, &o->save_shard_size, "a Hugging Face directory --save splits its weights into shards of at most this size (one larger tensor has its own) plus model.safetensors.index.json, as save_pretrained's max_shard_size: bytes, or with KB/MB/GB (powers of 1000) or KiB/MiB/GiB", 1, 0, NULL},
        cli_training_flag(common, "--dump-grads"),
        {"--log-jsonl", ARG_STRING, &o->jsonl_path, "write one JSON object per step here (the first record is the resolved configuration; a resumed run appends)", 1, 0, NULL},
        {"--plot", ARG_STRING, &o->plot_path, "draw the loss curve into this PNG at the end (gnuplot)", 1, 0, NULL},
        {"--trace", ARG_STRING, &o->trace_path, "write a Chrome trace (compute and communication spans, one track per rank) here", 1, 0, NULL},
        {"--collective-timeout", ARG_INT, &o->collective_timeout, "abort when a collective blocks this many seconds (0: never)", 0, 1e7, NULL},
        {"--skip-nonfinite", ARG_BOOL, &o->skip_nonfinite, "skip the update of a step whose loss or gradients hold NaN or Inf (default: stop)", 1, 0, NULL},
        cli_training_flag(common, "--threads"),
        {"--lora-rank", ARG_INT, &o->lora.rank, "LoRA (Hugging Face PEFT): add rank-R adapters A (R x in) and B (out x R) to each --lora-targets projection, y = W x + (alpha / R) B A x, and freeze every base parameter; --save then writes the adapters alone (PEFT names) unless --lora-merge-on-save (default: no adapters)", 1, 65536, NULL},
        {"--lora-alpha", ARG_FLOAT, &o->lora.alpha, "LoRA scale numerator: the adapters' output is scaled by alpha / --lora-rank", 0, 1e6, NULL},
        {"--lora-dropout", ARG_FLOAT, &o->lora.dropout, "LoRA: dropout on the adapters' input (training only)", 0, 0.999, NULL},
        {"--lora-targets", ARG_STRING, &o->lora.targets, "LoRA: the projections that get adapters, comma-separated: GPT-2's c_attn, c_proj (both attn.c_proj and mlp.c_proj), c_fc, attn.c_proj, mlp.c_proj (default c_attn); Llama's q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (default q_proj,v_proj: PEFT's)", 1, 0, NULL},
        {"--lora-init", ARG_STRING, &o->lora.init, "LoRA: start from these adapters (a file, or a PEFT adapter directory holding it, in PEFT's adapter_model.safetensors layout: base_model.model.transformer.h.N.<target>.lora_A.weight [R, in] and lora_B.weight [out, R] for GPT-2, base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight ... for Llama) instead of PEFT's init (A Kaiming-uniform, B zero)", 1, 0, NULL},
        {"--lora-merge-on-save", ARG_BOOL, &o->lora.merge_on_save, "LoRA: --save writes the base weights with the adapters merged in (W + alpha / R x (B A)^T for the Conv1D layout: a plain GPT-2 file) instead of the adapters alone", 1, 0, NULL},
        cli_training_flag(common, "--no-memory-check"),
        cli_training_flag(common, "--config"),
    };
    int n = (int)(sizeof own / sizeof *own);
    _Static_assert(sizeof own / sizeof *own + CLI_OPTIMIZER_NFLAGS + CLI_FSDP_NFLAGS <= TRAIN_FLAGS_MAX, "TRAIN_FLAGS_MAX too small");
    for (int i = 0; i < n; i++) args[i] = own[i];
    n = cli_training_add_optimizer_flags(common, args, n);
    return cli_fsdp_add_flags(args, n, &o->fsdp);
}
