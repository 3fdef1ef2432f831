//! The interpretability calls on a [`Session`] (issue 24, TransformerLens's workflow):
//! [`Session::run`] with hooks and captures, the logit lens, activation patching sweeps,
//! direct logit attribution and SAE features. The generation loop is in [`super::session`].

use alloc::string::String;
use alloc::vec::Vec;

use super::context::{Batch, Logits, Start, TapValue};
use super::hooks::Hook;
use super::logprobs::RowStats;
use super::session::Session;
use super::ModelError;

// The results below are what the JS calls and the CLI return, serialized as they are
// (camelCase; number arrays as typed arrays in the browser: crate::typed).

// ts: export LogitLensResult
/// What [`Session::logit_lens`] returns (JS `model.logitLens`, `ggweb lens`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Lens {
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    /// n_layer + 1.
    pub layers: usize,
    /// `[layer][pos]`: the k most likely tokens and their logprobs, every position.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::token_logprobs"))]
    pub top: Vec<Vec<Vec<(u32, f32)>>>,
    /// `[layer]`, length n − 1: ln p(tokens[i + 1]) at position i.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s_list"))]
    pub logprobs: Vec<Vec<f32>>,
}

// ts: export PatchResult
/// What [`Session::patch`] returns (JS `model.patch`, `ggweb patch`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "std", derive(serde::Serialize), serde(rename_all = "camelCase"))]
pub struct Patch {
    /// `[n_layer, n_pos]`, or `[n_layer, n_head]` for `z`.
    pub shape: Vec<usize>,
    /// Row-major over `shape`: the logit difference with that activation patched.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub cells: Vec<f32>,
    pub clean_diff: f32,
    pub corrupted_diff: f32,
}

// ts: export AttributeResult
/// What [`Session::attribute`] returns: each component's share of the logit difference
/// (JS `model.attribute`).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "std", derive(serde::Serialize), serde(rename_all = "camelCase"))]
pub struct Attribution {
    pub embed: f32,
    pub pos_embed: f32,
    /// `[layer][head]`.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub heads: Vec<f32>,
    /// `[layer]`: the attention output bias `b_O`.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub attn_bias: Vec<f32>,
    /// `[layer]`.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub mlps: Vec<f32>,
    /// `ln_final.b · (W_U[:, answer] − W_U[:, against])`.
    pub ln_bias: f32,
    /// The sum of the parts.
    pub total: f32,
}

// ts: export RunResult
/// What [`Session::run`] returns (the API's `run` result: `cache` as `{ [hook]: { shape, data } }`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Run {
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    /// `[n][n_vocab]`, every position.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub logits: Vec<f32>,
    /// The captured hook points, by TransformerLens's names, in its forward order; `ne` is
    /// TransformerLens's shape reversed.
    #[cfg_attr(feature = "std", serde(serialize_with = "super::hooks::by_name"))]
    pub cache: Vec<TapValue>,
    /// With `grad`: the metric's value.
    #[cfg_attr(feature = "std", serde(skip_serializing_if = "Option::is_none"))]
    pub metric: Option<f32>,
    /// With `grad`: d metric / d each `wrt` hook point's output (after the hooks there), by
    /// TransformerLens's names and shapes.
    #[cfg_attr(
        feature = "std",
        serde(skip_serializing_if = "Option::is_none", serialize_with = "super::hooks::by_name_some")
    )]
    pub grads: Option<Vec<TapValue>>,
}

impl Session {
    /// One forward pass over `tokens` from position 0 with `hooks` applied and the hook
    /// points named by `capture` kept (TransformerLens's names; `*` stands for any run of
    /// characters within one dot-separated part): every position's logits and the captured
    /// values, with TransformerLens's shapes. The prompt cache is not reused; afterwards the
    /// cache holds `tokens` under these hooks.
    pub async fn run(&mut self, tokens: &[u32], capture: &[String], hooks: &[Hook]) -> Result<Run, ModelError> {
        self.run_logits(tokens, capture, hooks, Logits::All).await
    }

