//! The CLI's one argument parser (clap, derive). Flags are the JS options' names in kebab
//! case (`maxTokens` → `--max-tokens`, `nCtx` → `--n-ctx`), with the older llama.cpp-style
//! names as aliases (`--n-predict`/`-n`, `--temp`, `--ctx`/`-c`, `--batch`/`-b`, `--threads`/`-t`,
//! `-ngl`). Their values go through the same checked option structs as the JS API's
//! ([`LoadOptions`], [`GenerateParams`]), so defaults and checks are one policy: the defaults
//! shown in `--help` are read from `GenerateOptions::default()`, not restated here.

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Map, Value};

use ggweb::common::options::{from_value, GenerateParams, LoadOptions};
use ggweb::model::session::GenerateOptions;

#[derive(Parser)]
#[command(
    name = "ggweb",
    version,
    about = "GPT-2 in GGUF files: generate, score, trace, logits, tokenize, bench, inspect, train",
    help_template = "usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}",
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

const SUB_HELP: &str = "usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

#[derive(Subcommand)]
pub enum Command {
    /// Streams the text generated after a prompt (with --json, one line of JSON at the end).
    #[command(help_template = SUB_HELP)]
    Generate(GenerateArgs),
    /// Logprob, rank and entropy of every token of a text, and its perplexity.
    #[command(help_template = SUB_HELP)]
    Score(ScoreArgs),
    /// Attention, hidden states and named graph nodes of one pass.
    #[command(help_template = SUB_HELP)]
    Trace(TraceArgs),
    /// Every position's logits, as JSON.
    #[command(help_template = SUB_HELP)]
    Logits(LogitsArgs),
    /// stdin: one JSON string per line (with --decode one JSON array of ids) to ids (text).
    #[command(help_template = SUB_HELP)]
    Tokenize(TokenizeArgs),
    /// Prompt and generation speed (llama-bench's pp and tg).
    #[command(help_template = SUB_HELP)]
    Bench(BenchArgs),
    /// A GGUF file's metadata, tensors and memory plan (reads only the header).
    #[command(help_template = SUB_HELP)]
    Inspect(InspectArgs),
    /// One pass with TransformerLens hooks and captures (JSON: tokens, logits of the last position, cache).
    #[command(help_template = SUB_HELP)]
    Run(RunArgs),
    /// An activation patching sweep of a corrupted prompt with a clean one's activations (JSON).
    #[command(help_template = SUB_HELP)]
    Patch(PatchArgs),
    /// The logit lens: every layer's residual through the final LayerNorm and the unembedding (JSON).
    #[command(help_template = SUB_HELP)]
    Lens(LensArgs),
    /// Input attribution on the token embeddings: gradient, gradientXInput or integratedGradients (JSON).
    #[command(help_template = SUB_HELP)]
    Saliency(SaliencyArgs),
    /// Fine-tunes on a text file (the JS `model.train`): the whole model, saved as GGUF (`model.save`), or a LoRA adapter (`--lora-rank`), saved as a llama.cpp adapter (`model.saveLora`) or merged (`--merge`).
    #[command(help_template = SUB_HELP)]
    Train(TrainArgs),
}

