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
//! LayerNorm's input on the host, exactly as TransformerLens defines it. A hook may change it
//! by `scale` or `zero` only: TransformerLens then divides by the hooked scale, and
//! x/(s·v) = (x/s)·(1/v) is a hook on the `hook_normalized` node beside it (×∞ for `zero`:
//! TransformerLens's ±∞/NaN of x/0). `add` and `set` (x/(s + v), x/v) need s or x − mean
//! in the graph and are refused (`invalid`).
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

use super::hparams::Hparams;
use super::ModelError;

/// One tapped node: its name, ggml shape (`ne[0]` fastest) and values in memory order.
/// Serializes as the API's `{ shape, data }` ([`TapValue::shape`], a `Float32Array` in the
/// browser); a list of them as `{ [name]: { shape, data } }` through [`by_name`].
#[derive(Clone, Debug)]
pub struct TapValue {
    pub name: String,
    pub ne: [i64; 4],
    pub data: Vec<f32>,
}

impl TapValue {
    /// TransformerLens's shape: `ne` reversed (outermost first), leading 1s dropped.
    pub fn shape(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.ne.iter().rev().map(|&x| x as u32).collect();
        while v.len() > 1 && v[0] == 1 {
            v.remove(0);
        }
        v
    }
}

#[cfg(feature = "std")]
impl serde::Serialize for TapValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct Data<'a>(&'a [f32]);
        impl serde::Serialize for Data<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                crate::typed::f32s(self.0, s)
            }
        }
        let mut o = s.serialize_struct("TapValue", 2)?;
        o.serialize_field("shape", &self.shape())?;
        o.serialize_field("data", &Data(&self.data))?;
        o.end()
    }
}

/// Tapped values as the API's `{ [name]: { shape, data } }` (in name order, as a JS object
/// built from them lists its keys).
#[cfg(feature = "std")]
pub fn by_name<S: serde::Serializer>(v: &[TapValue], s: S) -> Result<S::Ok, S::Error> {
    let mut sorted: Vec<&TapValue> = v.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    s.collect_map(sorted.into_iter().map(|t| (t.name.as_str(), t)))
}

/// [`by_name`] of a list that is there (`skip_serializing_if` leaves out the None).
#[cfg(feature = "std")]
pub fn by_name_some<S: serde::Serializer>(v: &Option<Vec<TapValue>>, s: S) -> Result<S::Ok, S::Error> {
    by_name(v.as_deref().unwrap_or(&[]), s)
}

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

/// Hooks of a pass that starts at block `layer` ([`super::context::Start`]): every one must be
/// on that block or later (or on `ln_final`); one on an earlier point is `invalid`, naming it.
pub fn check_after(hooks: &[Hook], layer: usize) -> Result<(), ModelError> {
    for h in hooks {
        let block = match h.at.strip_prefix("blocks.") {
            Some(rest) => rest.split('.').next().and_then(|l| l.parse::<usize>().ok()),
            None if h.at.starts_with("ln_final.") => continue,
            None => None, // hook_embed, hook_pos_embed, or no hook point at all
        };
        if block.is_none_or(|l| l < layer) {
            return Err(ModelError::Invalid(format!(
                "hook at '{}': this pass starts at block {layer} from a given residual, so only hook points of \
                 blocks {layer}.. and ln_final can be hooked",
                h.at
            )));
        }
    }
    Ok(())
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

/// A selection along one axis: one index or several (`pos` may count from the end).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(untagged))]
pub enum Sel {
    One(i64),
    Many(Vec<i64>),
}

/// A hook's value: a number, or an array (see [`Hook`]).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(untagged))]
pub enum HookValue {
    Number(f32),
    Array(Vec<f32>),
}

/// What a hook does to its slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(rename_all = "lowercase"))]
pub enum HookOp {
    /// The slice becomes 0.
    Zero,
    /// Multiplied by `value` (a number).
    Scale,
    /// Plus `value`: a number, or the slice at one position (the pos axis dropped), added at
    /// every selected position.
    Add,
    /// Replaced by `value`: the whole slice, row-major (activation patching).
    Set,
}

impl HookOp {
    /// The JS name.
    pub fn name(self) -> &'static str {
        match self {
            HookOp::Zero => "zero",
            HookOp::Scale => "scale",
            HookOp::Add => "add",
            HookOp::Set => "set",
        }
    }
}