    /// [`Session::run`] with the logits `logits` asks for (`Last`: the head over one position,
    /// for a caller that reads no other).
    pub(crate) async fn run_logits(
        &mut self,
        tokens: &[u32],
        capture: &[String],
        hooks: &[Hook],
        logits: Logits,
    ) -> Result<Run, ModelError> {
        self.end_generation();
        self.check_tokens(tokens)?;
        let hp = self.model.hparams.clone();
        let names = super::hooks::expand_capture(capture, &hp)?;
        let (_, tl) = super::hooks::split_taps(&names, &hp)?;
        self.checkpoint().await?;
        self.truncate(0);
        self.cache_hooks = hooks.to_vec();
        let batch = Batch { tokens, n_past: 0, logits, taps: &tl.nodes, hooks, ..Batch::default() };
        let out = self.model.decode(batch).await?;
        self.cache.extend_from_slice(tokens);
        let mut cache = tl.values(&out.taps, hp.eps);
        // A scale capture is computed from the LayerNorm's input: the hooks on it come after.
        for v in cache.iter_mut().filter(|v| v.name.ends_with("hook_scale")) {
            super::hooks::hooked_scale(&v.name, &mut v.data, hooks);
        }
        Ok(Run { tokens: tokens.to_vec(), logits: out.logits, cache, metric: None, grads: None })
    }

    /// The logit lens: the residual stream before each block and after the last
    /// (`blocks.0.hook_resid_pre` .. the final residual), each through `ln_final` with its own
    /// statistics and the unembedding (TransformerLens `apply_ln_to_stack(recompute_ln=True)`).
    /// Layer `n_layer` equals the model's logits.
    pub async fn logit_lens(&mut self, tokens: &[u32], top_k: usize) -> Result<Lens, ModelError> {
        let n_layer = self.model.hparams.n_layer;
        let mut capture: Vec<String> = (0..n_layer).map(|l| alloc::format!("blocks.{l}.hook_resid_pre")).collect();
        capture.push(alloc::format!("blocks.{}.hook_resid_post", n_layer - 1));
        let run = self.run(tokens, &capture, &[]).await?;
        let (n, n_vocab) = (tokens.len(), self.model.hparams.n_vocab);
        let mut lens = Lens { tokens: tokens.to_vec(), layers: n_layer + 1, top: Vec::new(), logprobs: Vec::new() };
        for name in &capture {
            let resid = &run.cache.iter().find(|v| &v.name == name).expect("captured").data;
            self.checkpoint().await?;
            let logits = self.model.head(resid, n).await?;
            let (mut top, mut lp) = (Vec::with_capacity(n), Vec::with_capacity(n.saturating_sub(1)));
            for (p, row) in logits.chunks(n_vocab).enumerate() {
                let st = RowStats::new(row);
                top.push(st.top(row, top_k));
                if p + 1 < n {
                    lp.push(st.logprob(row[tokens[p + 1] as usize]));
                }
            }
            lens.top.push(top);
            lens.logprobs.push(lp);
        }
        Ok(lens)
    }