/// `train`: the JS `model.train`'s options as flags, then `model.save`'s (or `saveLora`'s) to `--out`.
#[derive(Args)]
pub struct TrainArgs {
    /// The GGUF file (F32, F16 or BF16 weights; any type with --lora-rank).
    #[arg(long, short = 'm')]
    pub model: String,
    /// A UTF-8 text file: tokenized and cut into consecutive windows of --seq-len tokens (the remainder dropped).
    #[arg(long)]
    pub data: String,
    /// Tokens per training sequence (seqLen) [default: min(nCtx, 128)].
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Sequences per update (batchSize) [default: 1].
    #[arg(long = "batch", visible_alias = "batch-size")]
    pub batch: Option<u32>,
    /// Optimizer updates to run.
    #[arg(long)]
    pub steps: u32,
    /// The learning rate [default: 5e-5].
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f32>,
    /// adamw (PyTorch's AdamW, its defaults) or sgd [default: adamw].
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Clip the gradient to this global L2 norm (gradClip).
    #[arg(long, allow_negative_numbers = true)]
    pub grad_clip: Option<f32>,
    /// Train a LoRA adapter of this rank (lora.rank) instead of the whole model; --out gets the adapter.
    #[arg(long)]
    pub lora_rank: Option<u32>,
    /// The adapter's alpha (lora.alpha) [default: the rank].
    #[arg(long, allow_negative_numbers = true)]
    pub lora_alpha: Option<f32>,
    /// The adapted weights, comma-separated, of attn_qkv, attn_output, ffn_up, ffn_down (lora.targets) [default: attn_qkv].
    #[arg(long)]
    pub lora_targets: Option<String>,
    /// With --lora-rank: save the model with the adapter merged into its weights (model.save) instead of the adapter.
    #[arg(long)]
    pub merge: bool,
    /// Seed of a new adapter's A (seed) [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where the trained model's GGUF goes (written whole, then renamed into place).
    #[arg(long)]
    pub out: String,
    /// Also write an optimizer checkpoint here: the F32 weights (with --lora-rank: the adapter)
    /// with the optimizer state and data position (save / saveLora with optimizer: true), for --resume.
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// Go on from a --checkpoint file: full training reads the model from it instead of --model;
    /// with --lora-rank it is the adapter's, applied to --model. The run resumes its optimizer
    /// state, update count and data position.
    #[arg(long)]
    pub resume: Option<String>,
    /// The saved file's type: f32, f16 or q8_0; an adapter's f32 or f16 [default: f32].
    #[arg(long = "type")]
    pub out_type: Option<String>,
    /// CPU threads [default: every core].
    #[arg(long = "n-threads", visible_alias = "threads", short = 't')]
    pub n_threads: Option<u64>,
    /// One line of JSON on stdout at the end: { stop, steps, tokens, losses, out, bytes, type, adapter }.
    #[arg(long)]
    pub json: bool,
}

/// `saliency`: the JS `model.saliency`'s options.
#[derive(Args)]
pub struct SaliencyArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// The metric as JSON: `{"logitDiff":{"answer":1,"against":2}}`, `{"logprob":{"token":1,"pos":-1}}` or `{"loss":"mean"}`.
    #[arg(long)]
    pub of: String,
    /// gradient, gradientXInput or integratedGradients.
    #[arg(long, default_value = "gradientXInput")]
    pub method: String,
    /// integratedGradients' steps [default: 32].
    #[arg(long)]
    pub steps: Option<u32>,
}

/// `run`: the JS `model.run`'s options.
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// Hook points to capture, comma-separated ('*' within one dot-separated part).
    #[arg(long, default_value = "")]
    pub capture: String,
    /// A hook as JSON, `{"at":"blocks.1.hook_resid_pre","op":"scale","value":2}`; repeat for several, applied in order.
    #[arg(long)]
    pub hook: Vec<String>,
    /// Every position's logits instead of the last one's.
    #[arg(long)]
    pub all_logits: bool,
    /// A backward pass as JSON, `{"of":{"logitDiff":{"answer":1,"against":2}},"wrt":["hook_embed"]}`: adds `metric` and `grads`.
    #[arg(long)]
    pub grad: Option<String>,
}

/// `patch`: the JS `model.patch`'s arguments.
#[derive(Args)]
pub struct PatchArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[arg(long)]
    pub clean: String,
    #[arg(long)]
    pub corrupted: String,
    /// resid_pre, attn_out, mlp_out or z.
    #[arg(long)]
    pub at: String,
    /// The metric's token ids: logits[last, answer] - logits[last, against].
    #[arg(long)]
    pub answer: u32,
    #[arg(long)]
    pub against: u32,
    /// exact (every cell a patched pass) or attribution (first-order estimates: two forward passes, one backward).
    #[arg(long, default_value = "exact")]
    pub method: String,
    /// Print the load and sweep times (ms) to stderr.
    #[arg(long)]
    pub timing: bool,
}

/// `lens`: the JS `model.logitLens`'s options.
#[derive(Args)]
pub struct LensArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub input: InputArgs,
    #[arg(long = "top-k", default_value_t = 5)]
    pub top_k: usize,
}

