//! Gradients of a metric of the logits (issue 37): `run`'s `grad` ([`Session::run_grad`]),
//! input saliency ([`Session::saliency`]) and attribution patching (`patch`'s `method:
//! 'attribution'`, [`Session::patch_attribution`]). Each is the one forward pass
//! ([`super::context::Gpt2::decode`]) with a backward pass appended to its graph
//! ([`GradRun`]): the metric is built after the logits (`Σ w ⊙ logits` for a logit
//! difference, `Σ w ⊙ log_softmax(logits)` for a logprob or the loss), the hook points'
//! nodes made params, and their gradients read back like taps.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::context::{Batch, GradRun, Logits, TapValue};
use super::hooks::{Hook, HookOp, HookValue, Source};
use super::hparams::Hparams;
use super::inside::{Patch, Run};
use super::session::Session;
use super::ModelError;

// ts: export Metric
/// A scalar of the logits that gradients are taken of (`run`'s `grad.of`, `saliency`'s `of`);
/// `pos` defaults to -1 and counts from the end when negative.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(rename_all = "camelCase", deny_unknown_fields))]
pub enum Metric {
    /// `logits[pos, answer] − logits[pos, against]`.
    LogitDiff {
        answer: u32,
        against: u32,
        #[cfg_attr(feature = "std", serde(default, skip_serializing_if = "Option::is_none"))]
        pos: Option<i64>,
    },
    /// `log_softmax(logits[pos])[token]`.
    Logprob {
        token: u32,
        #[cfg_attr(feature = "std", serde(default, skip_serializing_if = "Option::is_none"))]
        pos: Option<i64>,
    },
    /// The mean over positions i = 0..n−2 of `−log_softmax(logits[i])[tokens[i+1]]`
    /// (Hugging Face's `GPT2LMHeadModel(labels=input_ids).loss`).
    Loss(LossKind),
}

// ts: export LossKind
/// The one reduction of [`Metric::Loss`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(rename_all = "lowercase"))]
pub enum LossKind {
    Mean,
}

/// `wrt`: hook point names (`*` within a part, as `capture`) or `'*'` for every one.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(untagged))]
pub enum Wrt {
    All(String),
    List(Vec<String>),
}

// ts: export GradSpec
/// `run`'s `grad`: the metric and the hook points whose gradient is returned.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(deny_unknown_fields))]
pub struct GradSpec {
    // ts: Metric
    pub of: Metric,
    // ts: HookName[] | '*'
    pub wrt: Wrt,
}

// ts: export SaliencyResult
/// What [`Session::saliency`] returns (JS `model.saliency`, `ggweb saliency`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Saliency {
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    /// Per token.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub scores: Vec<f32>,
    /// The metric at the input.
    pub metric: f32,
    /// integratedGradients: Σ scores − (m(e) − m(0)), the completeness gap.
    #[cfg_attr(feature = "std", serde(skip_serializing_if = "Option::is_none"))]
    pub delta: Option<f32>,
}

/// The most integrated-gradients steps one call may take.
pub const MAX_STEPS: u32 = 4096;

/// A position `pos` (negative from the end) of `n`, or `invalid` naming `what`.
fn position(pos: Option<i64>, n: usize, what: &str) -> Result<usize, ModelError> {
    let p = pos.unwrap_or(-1);
    let q = if p < 0 { p.saturating_add(n as i64) } else { p };
    if q < 0 || q >= n as i64 {
        return Err(ModelError::Invalid(format!("{what} {p} is out of range for {n} tokens")));
    }
    Ok(q as usize)
}

fn token(id: u32, n_vocab: usize, what: &str) -> Result<(), ModelError> {
    if id as usize >= n_vocab {
        return Err(ModelError::Invalid(format!("{what} {id} is not a token id (n_vocab {n_vocab})")));
    }
    Ok(())
}