    /// An activation patching sweep (TransformerLens `patching.get_act_patch_*`): each cell is
    /// `logits[last, answer] − logits[last, against]` of the `corrupted` run with one
    /// activation of the `clean` run patched in. `at`: `resid_pre`, `attn_out`, `mlp_out`
    /// (cells `[layer][pos]`) or `z` (`[layer][head]`, every position of the head at once).
    /// Nothing before the patch is recomputed: cell (l, p) runs blocks l.. over positions p..
    /// only ([`Start`]), from the corrupted run's `blocks.l.hook_resid_pre` there and on its K/V
    /// of the positions before p (positions are swept from the last down, so those cells still
    /// hold the corrupted run's); a `z` cell runs blocks l.. over every position. A sweep costs
    /// about a quarter (`z`: a half) of its cells' full passes.
    ///
    /// `method`: `exact` (this sweep, the default) or `attribution`, the first-order estimate
    /// of every cell from one forward pass of each prompt and one backward pass
    /// ([`Session::patch_attribution`]).
    pub async fn patch(
        &mut self,
        clean: &[u32],
        corrupted: &[u32],
        at: &str,
        answer: u32,
        against: u32,
        method: Option<&str>,
    ) -> Result<Patch, ModelError> {
        let attribution = match method.unwrap_or("exact") {
            "exact" => false,
            "attribution" => true,
            m => return Err(ModelError::Invalid(alloc::format!("method must be 'exact' or 'attribution', got '{m}'"))),
        };
        let hp = self.model.hparams.clone();
        if clean.len() != corrupted.len() {
            return Err(ModelError::Invalid(alloc::format!(
                "clean has {} tokens and corrupted {}: they must have the same length",
                clean.len(),
                corrupted.len()
            )));
        }
        for (what, id) in [("answer", answer), ("against", against)] {
            if id as usize >= hp.n_vocab {
                return Err(ModelError::Invalid(alloc::format!(
                    "{what} {id} is not a token id (n_vocab {})",
                    hp.n_vocab
                )));
            }
        }
        let point = match at {
            "resid_pre" => "hook_resid_pre",
            "attn_out" => "hook_attn_out",
            "mlp_out" => "hook_mlp_out",
            "z" => "attn.hook_z",
            _ => {
                return Err(ModelError::Invalid(alloc::format!(
                    "at must be 'resid_pre', 'attn_out', 'mlp_out' or 'z', got '{at}'"
                )))
            }
        };
        self.check_tokens(corrupted)?;
        if attribution {
            self.check_tokens(clean)?;
            return self.patch_attribution(clean, corrupted, point, at, answer, against).await;
        }
        let (n, n_vocab, d) = (clean.len(), hp.n_vocab, hp.n_embd);
        let metric = |last: &[f32]| last[answer as usize] - last[against as usize];
        let capture: Vec<String> = (0..hp.n_layer).map(|l| alloc::format!("blocks.{l}.{point}")).collect();
        let clean_run = self.run(clean, &capture, &[]).await?;
        let clean_diff = metric(&clean_run.logits[(n - 1) * n_vocab..]);
        // The corrupted run fills the cache (its K/V at every position, unhooked) and gives the
        // residual entering each block, where each cell's pass starts.
        let resid_names: Vec<String> = (0..hp.n_layer).map(|l| alloc::format!("blocks.{l}.hook_resid_pre")).collect();
        let corr = self.run(corrupted, &resid_names, &[]).await?;
        let corrupted_diff = metric(&corr.logits[(n - 1) * n_vocab..]);
        let resid = |l: usize| &corr.cache[l].data; // [pos, d_model]
        let value = |l: usize| &clean_run.cache[l].data;
        let mut cells;
        let shape;
        if at == "z" {
            let (h, hd) = (hp.n_head, hp.head_dim());
            shape = alloc::vec![hp.n_layer, h];
            cells = alloc::vec![0f32; hp.n_layer * h];
            for l in 0..hp.n_layer {
                for head in 0..h {
                    // [pos, head, d_head]: the head's values at every position.
                    let v: Vec<f32> =
                        (0..n).flat_map(|p| value(l)[(p * h + head) * hd..][..hd].iter().copied()).collect();
                    let hook = Hook {
                        at: capture[l].clone(),
                        op: super::hooks::HookOp::Set,
                        head: Some(super::hooks::Sel::One(head as i64)),
                        pos: None,
                        index: None,
                        value: Some(super::hooks::HookValue::Array(v)),
                    };
                    let batch = Batch {
                        hooks: core::slice::from_ref(&hook),
                        start: Some(Start { layer: l, resid: resid(l) }),
                        ..Batch::last(corrupted, 0)
                    };
                    self.checkpoint().await?;
                    cells[l * h + head] = metric(&self.model.decode(batch).await?.logits);
                }
            }
        } else {
            shape = alloc::vec![hp.n_layer, n];
            cells = alloc::vec![0f32; hp.n_layer * n];
            let mut patched = Vec::new();
            for p in (0..n).rev() {
                for l in 0..hp.n_layer {
                    let clean_row = &value(l)[p * d..(p + 1) * d];
                    self.checkpoint().await?;
                    let out = if at == "resid_pre" {
                        // The patched residual is the start itself: no hook needed.
                        patched.clear();
                        patched.extend_from_slice(clean_row);
                        patched.extend_from_slice(&resid(l)[(p + 1) * d..]);
                        let start = Some(Start { layer: l, resid: &patched });
                        self.model.decode(Batch { start, ..Batch::last(&corrupted[p..], p) }).await?
                    } else {
                        let hook = Hook {
                            at: capture[l].clone(),
                            op: super::hooks::HookOp::Set,
                            head: None,
                            pos: Some(super::hooks::Sel::One(0)),
                            index: None,
                            value: Some(super::hooks::HookValue::Array(clean_row.to_vec())),
                        };
                        let batch = Batch {
                            hooks: core::slice::from_ref(&hook),
                            start: Some(Start { layer: l, resid: &resid(l)[p * d..] }),
                            ..Batch::last(&corrupted[p..], p)
                        };
                        self.model.decode(batch).await?
                    };
                    cells[l * n + p] = metric(&out.logits);
                }
            }
        }
        // The cache's last positions now hold patched K/V.
        self.clear_cache();
        Ok(Patch { shape, cells, clean_diff, corrupted_diff })
    }