/// An intervention at a TransformerLens hook point, as a forward hook that returns the
/// modified tensor: `{ at, op, head?, pos?, index?, value? }` (issue 24's contract). The
/// slice is the product of the selections along the head axis, the position axis (the query
/// axis of `hook_attn_scores`/`hook_pattern`) and the last axis; an axis not selected is whole.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "std", serde(deny_unknown_fields))]
pub struct Hook {
    pub at: String,
    pub op: HookOp,
    #[cfg_attr(feature = "std", serde(default, skip_serializing_if = "Option::is_none"))]
    pub head: Option<Sel>,
    #[cfg_attr(feature = "std", serde(default, skip_serializing_if = "Option::is_none"))]
    pub pos: Option<Sel>,
    #[cfg_attr(feature = "std", serde(default, skip_serializing_if = "Option::is_none"))]
    pub index: Option<Sel>,
    #[cfg_attr(feature = "std", serde(default, skip_serializing_if = "Option::is_none"))]
    pub value: Option<HookValue>,
}

/// The hooks of one graph node, composed into one elementwise affine map `x·a + b` (every
/// op is affine in the value, so any sequence of them is): the graph computes
/// `add(mul(x, a), b)` there and every later node reads that. For `hook_attn_scores` the map
/// applies before the causal mask, and `m` is the mask added after it (−∞ where a key is in
/// the future, 0 elsewhere, and 0 where a hook gave a masked entry a fixed value: there
/// TransformerLens's hook overwrote the −∞).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeHook {
    /// The graph node, by its ggml name.
    pub node: String,
    /// TransformerLens's shape of the node for this run (row-major; the node's memory order).
    pub shape: Vec<usize>,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub m: Option<Vec<f32>>,
}

/// TransformerLens's shape of a hook point for a run of `n` tokens after `n_past`, and its
/// (head, pos) axes; the index axis is the last.
pub(crate) fn tl_shape(hook: &str, hp: &Hparams, n: usize, n_past: usize) -> (Vec<usize>, Option<usize>, usize) {
    let (d, h, hd) = (hp.n_embd, hp.n_head, hp.head_dim());
    if hook.ends_with("attn.hook_attn_scores") || hook.ends_with("attn.hook_pattern") {
        (alloc::vec![h, n, n_past + n], Some(0), 1)
    } else if ["attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z"].iter().any(|s| hook.ends_with(s)) {
        (alloc::vec![n, h, hd], Some(1), 0)
    } else if hook.ends_with("mlp.hook_pre") || hook.ends_with("mlp.hook_post") {
        (alloc::vec![n, hp.n_ff], None, 0)
    } else {
        (alloc::vec![n, d], None, 0)
    }
}

/// How many values a hook point holds per position (its TransformerLens shape past the
/// position axis), or None where that depends on the run's length (attention scores and
/// pattern, whose position axis is not the first).
pub fn per_position(hook: &str, hp: &Hparams) -> Option<usize> {
    if hook.ends_with("hook_scale") {
        return Some(1);
    }
    let (shape, _, pos) = tl_shape(hook, hp, 1, 0);
    (pos == 0).then(|| shape[1..].iter().product())
}