/// `Model.load`'s model options ([`LoadOptions`]).
#[derive(Args, Clone, Default)]
pub struct LoadArgs {
    /// The GGUF file.
    #[arg(long, short = 'm')]
    pub model: String,
    /// Context length (nCtx) [default: the model's].
    #[arg(long = "n-ctx", visible_alias = "ctx", short = 'c')]
    pub n_ctx: Option<u64>,
    /// Most tokens per graph run (nBatch) [default: 32].
    #[arg(long = "n-batch", visible_alias = "batch", short = 'b')]
    pub n_batch: Option<u64>,
    /// CPU threads (nThreads) [default: 1].
    #[arg(long = "n-threads", visible_alias = "threads", short = 't')]
    pub n_threads: Option<u64>,
    /// The KV cache's type, f32 or f16 (kvType) [default: f32].
    #[arg(long = "kv-type")]
    pub kv_type: Option<String>,
    /// cpu, webgpu or auto (WebGPU if usable, else the CPU) [default: cpu; webgpu with --gpu-layers].
    #[arg(long)]
    pub backend: Option<String>,
    /// The last N blocks on WebGPU, the rest on the CPU; -1: everything (gpuLayers).
    #[arg(long = "gpu-layers", visible_alias = "ngl", allow_negative_numbers = true)]
    pub gpu_layers: Option<i64>,
}

impl LoadArgs {
    /// The load's options, checked as `Model.load`'s are. `--gpu-layers` without `--backend`
    /// means webgpu (it splits between webgpu and cpu); with `--backend cpu` it is refused.
    pub fn options(&self) -> Result<LoadOptions, String> {
        let mut backend = self.backend.clone();
        if self.gpu_layers.is_some() {
            match backend.as_deref() {
                None => backend = Some("webgpu".into()),
                Some("cpu") => {
                    return Err(
                        "--gpu-layers splits the model between webgpu and cpu: leave out --backend or pass webgpu"
                            .into(),
                    )
                }
                _ => {}
            }
        }
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        };
        put("nCtx", self.n_ctx.map(Value::from));
        put("nBatch", self.n_batch.map(Value::from));
        put("nThreads", self.n_threads.map(Value::from));
        put("kvType", self.kv_type.clone().map(Value::from));
        put("backend", backend.map(Value::from));
        put("gpuLayers", self.gpu_layers.map(Value::from));
        // The flags' names in messages: "--kv-type must be ...", not the JS key.
        from_value("load options", Value::Object(m)).map_err(|e| flag_names(&e.to_string()))
    }
}

/// A message of the shared option checks with the JS keys written as this CLI's flags.
fn flag_names(msg: &str) -> String {
    let msg = msg.strip_prefix("load options: ").or_else(|| msg.strip_prefix("generation options: ")).unwrap_or(msg);
    let keys = [
        ("nCtx", "--n-ctx"),
        ("nBatch", "--n-batch"),
        ("nThreads", "--n-threads"),
        ("kvType", "--kv-type"),
        ("gpuLayers", "--gpu-layers"),
        ("backend", "--backend"),
        ("maxTokens", "--max-tokens"),
        ("temperature", "--temperature"),
        ("topK", "--top-k"),
        ("topP", "--top-p"),
        ("minP", "--min-p"),
        ("repeatPenalty", "--repeat-penalty"),
        ("repeatLastN", "--repeat-last-n"),
        ("topLogprobs", "--top-logprobs"),
        ("seed", "--seed"),
    ];
    let mut out = msg.to_string();
    for (k, f) in keys {
        if out.starts_with(k) && out[k.len()..].starts_with(' ') {
            out = format!("{f}{}", &out[k.len()..]);
        }
    }
    out
}

/// The input: `--ids 1,2,3` as given, else `--prompt` tokenized.
#[derive(Args, Clone)]
pub struct InputArgs {
    #[arg(long, short = 'p', required_unless_present = "ids")]
    pub prompt: Option<String>,
    /// Token ids, comma-separated, instead of a prompt.
    #[arg(long, conflicts_with = "prompt")]
    pub ids: Option<String>,
    /// Parse special tokens such as <|endoftext|> in the prompt.
    #[arg(long)]
    pub special: bool,
}

