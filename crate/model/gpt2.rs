//! GPT-2 as llama.cpp's `src/models/gpt2.cpp` has it: hyperparameters, the tensor schema
//! (the one list of GPT-2's weights and their shapes) and the forward graph, built the way
//! ggml's `examples/gpt-2/main-backend.cpp` builds it. What runs the graph (KV cache,
//! scheduler, `decode`) is the model context, [`super::context`].
//!
//! Tensor names and shapes follow llama.cpp's GGUF layout for GPT-2. In ggml order
//! (`ne[0]` first), a linear layer's weight is `[n_in, n_out]` and `mul_mat(w, x)` with
//! `x: [n_in, N]` gives `[n_out, N]`.
//!
//! Every node is named `l{il}.{step}` (or `inp_*`, `out_*`) so a run can be dumped and
//! diffed against the reference activations in `tests/fixtures/tiny-f32.intermediates.json`.

use alloc::format;

use alloc::string::{String, ToString};

use alloc::vec::Vec;

pub use super::hparams::Hparams;
use super::kv_cache::KvCache;
use super::lora::{lora_mm, Lora, Target};
use super::ModelError;
use crate::graph::Graph;
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// One transformer block's weights.
pub struct Layer {
    pub attn_norm_w: Tensor, // [n_embd]
    pub attn_norm_b: Tensor, // [n_embd]
    pub attn_qkv_w: Tensor,  // [n_embd, 3*n_embd]
    pub attn_qkv_b: Tensor,  // [3*n_embd]
    pub attn_out_w: Tensor,  // [n_embd, n_embd]
    pub attn_out_b: Tensor,  // [n_embd]
    pub ffn_norm_w: Tensor,  // [n_embd]
    pub ffn_norm_b: Tensor,  // [n_embd]
    pub ffn_up_w: Tensor,    // [n_embd, n_ff]
    pub ffn_up_b: Tensor,    // [n_ff]
    pub ffn_down_w: Tensor,  // [n_ff, n_embd]
    pub ffn_down_b: Tensor,  // [n_embd]
}

impl Layer {
    /// The block's twelve weights in `layer_weight_shapes`' order (the struct's).
    pub fn tensors(&self) -> [&Tensor; 12] {
        [
            &self.attn_norm_w,
            &self.attn_norm_b,
            &self.attn_qkv_w,
            &self.attn_qkv_b,
            &self.attn_out_w,
            &self.attn_out_b,
            &self.ffn_norm_w,
            &self.ffn_norm_b,
            &self.ffn_up_w,
            &self.ffn_up_b,
            &self.ffn_down_w,
            &self.ffn_down_b,
        ]
    }
}

pub struct Weights {
    pub token_embd: Tensor,    // [n_embd, n_vocab]
    pub position_embd: Tensor, // [n_embd, n_ctx_train]
    pub output_norm_w: Tensor, // [n_embd]
    pub output_norm_b: Tensor, // [n_embd]
    /// [n_embd, n_vocab]; `token_embd` itself when the file ties them (no `output.weight`).
    pub output: Tensor,
    pub layers: Vec<Layer>,
    /// A LoRA adapter beside the block matrices ([`super::lora`]): every graph reads it.
    pub lora: Option<Lora>,
}

