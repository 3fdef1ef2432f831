//! TransformerLens's hook points (`transformer-lens` 3.x `HookedTransformer` for GPT-2, loaded
//! without weight processing) as aliases of the GPT-2 graph's named nodes.
//!
//! Every shape below is TransformerLens's without the batch axis, row-major; the graph node's
//! ggml `ne` (fastest axis first) is that shape reversed, except where noted. `N` = positions of
//! the run, `L` = positions attended to (n_past + N; N for a run from position 0), `H` = heads,
//! `hd` = d_head, `l` = the block.
//!
//! | TransformerLens name | TL shape | graph node | node ne |
//! |---|---|---|---|
//! | `hook_embed` | [pos, d_model] | `inp_embd` | [n_embd, N] |
//! | `hook_pos_embed` | [pos, d_model] | `inp_pos_embd` | [n_embd, N] |
//! | `blocks.l.hook_resid_pre` | [pos, d_model] | `inpL` (l = 0), `l{l-1}.l_out` | [n_embd, N] |
//! | `blocks.l.ln1.hook_scale` | [pos, 1] | derived from `hook_resid_pre` (below) | [1, N] |
//! | `blocks.l.ln1.hook_normalized` | [pos, d_model] | `l{l}.norm` | [n_embd, N] |
//! | `blocks.l.attn.hook_q` / `hook_k` / `hook_v` | [pos, head, d_head] | `l{l}.q_heads` / `k_heads` / `v_heads` | [hd, H, N] |
//! | `blocks.l.attn.hook_attn_scores` | [head, query, key] | `l{l}.kq_masked` (scaled by 1/√hd, masked −∞) | [L, N, H] |
//! | `blocks.l.attn.hook_pattern` | [head, query, key] | `l{l}.kq_soft_max` | [L, N, H] |
//! | `blocks.l.attn.hook_z` | [pos, head, d_head] | `l{l}.kqv_merged_cont` | [n_embd, N], n_embd = H·hd with hd fastest: the same bytes as [hd, H, N] |
//! | `blocks.l.hook_attn_out` | [pos, d_model] | `l{l}.kqv_out` | [n_embd, N] |
//! | `blocks.l.hook_resid_mid` | [pos, d_model] | `l{l}.ffn_inp` | [n_embd, N] |
//! | `blocks.l.ln2.hook_scale` | [pos, 1] | derived from `hook_resid_mid` | [1, N] |
//! | `blocks.l.ln2.hook_normalized` | [pos, d_model] | `l{l}.norm2` | [n_embd, N] |
//! | `blocks.l.mlp.hook_pre` | [pos, d_mlp] | `l{l}.ffn_up_b` | [n_ff, N] |
//! | `blocks.l.mlp.hook_post` | [pos, d_mlp] | `l{l}.ffn_gelu` | [n_ff, N] |
//! | `blocks.l.hook_mlp_out` | [pos, d_model] | `l{l}.ffn_out` | [n_embd, N] |
//! | `blocks.l.hook_resid_post` | [pos, d_model] | `l{l}.l_out` | [n_embd, N] |
//! | `ln_final.hook_scale` | [pos, 1] | derived from the last `l_out` | [1, N] |
//! | `ln_final.hook_normalized` | [pos, d_model] | `out_norm` (the head's rows: every row only when the head runs on all of them) | [n_embd, n_out] |
//!
//! `hook_normalized` is (x − mean)/scale before the LayerNorm's weight and bias (ggml's `norm`);
//! `hook_scale` is √(var + eps). ggml's fused `norm` does not expose the scale and the op set has
//! no sqrt/division to compute it in the graph, so a `hook_scale` capture is computed from the
//! LayerNorm's input on the host, exactly as TransformerLens defines it; it is a capture only
//! (an intervention on it would need a graph op).
//!
//! Cost: the hook points are nodes the graph computes anyway, except the per-head K and V
//! (`k_heads`, `v_heads`): two copies of n_embd × N floats per layer, on the path into the KV
//! cache so that a hook on them is what the cache stores (WebGPU: 21 dispatches per layer
//! instead of 19). `ggweb bench` on the 124M shape (Q8_0, 1 thread, tg64, median of 5
//! interleaved runs, 2026-12-02): 59.9 tokens per CPU second before, 59.5 after, within the
//! run-to-run spread (±8%).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::gpt2::{Hparams, TapValue};
use super::ModelError;

/// Where a hook point's values come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A graph node, by its ggml name.
    Node(String),
    /// √(var + eps) of each column of this node (a LayerNorm's input).
    LnScale(String),
}

/// One TransformerLens hook point.
#[derive(Clone, Debug, PartialEq)]
pub struct HookPoint {
    /// TransformerLens's name.
    pub name: String,
    pub source: Source,
}

/// Whether `name` is in TransformerLens's namespace (no graph node's name is).
pub fn is_tl_name(name: &str) -> bool {
    name.starts_with("hook_") || name.starts_with("blocks.") || name.starts_with("ln_final.")
}

/// Every hook point of the model, in TransformerLens's forward order.
pub fn hook_names(hp: &Hparams) -> Vec<String> {
    let mut v = alloc::vec![String::from("hook_embed"), String::from("hook_pos_embed")];
    for l in 0..hp.n_layer {
        for s in BLOCK_HOOKS {
            v.push(format!("blocks.{l}.{s}"));
        }
    }
    v.push(String::from("ln_final.hook_scale"));
    v.push(String::from("ln_final.hook_normalized"));
    v
}

const BLOCK_HOOKS: [&str; 17] = [
    "hook_resid_pre",
    "ln1.hook_scale",
    "ln1.hook_normalized",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "ln2.hook_scale",
    "ln2.hook_normalized",
    "mlp.hook_pre",
    "mlp.hook_post",
    "hook_mlp_out",
    "hook_resid_post",
];