impl Metric {
    /// The metric's coefficients over the logits of `tokens` (`[n][n_vocab]`) and whether they
    /// weigh the log-softmax; `invalid` naming a token out of the vocabulary or a position out
    /// of range (`what`: the spec's path, e.g. `grad.of`).
    pub fn weights(&self, tokens: &[u32], n_vocab: usize, what: &str) -> Result<(Vec<f32>, bool), ModelError> {
        let n = tokens.len();
        let mut w = vec![0f32; n * n_vocab];
        match *self {
            Metric::LogitDiff { answer, against, pos } => {
                token(answer, n_vocab, &format!("{what}.logitDiff.answer"))?;
                token(against, n_vocab, &format!("{what}.logitDiff.against"))?;
                let p = position(pos, n, &format!("{what}.logitDiff.pos"))?;
                w[p * n_vocab + answer as usize] += 1.0;
                w[p * n_vocab + against as usize] -= 1.0;
                Ok((w, false))
            }
            Metric::Logprob { token: t, pos } => {
                token(t, n_vocab, &format!("{what}.logprob.token"))?;
                let p = position(pos, n, &format!("{what}.logprob.pos"))?;
                w[p * n_vocab + t as usize] = 1.0;
                Ok((w, true))
            }
            Metric::Loss(LossKind::Mean) => {
                if n < 2 {
                    return Err(ModelError::Invalid(format!(
                        "{what}: loss 'mean' needs at least 2 tokens (it predicts tokens 1..n−1), got {n}"
                    )));
                }
                let k = -1.0 / (n - 1) as f32;
                for i in 0..n - 1 {
                    w[i * n_vocab + tokens[i + 1] as usize] = k;
                }
                Ok((w, true))
            }
        }
    }

    /// The one position whose logits the metric reads (`logitDiff`, `logprob`), of `n` tokens;
    /// None for the loss, which reads every position's. After [`Metric::weights`] checked it.
    pub fn row(&self, n: usize) -> Option<usize> {
        match *self {
            Metric::LogitDiff { pos, .. } | Metric::Logprob { pos, .. } => position(pos, n, "pos").ok(),
            Metric::Loss(_) => None,
        }
    }

    /// The metric's value from every position's logits (`[n][n_vocab]`), the sums in f64.
    pub fn value(&self, logits: &[f32], tokens: &[u32], n_vocab: usize) -> f32 {
        let n = tokens.len();
        let row = |p: usize| &logits[p * n_vocab..(p + 1) * n_vocab];
        match *self {
            Metric::LogitDiff { pos, .. } | Metric::Logprob { pos, .. } => {
                let r = row(position(pos, n, "pos").expect("checked by weights"));
                self.value_of_row(r).expect("a metric of one row")
            }
            Metric::Loss(LossKind::Mean) => {
                ((0..n - 1).map(|i| -logprob(row(i), tokens[i + 1])).sum::<f64>() / (n - 1) as f64) as f32
            }
        }
    }

    /// A `logitDiff`'s or `logprob`'s value from the logits of its one position
    /// ([`Metric::row`]); None for the loss, which reads every position's.
    pub fn value_of_row(&self, r: &[f32]) -> Option<f32> {
        match *self {
            Metric::LogitDiff { answer, against, .. } => Some(r[answer as usize] - r[against as usize]),
            Metric::Logprob { token, .. } => Some(logprob(r, token) as f32),
            Metric::Loss(_) => None,
        }
    }
}

/// `log_softmax(r)[t]` in f64.
fn logprob(r: &[f32], t: u32) -> f64 {
    let max = r.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = r.iter().map(|&v| libm::exp(v as f64 - max)).sum();
    r[t as usize] as f64 - max - libm::log(sum)
}

/// How one `wrt` hook point's gradient is read from the graph.
enum Read {
    /// A node's gradient (TransformerLens's layout), times `a` elementwise where later hooks at
    /// the same node come after this point (`hook_resid_post` under `hook_resid_pre`'s hooks).
    Node { node: String, a: Option<Vec<f32>> },
    /// A LayerNorm's `hook_scale`: `−Σ_d g[p,d]·y[p,d] / s[p]` with `y` the normalized values
    /// before any hook on them (`pre`, also the node whose gradient `g` is), `s` the hooked scale.
    Scale { pre: String },
}