/// Resolves a selection along an axis of `len`: indices in the order given, each at most once
/// (so a slice never holds more values than its node: a selection is sized by its axis, not
/// by the caller's list, before anything is allocated).
fn resolve(sel: &Option<Sel>, len: usize, negative_ok: bool, what: &str, at: &str) -> Result<Vec<usize>, ModelError> {
    let Some(sel) = sel else { return Ok((0..len).collect()) };
    let raw: &[i64] = match sel {
        Sel::One(i) => core::slice::from_ref(i),
        Sel::Many(v) => v,
    };
    if raw.is_empty() {
        return Err(ModelError::Invalid(format!("hook at '{at}': {what} selects nothing (an empty list)")));
    }
    if raw.len() > len {
        return Err(ModelError::Invalid(format!(
            "hook at '{at}': {what} lists {} indices, the axis has {len} (each index at most once)",
            raw.len()
        )));
    }
    let mut seen = alloc::vec![false; len];
    raw.iter()
        .map(|&i| {
            let j = if negative_ok && i < 0 { i.saturating_add(len as i64) } else { i };
            if j < 0 || j >= len as i64 {
                return Err(ModelError::Invalid(format!("hook at '{at}': {what} {i} is out of range (0..{len})")));
            }
            if core::mem::replace(&mut seen[j as usize], true) {
                return Err(ModelError::Invalid(format!("hook at '{at}': {what} {i} is selected twice")));
            }
            Ok(j as usize)
        })
        .collect()
}

/// The most values all the hooks of one run may select together (each hook's slice, summed):
/// planning them is a pass over each slice, so this bounds a run's hook work at a fraction of
/// a second whatever the caller sends (2^28: 22 hooks each over the whole attention pattern of
/// GPT-2 small at 1024 positions).
pub const MAX_HOOKED_VALUES: u64 = 1 << 28;

/// One hook of [`plan`], checked: its node, the node's shape for the run, its selection per axis.
struct Checked<'h> {
    order: usize,
    hook: &'h Hook,
    /// A LayerNorm scale hook, acting on the normalized node beside it.
    scale_hook: bool,
    node: String,
    shape: Vec<usize>,
    sel: Vec<Vec<usize>>,
    pos_ax: usize,
}

impl Checked<'_> {
    /// Values in the slice.
    fn slice(&self) -> usize {
        self.sel.iter().map(|s| s.len()).product()
    }

    /// Calls `f(offset, rank, rank_at_one_position)` for every element of the slice, in
    /// row-major order: its offset in the node, its rank within the slice, and its rank with
    /// the position axis dropped.
    fn for_each(&self, mut f: impl FnMut(usize, usize, usize)) {
        let k = self.shape.len();
        let strides: Vec<usize> = (0..k).map(|a| self.shape[a + 1..].iter().product()).collect();
        let mut idx = alloc::vec![0usize; k];
        for rank in 0..self.slice() {
            let off: usize = (0..k).map(|a| self.sel[a][idx[a]] * strides[a]).sum();
            let mut r = 0;
            for a in (0..k).filter(|&a| a != self.pos_ax) {
                r = r * self.sel[a].len() + idx[a];
            }
            f(off, rank, r);
            for a in (0..k).rev() {
                idx[a] += 1;
                if idx[a] < self.sel[a].len() {
                    break;
                }
                idx[a] = 0;
            }
        }
    }
}