/// The weights one block needs, by GGUF name suffix (`blk.{il}.` before it), with their
/// shapes for `hp` in `Layer`'s field order. The loader checks a file's tensor infos
/// against this before allocating; [`Weights::from_context`] against the loaded tensors.
pub fn layer_weight_shapes(hp: &Hparams) -> [(&'static str, [i64; 4]); 12] {
    let (e, f) = (hp.n_embd as i64, hp.n_ff as i64);
    // n_embd and n_ff come from u32 keys: 3 * n_embd cannot overflow i64.
    let s = |a: i64, b: i64| [a, b, 1, 1];
    [
        ("attn_norm.weight", s(e, 1)),
        ("attn_norm.bias", s(e, 1)),
        ("attn_qkv.weight", s(e, 3 * e)),
        ("attn_qkv.bias", s(3 * e, 1)),
        ("attn_output.weight", s(e, e)),
        ("attn_output.bias", s(e, 1)),
        ("ffn_norm.weight", s(e, 1)),
        ("ffn_norm.bias", s(e, 1)),
        ("ffn_up.weight", s(e, f)),
        ("ffn_up.bias", s(f, 1)),
        ("ffn_down.weight", s(f, e)),
        ("ffn_down.bias", s(e, 1)),
    ]
}

/// The weights outside the blocks and their shapes; `output.weight` is optional (tied to
/// `token_embd` when absent).
pub fn global_weight_shapes(hp: &Hparams) -> [(&'static str, [i64; 4]); 5] {
    let (e, v) = (hp.n_embd as i64, hp.n_vocab as i64);
    [
        ("token_embd.weight", [e, v, 1, 1]),
        ("position_embd.weight", [e, hp.n_ctx_train as i64, 1, 1]),
        ("output_norm.weight", [e, 1, 1, 1]),
        ("output_norm.bias", [e, 1, 1, 1]),
        ("output.weight", [e, v, 1, 1]),
    ]
}

/// The layer index of a block weight's name (`blk.{il}.…`): None for a name outside the
/// blocks, Some(Err) for a `blk.` name whose index is not a number.
pub fn block_index(name: &str) -> Option<Result<usize, ()>> {
    let rest = name.strip_prefix("blk.")?;
    Some(rest.split('.').next().and_then(|i| i.parse::<usize>().ok()).ok_or(()))
}

impl Weights {
    /// Finds every weight by its GGUF name and checks its shape against `hp`.
    pub fn from_context(ctx: &Context, hp: &Hparams) -> Result<Weights, ModelError> {
        let get = |name: &str, want: [i64; 4]| -> Result<Tensor, ModelError> {
            let t = ctx.get_tensor(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
            if t.ne != want {
                return Err(ModelError::BadShape { name: name.to_string(), expected: want, got: t.ne });
            }
            Ok(t)
        };
        let [token_embd, position_embd, output_norm_w, output_norm_b, output] = global_weight_shapes(hp);
        let token_embd = get(token_embd.0, token_embd.1)?;
        let output = match ctx.get_tensor(output.0) {
            Some(_) => get(output.0, output.1)?,
            None => token_embd.clone(),
        };
        // No capacity from n_layer: a layer is pushed only once its tensors were found.
        let mut layers = Vec::new();
        for il in 0..hp.n_layer {
            let shapes = layer_weight_shapes(hp);
            let mut t = shapes.iter().map(|(s, ne)| get(&format!("blk.{il}.{s}"), *ne));
            let mut next = || t.next().expect("12 shapes");
            layers.push(Layer {
                attn_norm_w: next()?,
                attn_norm_b: next()?,
                attn_qkv_w: next()?,
                attn_qkv_b: next()?,
                attn_out_w: next()?,
                attn_out_b: next()?,
                ffn_norm_w: next()?,
                ffn_norm_b: next()?,
                ffn_up_w: next()?,
                ffn_up_b: next()?,
                ffn_down_w: next()?,
                ffn_down_b: next()?,
            });
        }
        Ok(Weights {
            token_embd,
            position_embd: get(position_embd.0, position_embd.1)?,
            output_norm_w: get(output_norm_w.0, output_norm_w.1)?,
            output_norm_b: get(output_norm_b.0, output_norm_b.1)?,
            output,
            layers,
            lora: None,
        })
    }
}

/// Whether the weight named `name` is read only as a matrix product's weight (`mul_mat`'s
/// src0): a block's four matrices and the output projection, which is `token_embd` when the
/// model is `tied` (no `output.weight`; its `get_rows` reads the same bytes). The CPU keeps
/// these in its repacking buffer type.
pub fn is_matrix_weight(name: &str, tied: bool) -> bool {
    if block_index(name).is_some() {
        let leaf = name.strip_suffix(".weight").and_then(|h| h.rsplit('.').next());
        return matches!(leaf, Some("attn_qkv" | "attn_output" | "ffn_up" | "ffn_down"));
    }
    name == "output.weight" || (tied && name == "token_embd.weight")
}

/// main-sched's weight placement with `gpu_layers` layers on the GPU: blocks
/// `n_layer - gpu_layers ..` there, the embeddings too only when `gpu_layers > n_layer`, and
/// the head (output norm and projection) whenever any block is. Names are llama.cpp's.
pub fn weight_on_gpu(name: &str, n_layer: usize, gpu_layers: usize) -> bool {
    if let Some(il) = block_index(name) {
        // Blocks n_layer - gpu_layers .. n_layer, in arithmetic no index or count overflows
        // (`blk.18446744073709551615.…` is as valid a name as any). A malformed or
        // out-of-range index stays on the CPU; the loader refuses such a file anyway.
        return il.is_ok_and(|il| il < n_layer && n_layer - il <= gpu_layers);
    }
    match name {
        "token_embd.weight" | "position_embd.weight" => gpu_layers > n_layer,
        _ => gpu_layers > 0,
    }
}

/// The tensors of one built graph that the caller fills or reads.
pub struct GraphIo {
    pub graph: Graph,
    /// Keeps the headers of this run's nodes alive.
    pub ctx: Context,
    pub tokens: Tensor,    // [N] i32
    pub positions: Tensor, // [N] i32
    /// [n_kv, N] f32: 0 where token i may attend to cell j, −∞ elsewhere (see [`Ubatch`]).
    pub kq_mask: Tensor,
    pub logits: Tensor, // [n_vocab, n_out]
    /// [n_embd, N] f32: the residual stream entering the first built layer, when the graph
    /// starts at a layer (`tokens` and `positions` are then not in the graph).
    pub resid: Option<Tensor>,
    /// The inputs of hooked nodes (`{node}.hook_a`, `.hook_b`, `kq_masked.hook_m`).
    pub hook_inputs: Vec<Tensor>,
}

/// Nodes in one graph: about 40 per layer plus the ends; generous so any n_layer fits.
pub(crate) fn graph_size(hp: &Hparams) -> usize {
    64 * hp.n_layer + 64
}

/// The shape of one graph run (llama.cpp's ubatch): `n_tokens` tokens whose K/V go to cells
/// `slot..slot + n_tokens`, attending to cells `0..n_kv` through the KQ mask ([`GraphIo::kq_mask`],
/// `[n_kv, n_tokens]`: 0 where the cell belongs to one of the token's sequences at a position up
/// to its own, −∞ elsewhere; for one sequence, cell = position, that is the causal mask), with
/// logits for the last `n_out` tokens. One attention layout for one sequence and for several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ubatch {
    pub slot: usize,
    pub n_kv: usize,
    pub n_tokens: usize,
    pub n_out: usize,
    /// Begin at this block from a residual input instead of the embeddings (see
    /// [`build_graph_with`]).
    pub start: Option<usize>,
    /// Attention's scale, mask and softmax as three nodes (`kq_scaled`, `kq_masked`:
    /// TransformerLens's `hook_attn_scores`, `kq_soft_max`) for a run that taps or hooks them,
    /// instead of one `soft_max_ext(kq, kq_mask, scale)`: the same values bit for bit (the
    /// mask adds 0 or −∞ to the scaled score either way), which takes two kernels fewer per
    /// layer.
    pub scores: bool,
    /// Attention reads this ubatch's own K and V (`k_heads`, `v_heads`, in the cache's type)
    /// instead of the cache's cells `0..n_kv`: for a ubatch that fills an empty cache
    /// (`slot` 0, `n_kv` = `n_tokens`), the same values. A gradient run then differentiates
    /// through those nodes, not through a gradient of the whole cache (n_ctx cells per layer,
    /// zeroed and accumulated every run). The cache is still written unless `store_kv` is off.
    pub own_kv: bool,
    /// The head over this one row (`n_out` 1) instead of the last `n_out`: a run that reads
    /// one position's logits (`Logits::Row`, a gradient run whose metric reads one row).
    pub out_row: Option<usize>,
    /// Write this ubatch's K and V into the cache (`k_cpy`, `v_cpy`). Off only with `own_kv`
    /// (a training run, whose K/V nothing reads later): then `n_tokens` may exceed the cache.
    pub store_kv: bool,
}

impl Ubatch {
    /// `n_tokens` tokens of one sequence at positions `n_past..` (cell = position).
    pub fn at(n_past: usize, n_tokens: usize, n_out: usize) -> Ubatch {
        Ubatch {
            slot: n_past,
            n_kv: n_past + n_tokens,
            n_tokens,
            n_out,
            start: None,
            scores: false,
            own_kv: false,
            out_row: None,
            store_kv: true,
        }
    }
}

/// The graph of one run: `n_tokens` new tokens after `n_past` cached ones of one sequence,
/// logits for the last `n_out` of them. Pure: reads only headers, so it can be built for any
/// sizes.
pub fn build_graph(hp: &Hparams, w: &Weights, kv: &KvCache, n_past: usize, n_tokens: usize, n_out: usize) -> GraphIo {
    build_graph_with(hp, w, kv, Ubatch::at(n_past, n_tokens, n_out), &[])
}

/// [`build_graph`] for any [`Ubatch`], with interventions: each node named in `hooked` becomes
/// `add(mul(x, hook_a), hook_b)` under its own name (the original is `{name}.pre_hook`), so
/// every later node reads the hooked value; `hook_a`/`hook_b` are inputs of the node's shape
/// ([`GraphIo::hook_inputs`], filled from [`super::hooks::NodeHook`]). A hooked `kq_masked`
/// applies the map to `kq_scaled` and then adds its own mask input (`hook_m`, which holds the
/// causal −∞) instead of the KQ mask; hooks on the attention scores need `ub.scores`.
///
/// With `ub.start: Some(L)` the graph begins at block L from a residual input
/// ([`GraphIo::resid`], named as `blocks.L.hook_resid_pre`'s node: `inpL` or `l{L-1}.l_out`)
/// instead of the token and position embeddings, and builds blocks L.. only, with their usual
/// node names: a subgraph of the full one. Only those blocks' K/V cells are written.
pub fn build_graph_with(hp: &Hparams, w: &Weights, kv: &KvCache, ub: Ubatch, hooked: &[String]) -> GraphIo {
    let Ubatch { slot: n_past, n_kv, n_tokens, n_out, start, scores, own_kv, out_row, store_kv } = ub;
    assert!(n_tokens >= 1 && n_out >= 1 && n_out <= n_tokens, "build_graph: n_tokens {n_tokens}, n_out {n_out}");
    assert!(out_row.is_none_or(|r| n_out == 1 && r < n_tokens), "build_graph: out_row {out_row:?}, n_out {n_out}");
    assert!(start.is_none_or(|l| l < hp.n_layer), "build_graph: start {start:?} of {} layers", hp.n_layer);
    assert!(
        n_past + n_tokens <= n_kv && (n_kv <= kv.n_ctx || !store_kv),
        "build_graph: {n_past} + {n_tokens} cells, {n_kv} read, n_ctx {}",
        kv.n_ctx
    );
    assert!(!own_kv || (n_past == 0 && n_kv == n_tokens), "build_graph: own K/V at slot {n_past}, {n_kv} cells read");
    assert!(store_kv || own_kv, "build_graph: K/V not stored, yet read from the cache");
    assert!(
        scores || !hooked.iter().any(|h| h.ends_with(".kq_masked") || h.ends_with(".kq_scaled")),
        "build_graph: a hook on the attention scores needs their nodes (Ubatch::scores)"
    );
    // An adapter adds 5 nodes per adapted weight (lora::lora_mm).
    let size = graph_size(hp) + w.lora.as_ref().map_or(0, |l| 5 * l.cfg.targets.len() * hp.n_layer);
    let ctx = Context::new(ContextParams { mem_size: 2 * size * TENSOR_OVERHEAD, no_alloc: true });
    let mut gf = Graph::with_size(size);

    let (n_embd, n_head, hd) = (hp.n_embd as i64, hp.n_head as i64, hp.head_dim() as i64);
    let (n, past, l) = (n_tokens as i64, n_past, n_kv as i64);
    let f32_size = GgmlType::F32.type_size();
    let hook_inputs: core::cell::RefCell<Vec<Tensor>> = core::cell::RefCell::new(Vec::new());
    // Names a node; a hooked one becomes x·a + b under that name (see build_graph_with).
    let hook = |ctx: &Context, x: Tensor, name: &str| -> Tensor {
        x.set_name(name);
        if !hooked.iter().any(|h| h == name) {
            return x;
        }
        x.set_name(&format!("{name}.pre_hook"));
        let input = |suffix: &str| {
            let t = ctx.new_tensor(GgmlType::F32, &x.ne[..x.n_dims().max(1)]);
            t.set_name(&format!("{name}.{suffix}"));
            t.set_input();
            t
        };
        let (a, b) = (input("hook_a"), input("hook_b"));
        let out = ctx.add(&ctx.mul(&x, &a), &b);
        out.set_name(name);
        hook_inputs.borrow_mut().extend([a, b]);
        out
    };

    let tokens = ctx.new_tensor_1d(GgmlType::I32, n); // [N]
    tokens.set_name("inp_tokens");
    tokens.set_input();
    let positions = ctx.new_tensor_1d(GgmlType::I32, n); // [N]
    positions.set_name("inp_pos");
    positions.set_input();
    let kq_mask = ctx.new_tensor_2d(GgmlType::F32, l, n); // [n_kv, N]
    kq_mask.set_name("kq_mask");
    kq_mask.set_input();

    // [n_embd, N]. TransformerLens's hook points are named nodes of this graph: see hooks.rs.
    let (mut inp_l, resid) = match start {
        None => {
            let embd = hook(&ctx, ctx.get_rows(&w.token_embd, &tokens), "inp_embd");
            let pos_embd = hook(&ctx, ctx.get_rows(&w.position_embd, &positions), "inp_pos_embd");
            (hook(&ctx, ctx.add(&embd, &pos_embd), "inpL"), None)
        }
        Some(l0) => {
            let r = ctx.new_tensor_2d(GgmlType::F32, n_embd, n);
            r.set_input();
            let name = if l0 == 0 { String::from("inpL") } else { format!("l{}.l_out", l0 - 1) };
            (hook(&ctx, r.clone(), &name), Some(r))
        }
    };

    for (il, ly) in w.layers.iter().enumerate().skip(start.unwrap_or(0)) {
        let name = |s: &str| format!("l{il}.{s}");

        // [n_embd, N]
        let mut cur = hook(&ctx, ctx.norm(&inp_l, hp.eps), &name("norm"));
        cur = ctx.add(&ctx.mul(&cur, &ly.attn_norm_w), &ly.attn_norm_b);
        cur.set_name(&name("attn_norm"));

        // [3*n_embd, N]
        let lora = w.lora.as_ref();
        cur = lora_mm(&ctx, &ly.attn_qkv_w, &cur, lora, il, Target::AttnQkv);
        cur.set_name(&name("qkv"));
        cur = ctx.add(&cur, &ly.attn_qkv_b);
        cur.set_name(&name("bqkv"));

        // Views of Q, K, V inside each row of `cur`: [n_embd, N], rows 3*n_embd apart.
        let q_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 0);
        q_cur.set_name(&name("q_cur"));
        let k_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], n_embd as usize * f32_size);
        k_cur.set_name(&name("k_cur"));
        let v_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 2 * n_embd as usize * f32_size);
        v_cur.set_name(&name("v_cur"));

        // Store this run's K and V at positions n_past .. n_past+N-1 of the layer's cache.
        // V is kept transposed ([n_ctx, n_embd]: one row per feature, positions along it),
        // so attention reads V^T as a view instead of copying it out every run.
        let kv_size = kv.ty.type_size();
        let row = n_embd as usize * kv_size;
        let n_ctx_bytes = kv.n_ctx * kv_size;
        // Per-head K and V ([hd, n_head, N]: TransformerLens's hook_k / hook_v) are nodes of
        // their own, so what enters the cache is what a hook on them would leave.
        let k_heads = hook(&ctx, ctx.cont_3d(&k_cur, hd, n_head, n), &name("k_heads"));
        let v_heads = hook(&ctx, ctx.cont_3d(&v_cur, hd, n_head, n), &name("v_heads"));
        if store_kv {
            let k_dst = ctx.view_1d(&kv.k[il], n * n_embd, past * row); // [N*n_embd]
            k_dst.set_name(&name("k_store"));
            let v_dst = ctx.view_2d(&kv.v[il], n, n_embd, n_ctx_bytes, past * kv_size); // [N, n_embd]
            v_dst.set_name(&name("v_store"));
            let k_cpy = ctx.cpy(&k_heads, &k_dst);
            k_cpy.set_name(&name("k_cpy"));
            let v_cpy = ctx.cpy(&ctx.transpose(&ctx.reshape_2d(&v_heads, n_embd, n)), &v_dst);
            v_cpy.set_name(&name("v_cpy"));
            gf.build_forward_expand(&k_cpy);
            gf.build_forward_expand(&v_cpy);
        }

        // Q: [hd, n_head, N] (hook_q; a strided view cannot be reshaped, so cont_3d), then [hd, N, n_head]
        let q_heads = hook(&ctx, ctx.cont_3d(&q_cur, hd, n_head, n), &name("q_heads"));
        let q = ctx.permute(&q_heads, 0, 2, 1, 3);
        q.set_name(&name("q"));

        // K and V as the cache's type holds them: what attention reads of this ubatch's own
        // cells (Ubatch::own_kv), [hd, n_head, N].
        let as_cache = |x: &Tensor| match kv.ty {
            GgmlType::F32 => x.clone(),
            ty => ctx.cpy(x, &ctx.new_tensor(ty, &x.ne[..3])),
        };
        // K: [hd, L, n_head], straight from the cache (a contiguous prefix: reshape is enough)
        let k_all = match own_kv {
            false => ctx.reshape_3d(&ctx.view_1d(&kv.k[il], l * n_embd, 0), hd, n_head, l),
            true => as_cache(&k_heads),
        };
        if k_all.id() != k_heads.id() {
            k_all.set_name(&name("k_all"));
        }
        let k = ctx.permute(&k_all, 0, 2, 1, 3);
        k.set_name(&name("k"));

        // [L, N, n_head]
        let kq = ctx.mul_mat(&k, &q);
        kq.set_name(&name("kq"));
        let kq_soft_max = if !scores {
            // softmax(kq * scale + mask) in one kernel.
            ctx.soft_max_ext(&kq, Some(&kq_mask), 1.0 / libm_sqrt(hd as f32), 0.0)
        } else {
            let kq_scaled = ctx.scale(&kq, 1.0 / libm_sqrt(hd as f32));
            kq_scaled.set_name(&name("kq_scaled"));
            let kq_masked = if hooked.contains(&name("kq_masked")) {
                // TransformerLens hooks the masked scores: the map goes on the scaled ones and
                // the mask after it (−∞ stays −∞ under scale and add; a fixed value unmasks,
                // hook_m).
                let m = ctx.new_tensor(GgmlType::F32, &kq_scaled.ne[..3]);
                m.set_name(&name("kq_masked.hook_m"));
                m.set_input();
                hook_inputs.borrow_mut().push(m.clone());
                let h = hook(&ctx, kq_scaled.clone(), &name("kq_masked"));
                h.set_name(&name("kq_masked.hooked"));
                ctx.add(&h, &m)
            } else {
                ctx.add(&kq_scaled, &kq_mask) // the mask broadcast over the heads
            };
            kq_masked.set_name(&name("kq_masked"));
            ctx.soft_max(&kq_masked)
        };
        let kq_soft_max = hook(&ctx, kq_soft_max, &name("kq_soft_max"));

        // V^T with L as dim 0 for mul_mat: [L, hd, n_head], a view of the transposed cache
        let v_trans = match own_kv {
            false => ctx.view_3d(&kv.v[il], l, hd, n_head, n_ctx_bytes, hd as usize * n_ctx_bytes, 0),
            // [hd, n_head, N] → [N, hd, n_head], copied contiguous (mul_mat reads rows)
            true => as_cache(&ctx.cont(&ctx.permute(&v_heads, 1, 2, 0, 3))),
        };
        v_trans.set_name(&name("v_trans"));

        // [hd, N, n_head]
        let kqv = ctx.mul_mat(&v_trans, &kq_soft_max);
        kqv.set_name(&name("kqv"));
        // [hd, n_head, N] → [n_embd, N]
        let kqv_merged = ctx.permute(&kqv, 0, 2, 1, 3);
        kqv_merged.set_name(&name("kqv_merged"));
        cur = hook(&ctx, ctx.cont_2d(&kqv_merged, n_embd, n), &name("kqv_merged_cont"));

        // [n_embd, N]
        cur = hook(
            &ctx,
            ctx.add(&lora_mm(&ctx, &ly.attn_out_w, &cur, lora, il, Target::AttnOutput), &ly.attn_out_b),
            &name("kqv_out"),
        );

        let ffn_inp = hook(&ctx, ctx.add(&cur, &inp_l), &name("ffn_inp")); // [n_embd, N]

        cur = hook(&ctx, ctx.norm(&ffn_inp, hp.eps), &name("norm2"));
        cur = ctx.add(&ctx.mul(&cur, &ly.ffn_norm_w), &ly.ffn_norm_b);
        cur.set_name(&name("ffn_norm"));

        // [n_ff, N]
        cur = hook(
            &ctx,
            ctx.add(&lora_mm(&ctx, &ly.ffn_up_w, &cur, lora, il, Target::FfnUp), &ly.ffn_up_b),
            &name("ffn_up_b"),
        );
        cur = hook(&ctx, ctx.gelu(&cur), &name("ffn_gelu"));
        // [n_embd, N]
        cur = hook(
            &ctx,
            ctx.add(&lora_mm(&ctx, &ly.ffn_down_w, &cur, lora, il, Target::FfnDown), &ly.ffn_down_b),
            &name("ffn_out"),
        );

        inp_l = hook(&ctx, ctx.add(&cur, &ffn_inp), &name("l_out")); // [n_embd, N]
    }

    // Only the rows whose logits are wanted go through the head (the last n_out, or the one
    // out_row: a metric of one position differentiates one row of the head): [n_embd, n_out]
    let first = out_row.unwrap_or(n_tokens - n_out);
    let last = ctx.view_2d(&inp_l, n_embd, n_out as i64, inp_l.nb[1], first * inp_l.nb[1]);
    last.set_name("out_rows");
    let mut cur = hook(&ctx, ctx.norm(&last, hp.eps), "out_norm");
    cur = ctx.add(&ctx.mul(&cur, &w.output_norm_w), &w.output_norm_b);
    cur.set_name("result_norm");
    let logits = ctx.mul_mat(&w.output, &cur); // [n_vocab, n_out]
    logits.set_name("result_output");
    logits.set_output();
    gf.build_forward_expand(&logits);

    GraphIo { graph: gf, ctx, tokens, positions, kq_mask, logits, resid, hook_inputs: hook_inputs.into_inner() }
}