const D: fn() -> GenerateOptions = GenerateOptions::default;

/// `generate`'s options ([`GenerateParams`]); defaults are `GenerateOptions::default()`'s.
#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// Most tokens to generate (maxTokens).
    #[arg(long = "max-tokens", visible_alias = "n-predict", short = 'n', default_value_t = D().max_tokens)]
    pub max_tokens: usize,
    /// 0: greedy (temperature).
    #[arg(long, visible_alias = "temp", default_value_t = D().sampling.temperature)]
    pub temperature: f32,
    /// 0: off (topK).
    #[arg(long = "top-k", default_value_t = D().sampling.top_k)]
    pub top_k: usize,
    /// 1: off (topP).
    #[arg(long = "top-p", default_value_t = D().sampling.top_p)]
    pub top_p: f32,
    /// 0: off (minP).
    #[arg(long = "min-p", default_value_t = D().sampling.min_p)]
    pub min_p: f32,
    /// 1: off (repeatPenalty).
    #[arg(long = "repeat-penalty", default_value_t = D().sampling.repeat_penalty)]
    pub repeat_penalty: f32,
    /// The last N tokens the penalty looks at (repeatLastN).
    #[arg(long = "repeat-last-n", default_value_t = D().sampling.repeat_last_n)]
    pub repeat_last_n: usize,
    /// The sampler's seed (seed); the same seed gives the same text.
    #[arg(long, default_value_t = D().sampling.seed)]
    pub seed: u64,
    /// A stop string (repeat the flag for several); the text ends before it (stop).
    #[arg(long)]
    pub stop: Vec<String>,
    /// ID=BIAS[,ID=BIAS...] added to those tokens' logits; -inf bans (logitBias).
    #[arg(long = "logit-bias")]
    pub logit_bias: Option<String>,
    /// Never end at the end-of-text token (ignoreEos).
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    /// Each token's logprob and the K most likely tokens (topLogprobs).
    #[arg(long = "top-logprobs", default_value_t = D().top_logprobs)]
    pub top_logprobs: usize,
    /// One line of JSON at the end instead of streamed text.
    #[arg(long)]
    pub json: bool,
}

impl GenerateArgs {
    /// The generation's options, checked as `generate`'s are in JS.
    pub fn options(&self) -> Result<GenerateOptions, String> {
        let mut bias = Map::new();
        for part in self.logit_bias.iter().flat_map(|s| s.split(',')).filter(|p| !p.is_empty()) {
            let (id, b) = part.split_once('=').ok_or_else(|| format!("--logit-bias: '{part}' is not ID=BIAS"))?;
            let b: f32 = b.trim().parse().map_err(|_| format!("--logit-bias: '{b}' is not a number"))?;
            let v = match b {
                f32::NEG_INFINITY => json!("-Infinity"),
                b if b.is_finite() => json!(b),
                _ => return Err(format!("--logit-bias: {id}={b}: a bias must be a number or -inf")),
            };
            bias.insert(id.trim().into(), v);
        }
        let v = json!({
            "maxTokens": self.max_tokens, "temperature": self.temperature, "topK": self.top_k, "topP": self.top_p,
            "minP": self.min_p, "repeatPenalty": self.repeat_penalty, "repeatLastN": self.repeat_last_n,
            "seed": self.seed, "stop": self.stop, "logitBias": bias, "ignoreEos": self.ignore_eos,
            "topLogprobs": self.top_logprobs,
        });
        let p: GenerateParams = from_value("generation options", v)
            .map_err(|e| flag_names(&e.to_string()).replace("logitBias", "--logit-bias"))?;
        p.resolve().map_err(|e| e.to_string())
    }
}

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// The K most likely tokens at each position (topK).
    #[arg(long = "top-k", default_value_t = 0)]
    pub top_k: usize,
    /// A hook as JSON (as `run --hook`, no "pos": it applies at every position); repeat for several.
    #[arg(long)]
    pub hook: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// attn, hidden, or ggml node names, comma-separated (taps).
    #[arg(long, default_value = "attn,hidden")]
    pub taps: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct LogitsArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[arg(long, short = 'p')]
    pub prompt: String,
    #[arg(long)]
    pub special: bool,
}