/// Checks one hook of [`plan`]: the name, the op for a LayerNorm scale, its axes and ranges,
/// the value's kind and length (`invalid` naming it). Allocates only per axis.
fn check_hook<'h>(
    h: &'h Hook,
    order: &[String],
    hp: &Hparams,
    n: usize,
    n_past: usize,
    allow_pos: bool,
) -> Result<Checked<'h>, ModelError> {
    let p = hook_point(&h.at, hp)?;
    if let Source::LnScale(_) = p.source {
        if !matches!(h.op, HookOp::Scale | HookOp::Zero) {
            return Err(ModelError::Invalid(format!(
                "hook at '{}': a LayerNorm scale can be captured, and changed only by 'scale' or 'zero' \
                 (the normalized values are divided by it); '{}' would need the scale itself in the graph",
                h.at,
                h.op.name()
            )));
        }
        if h.head.is_some() {
            return Err(ModelError::Invalid(format!("hook at '{}': it has no head axis", h.at)));
        }
    }
    if h.pos.is_some() && !allow_pos {
        return Err(ModelError::Invalid(format!(
            "hook at '{}': 'pos' is not allowed here (generate and score apply hooks at every evaluated position)",
            h.at
        )));
    }
    // A LayerNorm scale hook (scale or zero, checked above) acts on the normalized node
    // beside it, which comes later in TransformerLens's order: x/(s·v) = (x/s)·(1/v).
    let (at, scale_hook) = match ln_normalized(&h.at) {
        Some(n) => (n, true),
        None => (h.at.clone(), false),
    };
    let Source::Node(node) = hook_point(&at, hp)?.source else { unreachable!("a LayerNorm's normalized node") };
    let (shape, head_ax, pos_ax) = tl_shape(&at, hp, n, n_past);
    let last = shape.len() - 1;
    let mut sel: Vec<Vec<usize>> = shape.iter().map(|&d| (0..d).collect()).collect();
    if h.head.is_some() {
        let ax = head_ax.ok_or_else(|| ModelError::Invalid(format!("hook at '{}': it has no head axis", h.at)))?;
        sel[ax] = resolve(&h.head, shape[ax], false, "head", &h.at)?;
    }
    sel[pos_ax] = resolve(&h.pos, shape[pos_ax], true, "pos", &h.at)?;
    if scale_hook {
        // [pos, 1]: index 0 is the whole row of the normalized node.
        resolve(&h.index, 1, false, "index", &h.at)?;
    } else if h.index.is_some() {
        sel[last] = resolve(&h.index, shape[last], false, "index", &h.at)?;
    }
    let c = Checked {
        order: order.iter().position(|o| o == &h.at).unwrap_or(usize::MAX),
        hook: h,
        scale_hook,
        node,
        shape,
        sel,
        pos_ax,
    };
    let (slice, per_pos) = (c.slice(), c.slice() / c.sel[pos_ax].len());
    let number = |what: &str| match &h.value {
        Some(HookValue::Number(_)) => Ok(()),
        _ => Err(ModelError::Invalid(format!("hook at '{}': '{what}' needs a number 'value'", h.at))),
    };
    match (h.op, &h.value) {
        (HookOp::Zero, Some(_)) => {
            return Err(ModelError::Invalid(format!("hook at '{}': 'zero' takes no 'value'", h.at)))
        }
        (HookOp::Zero, None) => {}
        (HookOp::Scale, _) => number("scale")?,
        (HookOp::Add, Some(HookValue::Number(_))) => {}
        (HookOp::Add, Some(HookValue::Array(v))) if v.len() == per_pos => {}
        (HookOp::Add, Some(HookValue::Array(v))) => {
            return Err(ModelError::Invalid(format!(
                "hook at '{}': an 'add' value has {} numbers, the slice at one position has {per_pos}",
                h.at,
                v.len()
            )))
        }
        (HookOp::Add, None) => return Err(ModelError::Invalid(format!("hook at '{}': 'add' needs a 'value'", h.at))),
        (HookOp::Set, Some(HookValue::Array(v))) if v.len() == slice => {}
        (HookOp::Set, Some(HookValue::Array(v))) => {
            return Err(ModelError::Invalid(format!(
                "hook at '{}': a 'set' value has {} numbers, the slice has {slice}",
                h.at,
                v.len()
            )))
        }
        (HookOp::Set, _) => {
            return Err(ModelError::Invalid(format!("hook at '{}': 'set' needs an array 'value'", h.at)))
        }
    }
    Ok(c)
}