/// The names of `wrt` (expanded: `'*'` is every hook point; patterns as `capture`'s), or
/// `invalid` naming what is wrong.
pub fn wrt_names(wrt: &Wrt, hp: &Hparams) -> Result<Vec<String>, ModelError> {
    match wrt {
        Wrt::All(s) if s == "*" => Ok(super::hooks::hook_names(hp)),
        Wrt::All(s) => Err(ModelError::Invalid(format!(
            "grad.wrt must be '*' or a list of hook point names, got the string '{s}'"
        ))),
        Wrt::List(v) if v.is_empty() => {
            Err(ModelError::Invalid("grad.wrt is empty: name at least one hook point (or '*')".into()))
        }
        Wrt::List(v) => super::hooks::expand_capture(v, hp).map_err(|e| match e {
            ModelError::Invalid(m) => ModelError::Invalid(format!("grad.wrt: {}", m.replacen("capture ", "", 1))),
            e => e,
        }),
    }
}

impl Session {
    /// [`Session::run`] with a backward pass: also the metric of `grad.of` and its gradient
    /// with respect to each hook point of `grad.wrt` (its output, after the `hooks` at that
    /// point), in TransformerLens's shape. One graph run: the forward pass, the metric and the
    /// backward nodes planned together on compute buffers of the run's own.
    pub async fn run_grad(
        &mut self,
        tokens: &[u32],
        capture: &[String],
        hooks: &[Hook],
        grad: Option<&GradSpec>,
    ) -> Result<Run, ModelError> {
        let Some(grad) = grad else { return self.run(tokens, capture, hooks).await };
        self.grad_run(tokens, capture, hooks, grad, true).await
    }