/// sqrt without std (Newton's method from the f32 bit-hack guess, exact to f32 rounding).
fn libm_sqrt(x: f32) -> f32 {
    if x <= 0.0 {
        return 0.0;
    }
    let mut y = f32::from_bits((x.to_bits() >> 1) + 0x1fc0_0000) as f64;
    for _ in 0..6 {
        y = 0.5 * (y + x as f64 / y);
    }
    y as f32
}

#[cfg(test)]
mod tests {
    use super::weight_on_gpu;

    #[test]
    fn gpu_placement_never_overflows_on_any_index_or_count() {
        // The last `gpu_layers` of 12 blocks; usize::MAX is "all".
        assert!(weight_on_gpu("blk.11.attn_qkv.weight", 12, 1));
        assert!(!weight_on_gpu("blk.10.attn_qkv.weight", 12, 1));
        assert!(weight_on_gpu("blk.0.attn_qkv.weight", 12, usize::MAX));
        assert!(!weight_on_gpu("blk.0.attn_qkv.weight", 12, 0));
        // An index no file of 12 blocks has (once `il + gpu_layers`, an overflow): on the CPU.
        for g in [0, 1, 12, 13, usize::MAX] {
            assert!(!weight_on_gpu("blk.18446744073709551615.attn_qkv.weight", 12, g));
            assert!(!weight_on_gpu("blk.12.attn_qkv.weight", 12, g));
            assert!(!weight_on_gpu("blk.x.attn_qkv.weight", 12, g));
        }
        assert!(weight_on_gpu("token_embd.weight", 12, 13) && !weight_on_gpu("token_embd.weight", 12, 12));
        assert!(weight_on_gpu("output_norm.weight", 12, 1) && !weight_on_gpu("output_norm.weight", 12, 0));
    }

    #[test]
    fn sqrt_is_exact_for_head_dims() {
        for hd in [8f32, 16.0, 64.0, 80.0, 128.0] {
            assert_eq!(super::libm_sqrt(hd), (hd as f64).sqrt() as f32);
        }
    }
}