/// Plans `hooks` for a run of `n` tokens after `n_past`: checks every hook (the name, its
/// axes, ranges, the value's kind and length: `invalid` naming it) and composes each node's
/// hooks, in TransformerLens's forward order and then the array's, into one [`NodeHook`].
/// `allow_pos`: false where hooks apply at every evaluated position (generation). Every hook
/// is checked, and the values they select counted against [`MAX_HOOKED_VALUES`], before any
/// node's map is allocated.
pub fn plan(
    hooks: &[Hook],
    hp: &Hparams,
    n: usize,
    n_past: usize,
    allow_pos: bool,
) -> Result<Vec<NodeHook>, ModelError> {
    let order = hook_names(hp);
    let mut checked: Vec<Checked> = Vec::new();
    let mut total: u64 = 0;
    for h in hooks {
        let c = check_hook(h, &order, hp, n, n_past, allow_pos)?;
        total = total.saturating_add(c.slice() as u64);
        if total > MAX_HOOKED_VALUES {
            return Err(ModelError::Invalid(format!(
                "hooks: the {} hooks select more than {MAX_HOOKED_VALUES} values together (at hook {}, '{}'): \
                 select fewer positions, heads or indices",
                hooks.len(),
                checked.len(),
                h.at
            )));
        }
        checked.push(c);
    }
    checked.sort_by_key(|c| c.order);
    // Each hooked node's map (a, b and the scores' mask) is node-sized, here and again as the
    // graph's inputs: sized against the memory left before any is allocated.
    let mut maps: Vec<(&str, u64)> = Vec::new();
    for c in &checked {
        if !maps.iter().any(|(n, _)| *n == c.node) {
            let per = if c.hook.at.ends_with("attn.hook_attn_scores") { 12 } else { 8 };
            maps.push((&c.node, c.shape.iter().map(|&d| d as u64).product::<u64>() * per));
        }
    }
    let needed = 2 * maps.iter().map(|(_, b)| b).sum::<u64>();
    if let Some(left) = crate::backend::host::address_space_left().filter(|&l| needed > l) {
        return Err(ModelError::RunTooLarge { what: format!("the maps of {} hooked nodes", maps.len()), needed, left });
    }
    let mut out: Vec<NodeHook> = Vec::new();
    for c in &checked {
        let h = c.hook;
        let i = match out.iter().position(|o| o.node == c.node) {
            Some(i) => i,
            None => {
                let len: usize = c.shape.iter().product();
                let m = h.at.ends_with("attn.hook_attn_scores").then(|| {
                    // [head, query, key]: key k of query q is in the future past n_past + q.
                    let (nq, nk) = (c.shape[1], c.shape[2]);
                    (0..len).map(|e| if (e % nk) > n_past + (e / nk) % nq { f32::NEG_INFINITY } else { 0.0 }).collect()
                });
                out.push(NodeHook {
                    node: c.node.clone(),
                    shape: c.shape.clone(),
                    a: alloc::vec![1.0; len],
                    b: alloc::vec![0.0; len],
                    m,
                });
                out.len() - 1
            }
        };
        let nh = &mut out[i];
        let number = || match &h.value {
            Some(HookValue::Number(v)) => *v,
            _ => unreachable!("check_hook: a number"),
        };
        if c.scale_hook {
            // The normalized values are divided by the hooked scale: ×1/v (zero: ×∞, the
            // ±∞/NaN of TransformerLens's x/0). Nothing is composed on this node before it
            // (its own hooks come later in the order), so b stays 0.
            let f = if h.op == HookOp::Zero { f32::INFINITY } else { 1.0 / number() };
            c.for_each(|o, _, _| nh.a[o] *= f);
            continue;
        }
        match (h.op, &h.value) {
            (HookOp::Zero, _) => c.for_each(|o, _, _| (nh.a[o], nh.b[o]) = (0.0, 0.0)),
            (HookOp::Scale, _) => {
                let v = number();
                c.for_each(|o, _, _| (nh.a[o], nh.b[o]) = (nh.a[o] * v, nh.b[o] * v));
            }
            (HookOp::Add, Some(HookValue::Number(v))) => c.for_each(|o, _, _| nh.b[o] += v),
            (HookOp::Add, Some(HookValue::Array(v))) => c.for_each(|o, _, r| nh.b[o] += v[r]),
            (HookOp::Set, Some(HookValue::Array(v))) => c.for_each(|o, rank, _| (nh.a[o], nh.b[o]) = (0.0, v[rank])),
            _ => unreachable!("check_hook: the value's kind"),
        }
        // A masked score that a hook fixed (a = 0) holds that value, as TransformerLens's does.
        if let Some(m) = nh.m.as_mut() {
            let a = &nh.a;
            c.for_each(|o, _, _| {
                if a[o] == 0.0 {
                    m[o] = 0.0;
                }
            });
        }
    }
    Ok(out)
}