    /// [`Session::run_grad`]; without `all_logits` (a caller that reads the metric and the
    /// gradients, not the logits: attribution patching, saliency) a metric of one position
    /// runs the head on that row alone (`Logits::Row`: its forward and backward over 1 row,
    /// not n) and the run's `logits` are that row's.
    async fn grad_run(
        &mut self,
        tokens: &[u32],
        capture: &[String],
        hooks: &[Hook],
        grad: &GradSpec,
        all_logits: bool,
    ) -> Result<Run, ModelError> {
        self.end_generation();
        self.check_tokens(tokens)?;
        let hp = self.model.hparams.clone();
        let (n, n_vocab) = (tokens.len(), hp.n_vocab);
        let (mut w, log_softmax) = grad.of.weights(tokens, n_vocab, "grad.of")?;
        let logits = match grad.of.row(n).filter(|_| !all_logits) {
            Some(p) => {
                // The metric's weights of that one row.
                w = w[p * n_vocab..(p + 1) * n_vocab].to_vec();
                Logits::Row(p)
            }
            None => Logits::All,
        };
        let wrt = wrt_names(&grad.wrt, &hp)?;
        let planned = super::hooks::plan(hooks, &hp, n, 0, true)?;
        let hooked = |node: &str| planned.iter().find(|h| h.node == node);
        // What each wrt point reads, the graph nodes to differentiate, the extra captures.
        let mut reads = Vec::with_capacity(wrt.len());
        let mut nodes: Vec<String> = Vec::new();
        let mut taps: Vec<String> = Vec::new();
        let mut capture_all: Vec<String> = super::hooks::expand_capture(capture, &hp)?;
        let need = |v: &mut Vec<String>, s: &str| {
            if !v.iter().any(|x| x == s) {
                v.push(String::from(s));
            }
        };
        for name in &wrt {
            let p = super::hooks::hook_point(name, &hp)?;
            match p.source {
                Source::Node(node) => {
                    // hook_resid_post(l) and hook_resid_pre(l + 1) are one node: the hooks of
                    // the later point scale what flows back to the earlier one.
                    let a = name.strip_suffix(".hook_resid_post").and_then(|b| {
                        let l: usize = b.strip_prefix("blocks.")?.parse().ok()?;
                        let next: Vec<Hook> = hooks
                            .iter()
                            .filter(|h| h.at == format!("blocks.{}.hook_resid_pre", l + 1))
                            .cloned()
                            .collect();
                        if next.is_empty() {
                            return None;
                        }
                        super::hooks::plan(&next, &hp, n, 0, true).ok().map(|mut v| v.remove(0).a)
                    });
                    need(&mut nodes, &node);
                    reads.push(Read::Node { node, a });
                }
                Source::LnScale(_) => {
                    let normalized = super::hooks::ln_normalized(name).expect("a LayerNorm's scale");
                    let Source::Node(norm) = super::hooks::hook_point(&normalized, &hp)?.source else {
                        unreachable!("hook_normalized is a node")
                    };
                    let pre = if hooked(&norm).is_some() { format!("{norm}.pre_hook") } else { norm };
                    need(&mut nodes, &pre);
                    need(&mut taps, &pre);
                    need(&mut capture_all, name);
                    reads.push(Read::Scale { pre });
                }
            }
        }
        let (_, tl) = super::hooks::split_taps(&capture_all, &hp)?;
        for t in &tl.nodes {
            need(&mut taps, t);
        }
        self.checkpoint().await?;
        self.truncate(0);
        self.cache_hooks = hooks.to_vec();
        let batch = Batch {
            tokens,
            n_past: 0,
            logits,
            taps: &taps,
            hooks,
            grad: Some(GradRun { nodes: &nodes, w: &w, log_softmax }),
            ..Batch::default()
        };
        let out = self.model.decode(batch).await?;
        self.cache.extend_from_slice(tokens);
        let mut values = tl.values(&out.taps, hp.eps);
        for v in values.iter_mut().filter(|v| v.name.ends_with("hook_scale")) {
            super::hooks::hooked_scale(&v.name, &mut v.data, hooks);
        }
        let node_grad = |node: &str| out.grads.iter().find(|g| g.name == node).expect("differentiated");
        let mut grads = Vec::with_capacity(wrt.len());
        for (name, read) in wrt.iter().zip(&reads) {
            let (shape, _, _) = super::hooks::tl_shape(name, &hp, n, 0);
            let mut ne = [1i64; 4];
            for (i, &d) in shape.iter().rev().enumerate() {
                ne[i] = d as i64;
            }
            let data = match read {
                Read::Node { node, a } => {
                    let mut g = node_grad(node).data.clone();
                    if let Some(a) = a {
                        g.iter_mut().zip(a).for_each(|(g, a)| *g *= a);
                    }
                    g
                }
                Read::Scale { pre } => {
                    let g = &node_grad(pre).data;
                    let y = &out.taps.iter().find(|t| &t.name == pre).expect("tapped").data;
                    let s = &values.iter().find(|v| &v.name == name).expect("captured").data;
                    let d = hp.n_embd;
                    ne = [1, n as i64, 1, 1];
                    (0..n)
                        .map(|p| {
                            let dot: f64 = (0..d).map(|i| g[p * d + i] as f64 * y[p * d + i] as f64).sum();
                            (-dot / s[p] as f64) as f32
                        })
                        .collect()
                }
            };
            grads.push(TapValue { name: name.clone(), ne, data });
        }
        // The captures asked for (not those the scales needed).
        let asked = super::hooks::expand_capture(capture, &hp)?;
        values.retain(|v| asked.contains(&v.name));
        let metric = match logits {
            Logits::Row(_) => grad.of.value_of_row(&out.logits).expect("a metric of one row"),
            _ => grad.of.value(&out.logits, tokens, n_vocab),
        };
        Ok(Run { tokens: tokens.to_vec(), logits: out.logits, cache: values, metric: Some(metric), grads: Some(grads) })
    }