/// The residual stream entering block `l` (`l == n_layer`: leaving the last block).
fn resid(l: usize) -> String {
    if l == 0 {
        String::from("inpL")
    } else {
        format!("l{}.l_out", l - 1)
    }
}

/// A TransformerLens name's hook point, or `invalid` naming it.
pub fn hook_point(name: &str, hp: &Hparams) -> Result<HookPoint, ModelError> {
    let bad = || {
        ModelError::Invalid(format!(
            "no hook point named '{name}' (TransformerLens names: hook_embed, blocks.0.hook_resid_pre .. blocks.{}.hook_resid_post, ln_final.hook_normalized, ...)",
            hp.n_layer.saturating_sub(1)
        ))
    };
    let node = |s: String| Ok(HookPoint { name: String::from(name), source: Source::Node(s) });
    let scale = |s: String| Ok(HookPoint { name: String::from(name), source: Source::LnScale(s) });
    match name {
        "hook_embed" => return node(String::from("inp_embd")),
        "hook_pos_embed" => return node(String::from("inp_pos_embd")),
        "ln_final.hook_scale" => return scale(resid(hp.n_layer)),
        "ln_final.hook_normalized" => return node(String::from("out_norm")),
        _ => {}
    }
    let rest = name.strip_prefix("blocks.").ok_or_else(bad)?;
    let (l, hook) = rest.split_once('.').ok_or_else(bad)?;
    // Decimal digits only, no sign or leading zero ("01" is not TransformerLens's name).
    if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) || (l.len() > 1 && l.starts_with('0')) {
        return Err(bad());
    }
    let l: usize = l.parse().map_err(|_| bad())?;
    if l >= hp.n_layer {
        return Err(bad());
    }
    let step = match hook {
        "hook_resid_pre" => return node(resid(l)),
        "ln1.hook_scale" => return scale(resid(l)),
        "ln2.hook_scale" => return scale(format!("l{l}.ffn_inp")),
        "ln1.hook_normalized" => "norm",
        "attn.hook_q" => "q_heads",
        "attn.hook_k" => "k_heads",
        "attn.hook_v" => "v_heads",
        "attn.hook_attn_scores" => "kq_masked",
        "attn.hook_pattern" => "kq_soft_max",
        "attn.hook_z" => "kqv_merged_cont",
        "hook_attn_out" => "kqv_out",
        "hook_resid_mid" => "ffn_inp",
        "ln2.hook_normalized" => "norm2",
        "mlp.hook_pre" => "ffn_up_b",
        "mlp.hook_post" => "ffn_gelu",
        "hook_mlp_out" => "ffn_out",
        "hook_resid_post" => "l_out",
        _ => return Err(bad()),
    };
    node(format!("l{l}.{step}"))
}

/// The TransformerLens names among a trace's taps.
#[derive(Clone, Debug, Default)]
pub struct TlTaps {
    pub points: Vec<HookPoint>,
    /// The graph nodes the points read. Includes `result_norm` when `ln_final.hook_normalized`
    /// is asked for: a tap in the head makes the trace run the head on every row.
    pub nodes: Vec<String>,
    n_head: i64,
}

/// Splits `taps` into the graph's own names (kept as they are, in order) and TransformerLens's;
/// a TransformerLens name that is not a hook point of this model is `invalid`.
pub fn split_taps(taps: &[String], hp: &Hparams) -> Result<(Vec<String>, TlTaps), ModelError> {
    let mut graph = Vec::new();
    let mut tl = TlTaps { n_head: hp.n_head.max(1) as i64, ..TlTaps::default() };
    for t in taps {
        if !is_tl_name(t) {
            graph.push(t.clone());
            continue;
        }
        let p = hook_point(t, hp)?;
        let node = match &p.source {
            Source::Node(n) | Source::LnScale(n) => n.clone(),
        };
        if node == "out_norm" && !tl.nodes.iter().any(|n| n == "result_norm") {
            tl.nodes.push(String::from("result_norm"));
        }
        if !tl.nodes.contains(&node) {
            tl.nodes.push(node);
        }
        if !tl.points.contains(&p) {
            tl.points.push(p);
        }
    }
    Ok((graph, tl))
}

impl TlTaps {
    /// The hook points' values, named by TransformerLens's names, with TransformerLens's shape
    /// (`ne` = that shape reversed), from the traced graph nodes.
    pub fn values(&self, traced: &[TapValue], eps: f32) -> Vec<TapValue> {
        let mut out = Vec::new();
        for p in &self.points {
            let (Source::Node(n) | Source::LnScale(n)) = &p.source;
            let Some(v) = traced.iter().find(|v| &v.name == n) else { continue };
            let mut v = v.clone();
            if let Source::LnScale(_) = p.source {
                v.data = ln_scale(&v.data, v.ne[0] as usize, eps);
                v.ne = [1, v.ne[1], 1, 1];
            } else if p.name.ends_with("attn.hook_z") {
                // [n_embd, N] → [hd, H, N]: the same bytes.
                v.ne = [v.ne[0] / self.n_head, self.n_head, v.ne[1], 1];
            }
            v.name = p.name.clone();
            out.push(v);
        }
        out
    }
}

/// TransformerLens's LayerNorm scale of each column of `x` ([d, N], d fastest):
/// √(mean((x − mean(x))²) + eps), in f64 then rounded.
pub fn ln_scale(x: &[f32], d: usize, eps: f32) -> Vec<f32> {
    x.chunks_exact(d.max(1))
        .map(|c| {
            let mean = c.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = c.iter().map(|&v| (v as f64 - mean) * (v as f64 - mean)).sum::<f64>() / d as f64;
            libm::sqrt(var + eps as f64) as f32
        })
        .collect()
}