/// The `hook_normalized` beside a LayerNorm's `hook_scale` (None for any other name).
pub(crate) fn ln_normalized(at: &str) -> Option<String> {
    at.strip_suffix("hook_scale")
        .filter(|p| p.ends_with("ln1.") || p.ends_with("ln2.") || *p == "ln_final.")
        .map(|p| format!("{p}hook_normalized"))
}

/// A captured `hook_scale` (`[n]`, a run from position 0) as the run's hooks left it: every
/// hook at that name (`scale` or `zero`; [`plan`] checked them) applied in order.
pub fn hooked_scale(name: &str, data: &mut [f32], hooks: &[Hook]) {
    for h in hooks.iter().filter(|h| h.at == name) {
        let Ok(pos) = resolve(&h.pos, data.len(), true, "pos", &h.at) else { continue };
        for p in pos {
            data[p] = match (h.op, &h.value) {
                (HookOp::Scale, Some(HookValue::Number(v))) => data[p] * v,
                _ => 0.0,
            };
        }
    }
}

/// The most capture patterns one call may list (several times the hook points of GPT-2 XL).
pub const MAX_CAPTURE_PATTERNS: usize = 4096;

/// Expands capture patterns into hook point names, in TransformerLens's forward order: `*`
/// stands for any run of characters within one dot-separated part (`blocks.*.hook_resid_post`).
/// A pattern that names no hook point is `invalid`. Each pattern is matched against each name
/// in time linear in their lengths' product (no backtracking), and a pattern longer than any
/// hook point's name could match fails at once.
pub fn expand_capture(patterns: &[String], hp: &Hparams) -> Result<Vec<String>, ModelError> {
    if patterns.len() > MAX_CAPTURE_PATTERNS {
        return Err(ModelError::Invalid(format!(
            "capture lists {} patterns (at most {MAX_CAPTURE_PATTERNS}; 'blocks.*.hook_resid_post' names a hook point of every block)",
            patterns.len()
        )));
    }
    let all = hook_names(hp);
    let longest = all.iter().map(|n| n.len()).max().unwrap_or(0);
    let mut keep = alloc::vec![false; all.len()];
    for p in patterns {
        let p = collapse_stars(p);
        let mut any = false;
        // Once runs of '*' are one, a pattern matching a name has at most one character of its
        // own per character of the name and a '*' around each.
        if p.len() <= 2 * longest + 1 {
            for (i, name) in all.iter().enumerate() {
                if matches(&p, name) {
                    keep[i] = true;
                    any = true;
                }
            }
        }
        if !any {
            let shown: String = p.chars().take(80).collect();
            let more = if p.chars().count() > 80 { "…" } else { "" };
            return Err(ModelError::Invalid(format!(
                "capture '{shown}{more}' names no hook point (TransformerLens names, e.g. 'blocks.*.hook_resid_post')"
            )));
        }
    }
    Ok(all.into_iter().zip(keep).filter(|(_, k)| *k).map(|(n, _)| n).collect())
}

/// `p` with each run of '*' made one (`a**b` matches what `a*b` does).
fn collapse_stars(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for c in p.chars() {
        if !(c == '*' && out.ends_with('*')) {
            out.push(c);
        }
    }
    out
}

/// Whether `name` matches `pattern` part by part (`*` within one part).
fn matches(pattern: &str, name: &str) -> bool {
    pattern.split('.').count() == name.split('.').count()
        && pattern.split('.').zip(name.split('.')).all(|(p, n)| glob(p.as_bytes(), n.as_bytes()))
}

/// Wildcard match (`*`: any run of bytes) in O(|p|·|s|), no backtracking: on a mismatch
/// only the last `*` seen takes one more byte; an earlier `*` never needs to, since whatever
/// it would take the last one can take instead.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None; // (pattern index after the last '*', s index it resumes from)
    while j < s.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i + 1, j));
            i += 1;
        } else if i < p.len() && p[i] == s[j] {
            i += 1;
            j += 1;
        } else if let Some((pi, sj)) = star {
            (i, j) = (pi, sj + 1);
            star = Some((pi, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}