    /// Input attribution on the token embeddings (`hook_embed`; the position embeddings
    /// unchanged): per token, `gradient` (the L2 norm of ∂m/∂e[i]), `gradientXInput`
    /// (Σ_d e·∂m/∂e) or `integratedGradients` (Σ_d e · mean_k ∂m/∂e at α_k·e, α_k =
    /// (k + 0.5)/steps, baseline 0; `delta` = Σ scores − (m(e) − m(0)); the steps batched:
    /// [`Session::integrated_steps`]). The prompt cache afterwards holds `tokens` unhooked.
    pub async fn saliency(
        &mut self,
        tokens: &[u32],
        of: &Metric,
        method: &str,
        steps: Option<u32>,
    ) -> Result<Saliency, ModelError> {
        if !matches!(method, "gradient" | "gradientXInput" | "integratedGradients") {
            return Err(ModelError::Invalid(format!(
                "method must be 'gradient', 'gradientXInput' or 'integratedGradients', got '{method}'"
            )));
        }
        let steps = steps.unwrap_or(32);
        if method == "integratedGradients" && !(1..=MAX_STEPS).contains(&steps) {
            return Err(ModelError::Invalid(format!("steps must be in 1..={MAX_STEPS}, got {steps}")));
        }
        let hp = self.model.hparams.clone();
        self.check_tokens(tokens)?;
        of.weights(tokens, hp.n_vocab, "of")?;
        let (n, d) = (tokens.len(), hp.n_embd);
        let embed = [String::from("hook_embed")];
        let spec = |of: &Metric| GradSpec { of: of.clone(), wrt: Wrt::List(embed.to_vec()) };
        let scaled = |alpha: f32| Hook {
            at: embed[0].clone(),
            op: HookOp::Scale,
            head: None,
            pos: None,
            index: None,
            value: Some(HookValue::Number(alpha)),
        };
        let mut scores = vec![0f32; n];
        let mut delta = None;
        let metric;
        if method == "integratedGradients" {
            // e itself, unscaled, and the metric there and at 0.
            let plain = self.run(tokens, &embed, &[]).await?;
            let e = plain.cache[0].data.clone();
            metric = of.value(&plain.logits, tokens, hp.n_vocab);
            let zero = Hook { op: HookOp::Zero, value: None, ..scaled(0.0) };
            let m0 = of.value(&self.run(tokens, &[], &[zero]).await?.logits, tokens, hp.n_vocab);
            let total = self.integrated_steps(tokens, of, steps).await?;
            for i in 0..n {
                let s: f64 = (0..d).map(|j| e[i * d + j] as f64 * total[i * d + j] / steps as f64).sum();
                scores[i] = s as f32;
            }
            let sum: f64 = scores.iter().map(|&s| s as f64).sum();
            delta = Some((sum - (metric as f64 - m0 as f64)) as f32);
            // The cache holds the unhooked tokens, as after a plain run.
            self.run(tokens, &[], &[]).await?;
        } else {
            let run = self.grad_run(tokens, &embed, &[], &spec(of), false).await?;
            let (e, g) = (&run.cache[0].data, &run.grads.as_ref().expect("a gradient run")[0].data);
            for i in 0..n {
                let (e, g) = (&e[i * d..(i + 1) * d], &g[i * d..(i + 1) * d]);
                scores[i] = match method {
                    "gradient" => libm::sqrt(g.iter().map(|&v| v as f64 * v as f64).sum::<f64>()) as f32,
                    _ => e.iter().zip(g).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() as f32,
                };
            }
            metric = run.metric.expect("a gradient run");
        }
        Ok(Saliency { tokens: tokens.to_vec(), scores, metric, delta })
    }