    /// Direct logit attribution at `pos` (negative counts from the end): each component's
    /// contribution to `logit[answer] − logit[against]` through the final LayerNorm's cached
    /// scale at that position (centred, divided by `ln_final.hook_scale`, dotted with
    /// `ln_final.w ⊙ (W_U[:, answer] − W_U[:, against])`), as TransformerLens's
    /// `stack_head_results(apply_ln=True)` / `decompose_resid(apply_ln=True)`. The parts sum
    /// to `total`, the logit difference.
    pub async fn attribute(
        &mut self,
        tokens: &[u32],
        answer: u32,
        against: u32,
        pos: i64,
    ) -> Result<Attribution, ModelError> {
        let hp = self.model.hparams.clone();
        for (what, id) in [("answer", answer), ("against", against)] {
            if id as usize >= hp.n_vocab {
                return Err(ModelError::Invalid(alloc::format!(
                    "{what} {id} is not a token id (n_vocab {})",
                    hp.n_vocab
                )));
            }
        }
        self.check_tokens(tokens)?;
        let n = tokens.len() as i64;
        let p = if pos < 0 { pos + n } else { pos };
        if p < 0 || p >= n {
            return Err(ModelError::Invalid(alloc::format!("pos {pos} is out of range for {n} tokens")));
        }
        let p = p as usize;
        let capture: Vec<String> =
            ["hook_embed", "hook_pos_embed", "blocks.*.attn.hook_z", "blocks.*.hook_mlp_out", "ln_final.hook_scale"]
                .iter()
                .map(|s| String::from(*s))
                .collect();
        let run = self.run(tokens, &capture, &[]).await?;
        let get = |name: &str| &run.cache.iter().find(|v| v.name == name).expect("captured").data;
        let (e, h, hd, nl) = (hp.n_embd, hp.n_head, hp.head_dim(), hp.n_layer);
        let at = |v: &Vec<f32>| v[p * e..(p + 1) * e].to_vec();
        // Z: one column per (layer, head), the head's z at p and zeros elsewhere: W_O times it is
        // the head's result (TransformerLens's hook_result, without b_O).
        let mut z = alloc::vec![0f32; e * h * nl];
        for l in 0..nl {
            let zl = get(&alloc::format!("blocks.{l}.attn.hook_z"));
            for head in 0..h {
                let col = (l * h + head) * e;
                z[col + head * hd..col + (head + 1) * hd].copy_from_slice(&zl[(p * h + head) * hd..][..hd]);
            }
        }
        self.checkpoint().await?;
        let ids: [i32; 2] = [answer as i32, against as i32];
        let zb = bytemuck::cast_slice(&z).to_vec();
        let idb = bytemuck::cast_slice(&ids).to_vec();
        let out = self
            .model
            .run_graph(|ctx, w| {
                let zt = ctx.new_tensor_2d(crate::types::GgmlType::F32, e as i64, (h * nl) as i64);
                let it = ctx.new_tensor_1d(crate::types::GgmlType::I32, 2);
                let mut outs = Vec::new();
                for (l, ly) in w.layers.iter().enumerate() {
                    let zl = ctx.view_2d(&zt, e as i64, h as i64, zt.nb[1], l * h * zt.nb[1]);
                    // W_O·z per head, plus a LoRA adapter's (linear too: the heads still sum to the output).
                    let lora = w.lora.as_ref();
                    outs.push(super::lora::lora_mm(ctx, &ly.attn_out_w, &zl, lora, l, super::lora::Target::AttnOutput)); // [e, H]
                    outs.push(ctx.cont(&ly.attn_out_b));
                }
                outs.push(ctx.get_rows(&w.output, &it)); // [e, 2]
                outs.push(ctx.cont(&w.output_norm_w));
                outs.push(ctx.cont(&w.output_norm_b));
                (alloc::vec![(zt, zb), (it, idb)], outs)
            })
            .await?;
        let u = &out[2 * nl];
        let (lnw, lnb) = (&out[2 * nl + 1], &out[2 * nl + 2]);
        let diff: Vec<f64> = (0..e).map(|i| u[i] as f64 - u[e + i] as f64).collect();
        let dir: Vec<f64> = (0..e).map(|i| lnw[i] as f64 * diff[i]).collect();
        let scale = get("ln_final.hook_scale")[p] as f64;
        let contrib = |c: &[f32]| -> f32 {
            let mean = c.iter().map(|&x| x as f64).sum::<f64>() / e as f64;
            (c.iter().zip(&dir).map(|(&x, d)| (x as f64 - mean) * d).sum::<f64>() / scale) as f32
        };
        let mut r = Attribution {
            embed: contrib(&at(get("hook_embed"))),
            pos_embed: contrib(&at(get("hook_pos_embed"))),
            heads: Vec::with_capacity(nl * h),
            attn_bias: Vec::with_capacity(nl),
            mlps: Vec::with_capacity(nl),
            ln_bias: lnb.iter().zip(&diff).map(|(&b, d)| b as f64 * d).sum::<f64>() as f32,
            total: 0.0,
        };
        for l in 0..nl {
            let res = &out[2 * l];
            for head in 0..h {
                r.heads.push(contrib(&res[head * e..(head + 1) * e]));
            }
            r.attn_bias.push(contrib(&out[2 * l + 1]));
            r.mlps.push(contrib(&at(get(&alloc::format!("blocks.{l}.hook_mlp_out")))));
        }
        r.total = r.embed + r.pos_embed + r.ln_bias + r.heads.iter().chain(&r.attn_bias).chain(&r.mlps).sum::<f32>();
        Ok(r)
    }

    /// An SAE's features of `tokens`: the activations at its hook point (one pass from
    /// position 0), encoded.
    #[cfg(feature = "std")]
    pub async fn sae_encode(
        &mut self,
        tokens: &[u32],
        sae: &super::sae::Sae,
        top_k: usize,
    ) -> Result<super::sae::Encoded, ModelError> {
        let run = self.run(tokens, core::slice::from_ref(&sae.hook_name), &[]).await?;
        let x = &run.cache.first().expect("one capture").data;
        let d = x.len() / tokens.len();
        if d != sae.d_in {
            return Err(ModelError::Invalid(alloc::format!(
                "the SAE's d_in is {} but its hook '{}' has {d} values per position",
                sae.d_in,
                sae.hook_name
            )));
        }
        let mut r = sae.encode(x, top_k)?;
        r.tokens = tokens.to_vec();
        Ok(r)
    }
}