#[derive(Args)]
pub struct TokenizeArgs {
    #[arg(long, short = 'm')]
    pub model: String,
    #[arg(long)]
    pub special: bool,
    /// Ids to text instead.
    #[arg(long)]
    pub decode: bool,
}

#[derive(Args)]
#[command(
    after_help = "--n-past: decode at context depths instead: per depth, fill the KV cache with D prompt ids, then time -n decode steps at positions D.. (the slowdown is against the first depth)"
)]
pub struct BenchArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Prompt tokens (pp).
    #[arg(long = "n-prompt", short = 'p', default_value_t = 128)]
    pub n_prompt: usize,
    /// Generated tokens (tg).
    #[arg(long = "n-gen", short = 'n', default_value_t = 64)]
    pub n_gen: usize,
    #[arg(long, short = 'r', default_value_t = 3)]
    pub reps: usize,
    /// Context depths, e.g. 64,512,1000.
    #[arg(long = "n-past")]
    pub n_past: Option<String>,
    /// Decode this many sequences per step (one batch, sequence ids in the KV cache); tg is
    /// then steps per second.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub seqs: u64,
    /// Time the CPU backend's ops.
    #[arg(long)]
    pub profile: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub train: BenchTrainArgs,
}

/// `bench --train`: training tokens/s (`model.train` updates on fixed pseudo-random ids).
#[derive(Args)]
pub struct BenchTrainArgs {
    /// Time training updates (AdamW) instead of pp/tg: one warm-up update, then --steps timed ones.
    #[arg(long)]
    pub train: bool,
    /// With --train: tokens per training sequence (seqLen).
    #[arg(long, default_value_t = 128)]
    pub seq_len: u32,
    /// With --train: sequences per update (batchSize; `--batch` is the load option n_batch here).
    #[arg(long, default_value_t = 4)]
    pub batch_size: u32,
    /// With --train: timed updates after the warm-up one.
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
    /// With --train: train a LoRA adapter of this rank (any weight type) instead of the whole model.
    #[arg(long)]
    pub lora_rank: Option<u32>,
    /// With --train and --lora-rank: the adapted weights, comma-separated (lora.targets) [default: attn_qkv].
    #[arg(long)]
    pub lora_targets: Option<String>,
}

#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    #[arg(long)]
    pub json: bool,
    /// Array items shown.
    #[arg(long, default_value_t = 6)]
    pub items: usize,
}

/// Parses the command line. `-ngl N` (llama.cpp's single-dash spelling) reads as `--ngl N`.
/// Errors are the CLI's own messages (`unknown option --x`), help and version are `Ok(None)`
/// after printing them.
pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Option<Cli>, String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let argv = argv.into_iter().map(|a| if a == "-ngl" { "--ngl".into() } else { a });
    match Cli::try_parse_from(argv) {
        Ok(cli) => Ok(Some(cli)),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            print!("{e}");
            Ok(None)
        }
        Err(e) => {
            // The first line in this CLI's words; clap's explanation (with a usage line) after it.
            let arg = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(a)) => a.clone(),
                Some(ContextValue::Strings(a)) => a.join(", "),
                _ => String::new(),
            };
            let arg = arg.split(' ').next().unwrap_or_default().to_string();
            let first = match e.kind() {
                ErrorKind::UnknownArgument => format!("unknown option {arg}"),
                ErrorKind::MissingRequiredArgument => format!("missing {arg}"),
                ErrorKind::InvalidValue if arg.starts_with('-') => format!("{arg} needs a value"),
                ErrorKind::InvalidSubcommand => match e.get(ContextKind::InvalidSubcommand) {
                    Some(ContextValue::String(c)) => format!("unknown command '{c}'"),
                    _ => "unknown command".into(),
                },
                _ => return Err(e.render().to_string().trim_start_matches("error: ").to_string()),
            };
            Err(format!("{first}\n{}", e.render()))
        }
    }
}