    /// Σ_k ∂m/∂e at α_k·e (α_k = (k + 0.5)/steps), per element of `hook_embed` (`[n][d]`,
    /// f64 sums), the steps evaluated as batches: each graph runs `k` copies of `tokens` as `k`
    /// sequences (as decode's n sequences: cells of the KV cache, the KQ mask keeping each to
    /// itself), copy j scaled by its own α at `hook_embed`, the metric summed over them, so
    /// one backward pass gives every copy's gradient. `k` is at most 64 (the cells' sequence
    /// bits), what the context holds (k·n cells) and 512 rows a graph (attention across the
    /// batch grows as (k·n)²); a batch whose plan does not fit what the budget leaves is
    /// halved, down to one sequence (whose refusal is the call's). The cache is empty after.
    async fn integrated_steps(&mut self, tokens: &[u32], of: &Metric, steps: u32) -> Result<Vec<f64>, ModelError> {
        use super::context::SeqPos;
        use super::hooks::Sel;
        let hp = self.model.hparams.clone();
        let (n, d, steps) = (tokens.len(), hp.n_embd, steps as usize);
        let Source::Node(embed) = super::hooks::hook_point("hook_embed", &hp)?.source else {
            unreachable!("hook_embed is a node")
        };
        let nodes = [embed];
        let (w1, log_softmax) = of.weights(tokens, hp.n_vocab, "of")?;
        self.end_generation();
        self.checkpoint().await?;
        self.clear_cache();
        self.model.kv.set_causal(0);
        let mut total = vec![0f64; n * d];
        let mut per = steps.min(64).min(self.model.n_ctx() / n).min((512 / n).max(1)).max(1);
        let mut k0 = 0;
        while k0 < steps {
            let k = per.min(steps - k0);
            let batch_tokens: Vec<u32> = tokens.iter().copied().cycle().take(k * n).collect();
            let seq: Vec<SeqPos> =
                (0..k).flat_map(|j| (0..n).map(move |i| SeqPos { pos: i as u32, seqs: 1 << j })).collect();
            let hooks: Vec<Hook> = (0..k)
                .map(|j| Hook {
                    at: String::from("hook_embed"),
                    op: HookOp::Scale,
                    head: None,
                    pos: Some(Sel::Many(((j * n) as i64..((j + 1) * n) as i64).collect())),
                    index: None,
                    value: Some(HookValue::Number(((k0 + j) as f32 + 0.5) / steps as f32)),
                })
                .collect();
            let w: Vec<f32> = w1.iter().copied().cycle().take(k * w1.len()).collect();
            let batch = Batch {
                tokens: &batch_tokens,
                seq: &seq,
                logits: Logits::None,
                hooks: &hooks,
                grad: Some(GradRun { nodes: &nodes, w: &w, log_softmax }),
                ..Batch::default()
            };
            let out = self.model.decode(batch).await;
            self.model.kv.set_causal(0);
            match out {
                Err(ModelError::RunTooLarge { .. }) if k > 1 => {
                    per = k / 2;
                    continue;
                }
                Err(e) => return Err(e),
                Ok(out) => {
                    for g in out.grads[0].data.chunks(n * d) {
                        total.iter_mut().zip(g).for_each(|(t, &g)| *t += g as f64);
                    }
                }
            }
            k0 += k;
            self.checkpoint().await?;
        }
        Ok(total)
    }

    /// Attribution patching (Nanda's AtP): each cell of [`Session::patch`]'s sweep estimated
    /// to first order, `corruptedDiff + Σ (clean_act − corrupted_act) · ∂diff/∂act` with the
    /// gradient taken on the corrupted run, summed over d_model (`resid_pre`, `attn_out`,
    /// `mlp_out`: cells [layer][pos]) or over every position and d_head of the head's `hook_z`
    /// (`z`: [layer][head]). Two forward passes and one backward pass.
    pub async fn patch_attribution(
        &mut self,
        clean: &[u32],
        corrupted: &[u32],
        point: &str,
        at: &str,
        answer: u32,
        against: u32,
    ) -> Result<Patch, ModelError> {
        let hp = self.model.hparams.clone();
        let (n, nl) = (clean.len(), hp.n_layer);
        let capture: Vec<String> = (0..nl).map(|l| format!("blocks.{l}.{point}")).collect();
        let of = Metric::LogitDiff { answer, against, pos: Some(-1) };
        // The clean run's diff reads the last position's logits only: the head over one row.
        let clean_run = self.run_logits(clean, &capture, &[], Logits::Last).await?;
        let clean_diff = of.value_of_row(&clean_run.logits).expect("a logit difference");
        let spec = GradSpec { of, wrt: Wrt::List(capture.clone()) };
        // The gradient run's metric reads the last position: its head over that row alone.
        let corr = self.grad_run(corrupted, &capture, &[], &spec, false).await?;
        let corrupted_diff = corr.metric.expect("a gradient run");
        let grads = corr.grads.as_ref().expect("a gradient run");
        let (shape, mut cells) = if at == "z" {
            (vec![nl, hp.n_head], vec![0f64; nl * hp.n_head])
        } else {
            (vec![nl, n], vec![0f64; nl * n])
        };
        for (l, grad) in grads.iter().enumerate().take(nl) {
            let (c, x, g) = (&clean_run.cache[l].data, &corr.cache[l].data, &grad.data);
            let per = c.len() / n;
            for p in 0..n {
                for i in 0..per {
                    let k = p * per + i;
                    let v = (c[k] as f64 - x[k] as f64) * g[k] as f64;
                    let cell = if at == "z" { l * hp.n_head + i / hp.head_dim() } else { l * n + p };
                    cells[cell] += v;
                }
            }
        }
        let cells = cells.iter().map(|&v| (corrupted_diff as f64 + v) as f32).collect();
        Ok(Patch { shape, cells, clean_diff, corrupted_diff })
    }
}
