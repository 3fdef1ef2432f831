//! GPT-2, in one file: hyperparameters, weights (with their shapes), the KV cache, and
//! the forward graph, built the way ggml's `examples/gpt-2/main-backend.cpp` builds it.
//!
//! ```no_run
//! # fn main() -> Result<(), ggweb::model::ModelError> {
//! use ggweb::model::{gpt2::Gpt2Options, loader::load_from_bytes};
//! let bytes = std::fs::read("tests/fixtures/tiny-f32.gguf").unwrap();
//! let mut model = load_from_bytes(&bytes, Gpt2Options::default())?.model;
//! let logits = model.eval(&[15496, 11], 0, false)?;   // last position, [n_vocab]
//! assert_eq!(logits.len(), model.hparams.n_vocab);
//! # Ok(()) }
//! ```
//!
//! Tensor names and shapes follow llama.cpp's GGUF layout for GPT-2. In ggml order
//! (`ne[0]` first), a linear layer's weight is `[n_in, n_out]` and `mul_mat(w, x)` with
//! `x: [n_in, N]` gives `[n_out, N]`.
//!
//! Every node is named `l{il}.{step}` (or `inp_*`, `out_*`) so a run can be dumped and
//! diffed against the reference activations in `tests/fixtures/tiny-f32.intermediates.json`.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::ModelError;
use crate::allocator::alloc_tensors;
use crate::allocator::gallocr::Gallocr;
use crate::backend::BackendStats;
use crate::backend::{Backend, Buffer, BufferType};
use crate::graph::Graph;
use crate::sched::Sched;
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// `gpt2.*` keys of a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    pub n_vocab: usize,
    /// Positions the model was trained for (rows of `position_embd`).
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub eps: f32,
}

impl Hparams {
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }
}

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

pub struct Weights {
    pub token_embd: Tensor,    // [n_embd, n_vocab]
    pub position_embd: Tensor, // [n_embd, n_ctx_train]
    pub output_norm_w: Tensor, // [n_embd]
    pub output_norm_b: Tensor, // [n_embd]
    /// [n_embd, n_vocab]; `token_embd` itself when the file ties them (no `output.weight`).
    pub output: Tensor,
    pub layers: Vec<Layer>,
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
        })
    }
}

/// K and V of every past position, one pair of flat tensors per layer ([n_embd * n_ctx]
/// each, F32 or F16: [`Gpt2Options::kv_type`]), in their own buffer: they live across
/// graph runs. With F16 the `cpy` that stores each run's K and V rounds them to f16, and
/// attention's mul_mat reads the F16 views as it reads F16 weights. K holds
/// position after position ([n_embd, n_ctx]); V is transposed ([n_ctx, n_embd]), as
/// llama.cpp keeps it, so that attention multiplies by it without a copy.
pub struct KvCache {
    pub ctx: Context,
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub buffers: Vec<Rc<dyn Buffer>>,
    pub n_ctx: usize,
    /// F32 or F16.
    pub ty: GgmlType,
}

impl KvCache {
    pub fn new(hp: &Hparams, n_ctx: usize, ty: GgmlType, backend: &dyn Backend) -> Result<KvCache, ModelError> {
        KvCache::new_per_layer(hp, n_ctx, ty, &vec![backend.buffer_type(); hp.n_layer])
    }

    /// Layer `il`'s K and V in buffers of `bufts[il]`: each layer's cache on the device
    /// that runs the layer (llama.cpp's llama-kv-cache), so attention never crosses devices.
    pub fn new_per_layer(
        hp: &Hparams,
        n_ctx: usize,
        ty: GgmlType,
        bufts: &[Rc<dyn BufferType>],
    ) -> Result<KvCache, ModelError> {
        if !matches!(ty, GgmlType::F32 | GgmlType::F16) {
            return Err(ModelError::Config(format!("KV cache type {ty}: only f32 and f16 are supported")));
        }
        if bufts.len() != hp.n_layer {
            return Err(ModelError::Config(format!(
                "KV cache: {} buffer types for {} layers",
                bufts.len(),
                hp.n_layer
            )));
        }
        let ctx = Context::new(ContextParams { mem_size: (2 * hp.n_layer + 1) * TENSOR_OVERHEAD, no_alloc: true });
        let n = (hp.n_embd * n_ctx) as i64;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for il in 0..hp.n_layer {
            let kt = ctx.new_tensor_1d(ty, n);
            kt.set_name(&format!("cache_k_l{il}"));
            let vt = ctx.new_tensor_1d(ty, n);
            vt.set_name(&format!("cache_v_l{il}"));
            k.push(kt);
            v.push(vt);
        }
        // Layers of one buffer type share buffers, in layer order (K then V per layer).
        let mut groups: Vec<(Rc<dyn BufferType>, Vec<Tensor>)> = Vec::new();
        for il in 0..hp.n_layer {
            let pair = [k[il].clone(), v[il].clone()];
            match groups.iter_mut().find(|(b, _)| b.name() == bufts[il].name()) {
                Some((_, ts)) => ts.extend(pair),
                None => groups.push((bufts[il].clone(), pair.to_vec())),
            }
        }
        let mut buffers = Vec::new();
        for (buft, ts) in &groups {
            buffers.extend(alloc_tensors(ts, &**buft)?);
        }
        for b in &buffers {
            b.clear(0);
        }
        Ok(KvCache { ctx, k, v, buffers, n_ctx, ty })
    }

    pub fn bytes(&self) -> usize {
        self.buffers.iter().map(|b| b.size()).sum()
    }
}

/// Runtime choices that are not in the file.
#[derive(Clone, Debug)]
pub struct Gpt2Options {
    /// Context length (0 = the model's own). At most the model's.
    pub n_ctx: usize,
    /// Most tokens per graph run; longer prompts go in chunks.
    pub n_batch: usize,
    pub n_threads: usize,
    /// Element type of the KV cache: F32 (the default: logits as exact as the weights allow)
    /// or F16 (half the KV memory, llama.cpp's default; logits move by a measured bound,
    /// see tests/model/kv_type.rs).
    pub kv_type: GgmlType,
}

impl Default for Gpt2Options {
    fn default() -> Self {
        Gpt2Options { n_ctx: 0, n_batch: 32, n_threads: 1, kv_type: GgmlType::F32 }
    }
}

/// Bytes of each part of the memory plan.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryPlan {
    pub weights: usize,
    pub kv: usize,
    pub compute: usize,
}

/// The memory plan of one backend (see [`Gpt2::memory_by_backend`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendMemory {
    pub backend: String,
    pub weights: usize,
    pub kv: usize,
    pub compute: usize,
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
    pub logits: Tensor,    // [n_vocab, n_out]
}

/// Nodes in one graph: about 40 per layer plus the ends; generous so any n_layer fits.
fn graph_size(hp: &Hparams) -> usize {
    64 * hp.n_layer + 64
}

/// The graph of one run: `n_tokens` new tokens after `n_past` cached ones, logits for the
/// last `n_out` of them. Pure: reads only headers, so it can be built for any sizes.
pub fn build_graph(hp: &Hparams, w: &Weights, kv: &KvCache, n_past: usize, n_tokens: usize, n_out: usize) -> GraphIo {
    assert!(n_tokens >= 1 && n_out >= 1 && n_out <= n_tokens, "build_graph: n_tokens {n_tokens}, n_out {n_out}");
    assert!(n_past + n_tokens <= kv.n_ctx, "build_graph: {n_past} + {n_tokens} positions > n_ctx {}", kv.n_ctx);
    let size = graph_size(hp);
    let ctx = Context::new(ContextParams { mem_size: 2 * size * TENSOR_OVERHEAD, no_alloc: true });
    let mut gf = Graph::with_size(size);

    let (n_embd, n_head, hd) = (hp.n_embd as i64, hp.n_head as i64, hp.head_dim() as i64);
    let (n, past, l) = (n_tokens as i64, n_past, (n_past + n_tokens) as i64);
    let f32_size = GgmlType::F32.type_size();

    let tokens = ctx.new_tensor_1d(GgmlType::I32, n); // [N]
    tokens.set_name("inp_tokens");
    tokens.set_input();
    let positions = ctx.new_tensor_1d(GgmlType::I32, n); // [N]
    positions.set_name("inp_pos");
    positions.set_input();

    // [n_embd, N]. TransformerLens's hook points are named nodes of this graph: see hooks.rs.
    let embd = ctx.get_rows(&w.token_embd, &tokens);
    embd.set_name("inp_embd");
    let pos_embd = ctx.get_rows(&w.position_embd, &positions);
    pos_embd.set_name("inp_pos_embd");
    let mut inp_l = ctx.add(&embd, &pos_embd);
    inp_l.set_name("inpL");

    for (il, ly) in w.layers.iter().enumerate() {
        let name = |s: &str| format!("l{il}.{s}");

        // [n_embd, N]
        let mut cur = ctx.norm(&inp_l, hp.eps);
        cur.set_name(&name("norm"));
        cur = ctx.add(&ctx.mul(&cur, &ly.attn_norm_w), &ly.attn_norm_b);
        cur.set_name(&name("attn_norm"));

        // [3*n_embd, N]
        cur = ctx.mul_mat(&ly.attn_qkv_w, &cur);
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
        let k_dst = ctx.view_1d(&kv.k[il], n * n_embd, past * row); // [N*n_embd]
        k_dst.set_name(&name("k_store"));
        let v_dst = ctx.view_2d(&kv.v[il], n, n_embd, n_ctx_bytes, past * kv_size); // [N, n_embd]
        v_dst.set_name(&name("v_store"));
        // Per-head K and V ([hd, n_head, N]: TransformerLens's hook_k / hook_v) are nodes of
        // their own, so what enters the cache is what a hook on them would leave.
        let k_heads = ctx.cont_3d(&k_cur, hd, n_head, n);
        k_heads.set_name(&name("k_heads"));
        let v_heads = ctx.cont_3d(&v_cur, hd, n_head, n);
        v_heads.set_name(&name("v_heads"));
        let k_cpy = ctx.cpy(&k_heads, &k_dst);
        k_cpy.set_name(&name("k_cpy"));
        let v_cpy = ctx.cpy(&ctx.transpose(&ctx.reshape_2d(&v_heads, n_embd, n)), &v_dst);
        v_cpy.set_name(&name("v_cpy"));
        gf.build_forward_expand(&k_cpy);
        gf.build_forward_expand(&v_cpy);

        // Q: [hd, n_head, N] (hook_q; a strided view cannot be reshaped, so cont_3d), then [hd, N, n_head]
        let q_heads = ctx.cont_3d(&q_cur, hd, n_head, n);
        q_heads.set_name(&name("q_heads"));
        let q = ctx.permute(&q_heads, 0, 2, 1, 3);
        q.set_name(&name("q"));

        // K: [hd, L, n_head], straight from the cache (a contiguous prefix: reshape is enough)
        let k_all = ctx.view_1d(&kv.k[il], l * n_embd, 0);
        k_all.set_name(&name("k_all"));
        let k = ctx.permute(&ctx.reshape_3d(&k_all, hd, n_head, l), 0, 2, 1, 3);
        k.set_name(&name("k"));

        // [L, N, n_head]
        let kq = ctx.mul_mat(&k, &q);
        kq.set_name(&name("kq"));
        let kq_scaled = ctx.scale(&kq, 1.0 / libm_sqrt(hd as f32));
        kq_scaled.set_name(&name("kq_scaled"));
        let kq_masked = ctx.diag_mask_inf(&kq_scaled, past as i32);
        kq_masked.set_name(&name("kq_masked"));
        let kq_soft_max = ctx.soft_max(&kq_masked);
        kq_soft_max.set_name(&name("kq_soft_max"));

        // V^T with L as dim 0 for mul_mat: [L, hd, n_head], a view of the transposed cache
        let v_trans = ctx.view_3d(&kv.v[il], l, hd, n_head, n_ctx_bytes, hd as usize * n_ctx_bytes, 0);
        v_trans.set_name(&name("v_trans"));

        // [hd, N, n_head]
        let kqv = ctx.mul_mat(&v_trans, &kq_soft_max);
        kqv.set_name(&name("kqv"));
        // [hd, n_head, N] → [n_embd, N]
        let kqv_merged = ctx.permute(&kqv, 0, 2, 1, 3);
        kqv_merged.set_name(&name("kqv_merged"));
        cur = ctx.cont_2d(&kqv_merged, n_embd, n);
        cur.set_name(&name("kqv_merged_cont"));

        // [n_embd, N]
        cur = ctx.add(&ctx.mul_mat(&ly.attn_out_w, &cur), &ly.attn_out_b);
        cur.set_name(&name("kqv_out"));

        let ffn_inp = ctx.add(&cur, &inp_l); // [n_embd, N]
        ffn_inp.set_name(&name("ffn_inp"));

        cur = ctx.norm(&ffn_inp, hp.eps);
        cur.set_name(&name("norm2"));
        cur = ctx.add(&ctx.mul(&cur, &ly.ffn_norm_w), &ly.ffn_norm_b);
        cur.set_name(&name("ffn_norm"));

        // [n_ff, N]
        cur = ctx.add(&ctx.mul_mat(&ly.ffn_up_w, &cur), &ly.ffn_up_b);
        cur.set_name(&name("ffn_up_b"));
        cur = ctx.gelu(&cur);
        cur.set_name(&name("ffn_gelu"));
        // [n_embd, N]
        cur = ctx.add(&ctx.mul_mat(&ly.ffn_down_w, &cur), &ly.ffn_down_b);
        cur.set_name(&name("ffn_out"));

        inp_l = ctx.add(&cur, &ffn_inp); // [n_embd, N]
        inp_l.set_name(&name("l_out"));
    }

    // Only the rows whose logits are wanted go through the head: [n_embd, n_out]
    let last = ctx.view_2d(&inp_l, n_embd, n_out as i64, inp_l.nb[1], (n_tokens - n_out) * inp_l.nb[1]);
    last.set_name("out_rows");
    let mut cur = ctx.norm(&last, hp.eps);
    cur.set_name("out_norm");
    cur = ctx.add(&ctx.mul(&cur, &w.output_norm_w), &w.output_norm_b);
    cur.set_name("result_norm");
    let logits = ctx.mul_mat(&w.output, &cur); // [n_vocab, n_out]
    logits.set_name("result_output");
    logits.set_output();
    gf.build_forward_expand(&logits);

    GraphIo { graph: gf, ctx, tokens, positions, logits }
}

/// One tapped node: its name, ggml shape (`ne[0]` fastest) and values in memory order.
#[derive(Clone, Debug)]
pub struct TapValue {
    pub name: String,
    pub ne: [i64; 4],
    pub data: Vec<f32>,
}

/// What [`Gpt2::eval_taps_async`] returns.
#[derive(Clone, Debug)]
pub struct Taps {
    pub values: Vec<TapValue>,
    /// Bytes of the compute buffers this graph needed with its taps kept alive.
    pub compute_bytes: usize,
}

/// A contiguous f32 tensor's values. WebGPU memory is read asynchronously (the browser's
/// only way; natively the read completes within its first poll); other buffers directly.
pub async fn read_f32_async(t: &Tensor) -> Result<Vec<f32>, ModelError> {
    let mut out = vec![0f32; t.nelements() as usize];
    #[cfg(feature = "webgpu")]
    if let Some(d) = t.data() {
        if let Some(buf) = d.buffer.as_any().downcast_ref::<crate::webgpu::WebGpuBuffer>() {
            buf.read_async(d.offset, bytemuck::cast_slice_mut(&mut out)).await?;
            return Ok(out);
        }
    }
    t.try_get_bytes(bytemuck::cast_slice_mut(&mut out), 0)?;
    Ok(out)
}

/// Drives a future to completion by polling it. For the synchronous entry points (the CLI,
/// native tests) over the async core: natively every read completes within its first poll,
/// so this never spins; in the browser nothing calls it (the JS event loop drives the futures).
pub fn block_on<F: core::future::Future>(f: F) -> F::Output {
    let mut f = core::pin::pin!(f);
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    loop {
        if let core::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        core::hint::spin_loop();
    }
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

/// A file without `output.weight` projects with `token_embd` itself. When the head
/// (`output_norm`) was placed on another backend than the embeddings, the projection gets
/// its own copy of `token_embd` there, as llama.cpp does (TENSOR_DUPLICATED): otherwise the
/// largest mul_mat of every token would run where the embeddings are. Returns the new buffer.
fn duplicate_tied_output(w: &mut Weights, sched: &Sched) -> Result<Option<Rc<dyn Buffer>>, ModelError> {
    let home = |t: &Tensor| t.data().map(|d| d.buffer.buffer_type_name().to_string());
    let (head, embd) = (home(&w.output_norm_w), home(&w.token_embd));
    if w.output != w.token_embd || head == embd {
        return Ok(None);
    }
    let Some(b) = head.as_deref().and_then(|h| sched.backend_for_buffer_type(h)) else { return Ok(None) };
    let ctx = Context::new(ContextParams { mem_size: TENSOR_OVERHEAD, no_alloc: true });
    let dup = ctx.dup_tensor(&w.token_embd);
    dup.set_name("output.weight");
    let buffer = alloc_tensors(core::slice::from_ref(&dup), &*sched.backend(b).buffer_type())?.remove(0);
    let n = w.token_embd.nbytes();
    match w.token_embd.host_ptr() {
        // SAFETY: the tensor's bytes lie inside its host buffer; `dup` is in another buffer.
        Some(p) => dup.set_bytes(unsafe { core::slice::from_raw_parts(p, n) }, 0),
        None => {
            let mut bytes = vec![0u8; n];
            w.token_embd.try_get_bytes(&mut bytes, 0)?;
            dup.set_bytes(&bytes, 0);
        }
    }
    w.output = dup;
    Ok(Some(buffer))
}

/// Every node of the worst-case graph must be one some backend runs: a weight of a type no
/// kernel reads (an `i32` bias, say, which the reader cannot tell from a float one by its
/// size) is the file's fault, found at load, not at the first token.
fn check_runnable(graph: &Graph, sched: &Sched) -> Result<(), ModelError> {
    let backends = sched.backends();
    for node in &graph.nodes {
        if backends.iter().any(|b| b.supports_op(node)) {
            continue;
        }
        let weights: Vec<String> = node
            .src
            .iter()
            .flatten()
            .filter(|t| t.op == crate::tensor::Op::None && t.data().is_some())
            .map(|t| format!("'{}' ({})", t.name(), t.ty))
            .collect();
        return Err(ModelError::Format(format!(
            "no backend runs node '{}' ({}) with weight {}: a weight type this model cannot use",
            node.name(),
            node.op.name(),
            if weights.is_empty() { "types of the file".to_string() } else { weights.join(", ") }
        )));
    }
    Ok(())
}

/// A loaded model ready to run: weights, KV cache and the reserved compute buffers.
/// Graphs run through a [`Sched`]: on one backend, or split between a GPU and the CPU
/// by where the weights are (see [`Gpt2::with_backends`]).
pub struct Gpt2 {
    pub hparams: Hparams,
    pub weights: Weights,
    pub weight_ctx: Context,
    pub weight_buffers: Vec<Rc<dyn Buffer>>,
    pub kv: KvCache,
    /// The scheduler, with one compute buffer per backend.
    pub sched: Sched,
    /// The first (highest-priority) backend.
    pub backend: Rc<dyn Backend>,
    pub n_batch: usize,
}

impl Gpt2 {
    /// Builds the runtime around loaded weights: KV cache, then one reserve of the
    /// worst-case graph (a full batch at the end of the context), so no later run allocates.
    pub fn new(
        hparams: Hparams,
        weight_ctx: Context,
        weight_buffers: Vec<Rc<dyn Buffer>>,
        backend: Rc<dyn Backend>,
        opts: &Gpt2Options,
    ) -> Result<Gpt2, ModelError> {
        Gpt2::with_backends(hparams, weight_ctx, weight_buffers, vec![backend], opts)
    }

    /// [`Gpt2::new`] over several backends, in priority order with the CPU last (see
    /// [`Sched::new`]). Where the weights were loaded decides where each layer runs; each
    /// layer's KV cache goes to the backend of its weights.
    pub fn with_backends(
        hparams: Hparams,
        weight_ctx: Context,
        weight_buffers: Vec<Rc<dyn Buffer>>,
        backends: Vec<Rc<dyn Backend>>,
        opts: &Gpt2Options,
    ) -> Result<Gpt2, ModelError> {
        let n_ctx = if opts.n_ctx == 0 { hparams.n_ctx_train } else { opts.n_ctx };
        if n_ctx > hparams.n_ctx_train {
            return Err(ModelError::Config(format!(
                "n_ctx {n_ctx} exceeds the model's context length {}",
                hparams.n_ctx_train
            )));
        }
        if opts.n_batch == 0 {
            return Err(ModelError::Config("n_batch must be at least 1".into()));
        }
        let n_batch = opts.n_batch.min(n_ctx);
        let mut weights = Weights::from_context(&weight_ctx, &hparams)?;
        let mut weight_buffers = weight_buffers;
        let mut sched = Sched::new(backends)?;
        if let Some(buffer) = duplicate_tied_output(&mut weights, &sched)? {
            weight_buffers.push(buffer);
        }
        let layer_bufts: Vec<Rc<dyn BufferType>> = weights
            .layers
            .iter()
            .map(|ly| {
                let b = ly.attn_qkv_w.data().and_then(|d| sched.backend_for_buffer_type(d.buffer.buffer_type_name()));
                sched.backend(b.unwrap_or(sched.n_backends() - 1)).buffer_type()
            })
            .collect();
        let kv = KvCache::new_per_layer(&hparams, n_ctx, opts.kv_type, &layer_bufts)?;
        let worst = build_graph(&hparams, &weights, &kv, n_ctx - n_batch, n_batch, n_batch);
        check_runnable(&worst.graph, &sched)?;
        sched.reserve(&worst.graph)?;
        let backend = sched.backend(0).clone();
        Ok(Gpt2 { hparams, weights, weight_ctx, weight_buffers, kv, sched, backend, n_batch })
    }

    pub fn n_ctx(&self) -> usize {
        self.kv.n_ctx
    }

    /// The scheduler's graph allocator (one buffer id per backend).
    pub fn galloc(&self) -> &Gallocr {
        self.sched.galloc()
    }

    pub fn memory_plan(&self) -> MemoryPlan {
        MemoryPlan {
            weights: self.weight_buffers.iter().map(|b| b.size()).sum(),
            kv: self.kv.bytes(),
            compute: (0..self.sched.n_backends()).map(|i| self.sched.compute_buffer_size(i)).sum(),
        }
    }

    /// The memory plan per backend, in the scheduler's order. A buffer counts for the
    /// first backend of its buffer type (backends sharing a type share compute buffers).
    pub fn memory_by_backend(&self) -> Vec<BackendMemory> {
        let n = self.sched.n_backends();
        let mut out: Vec<BackendMemory> = (0..n)
            .map(|i| BackendMemory {
                backend: self.sched.backend(i).name().to_string(),
                compute: self.sched.compute_buffer_size(i),
                ..BackendMemory::default()
            })
            .collect();
        let of = |b: &Rc<dyn Buffer>| self.sched.backend_for_buffer_type(b.buffer_type_name()).unwrap_or(n - 1);
        // Saturating: a plan's buffers are only sizes, and on wasm32 a GPU's share can pass
        // usize (the plan then reports its u64 estimate instead).
        for b in &self.weight_buffers {
            let w = &mut out[of(b)].weights;
            *w = w.saturating_add(b.size());
        }
        for b in &self.kv.buffers {
            let k = &mut out[of(b)].kv;
            *k = k.saturating_add(b.size());
        }
        out
    }

    /// The counters of the scheduler's backends that keep them ([`Backend::stats`]: the
    /// WebGPU ones), summed (None when none does): totals since they were created; a call's share is the difference of two
    /// snapshots ([`BackendStats::since`]).
    pub fn webgpu_stats(&self) -> Option<BackendStats> {
        self.sched.backends().iter().filter_map(|b| b.stats()).reduce(|a, b| a.plus(&b))
    }

    /// Splits the graph of a run of `n_tokens` new tokens after `n_past` (without running
    /// it) and leaves the result in [`Gpt2::sched`] (`splits`, `copies`, `describe_splits`).
    pub fn plan_split(&mut self, n_past: usize, n_tokens: usize) -> Result<(), ModelError> {
        if n_tokens == 0 || n_tokens > self.n_batch || n_past + n_tokens > self.n_ctx() {
            return Err(ModelError::Config(format!(
                "plan_split: {n_tokens} tokens at {n_past} (n_batch {}, n_ctx {})",
                self.n_batch,
                self.n_ctx()
            )));
        }
        let io = build_graph(&self.hparams, &self.weights, &self.kv, n_past, n_tokens, 1);
        self.sched.split_graph(&io.graph)?;
        Ok(())
    }

    /// Runs `tokens` (at most `n_batch`) at positions `n_past..`, writing their K/V into the
    /// cache. Returns logits row-major `[n_out][n_vocab]`: every position when `all_logits`,
    /// else the last one.
    pub fn eval(&mut self, tokens: &[u32], n_past: usize, all_logits: bool) -> Result<Vec<f32>, ModelError> {
        let io = self.eval_graph(tokens, n_past, all_logits)?;
        let mut out = vec![0f32; io.logits.nelements() as usize];
        io.logits.try_get_bytes(bytemuck::cast_slice_mut(&mut out), 0)?;
        Ok(out)
    }

    /// [`eval`](Self::eval) without the blocking read: in the browser a WebGPU buffer can
    /// only be read asynchronously. Other buffers are read as `eval` reads them.
    pub async fn eval_async(
        &mut self,
        tokens: &[u32],
        n_past: usize,
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError> {
        let logits = self.eval_graph(tokens, n_past, all_logits)?.logits;
        read_f32_async(&logits).await
    }

    /// [`eval`](Self::eval) up to the computed graph, without reading the logits: the
    /// caller reads `logits` itself (in the browser, WebGPU memory only reads back
    /// asynchronously: `WebGpuBackend::read_tensor_async`).
    pub fn eval_graph(&mut self, tokens: &[u32], n_past: usize, all_logits: bool) -> Result<GraphIo, ModelError> {
        let n = tokens.len();
        if n == 0 {
            return Err(ModelError::Config("eval: no tokens".into()));
        }
        if n > self.n_batch {
            return Err(ModelError::Config(format!("eval: {n} tokens > n_batch {}", self.n_batch)));
        }
        if n_past + n > self.n_ctx() {
            return Err(ModelError::ContextFull { needed: n_past + n, n_ctx: self.n_ctx() });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.hparams.n_vocab) {
            return Err(ModelError::BadToken { id: bad, n_vocab: self.hparams.n_vocab });
        }
        let n_out = if all_logits { n } else { 1 };
        let io = build_graph(&self.hparams, &self.weights, &self.kv, n_past, n, n_out);
        self.sched.alloc_graph(&io.graph)?;

        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let pos: Vec<i32> = (n_past..n_past + n).map(|p| p as i32).collect();
        io.tokens.set_bytes(bytemuck::cast_slice(&ids), 0);
        io.positions.set_bytes(bytemuck::cast_slice(&pos), 0);

        self.sched.graph_compute(&io.graph)?;
        Ok(io)
    }

    /// Evaluates a whole prompt from position `n_past`, in chunks of `n_batch`; returns the
    /// logits of every position when `all_logits`, else of the last. Only chunks whose
    /// logits are kept are read back. The same code as [`eval_prompt_async`](Self::eval_prompt_async),
    /// driven to completion here (natively a WebGPU read completes within its first poll).
    pub fn eval_prompt(&mut self, tokens: &[u32], n_past: usize, all_logits: bool) -> Result<Vec<f32>, ModelError> {
        block_on(self.eval_prompt_async(tokens, n_past, all_logits))
    }

    /// [`eval_prompt`](Self::eval_prompt) reading through [`eval_async`](Self::eval_async).
    pub async fn eval_prompt_async(
        &mut self,
        tokens: &[u32],
        n_past: usize,
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError> {
        if n_past + tokens.len() > self.n_ctx() {
            return Err(ModelError::ContextFull { needed: n_past + tokens.len(), n_ctx: self.n_ctx() });
        }
        let mut out = Vec::new();
        let mut done = 0;
        while done < tokens.len() {
            let chunk = &tokens[done..(done + self.n_batch).min(tokens.len())];
            let last_chunk = done + chunk.len() == tokens.len();
            // Only the chunks whose logits are kept need a read; the others just compute.
            if all_logits || last_chunk {
                out.extend_from_slice(&self.eval_async(chunk, n_past + done, all_logits).await?);
            } else {
                self.eval_graph(chunk, n_past + done, all_logits)?;
            }
            done += chunk.len();
        }
        Ok(out)
    }

    /// Runs one graph like [`eval`](Self::eval) but keeps the nodes named in `names` alive
    /// (marked as outputs, in a compute buffer of their own) and returns their values,
    /// row-major `[rows][ne0]`, to diff against reference activations. Not for the hot path:
    /// it plans a fresh buffer each call.
    pub fn eval_dump(
        &mut self,
        tokens: &[u32],
        n_past: usize,
        names: &[&str],
    ) -> Result<Vec<(String, Vec<f32>)>, ModelError> {
        let n = tokens.len();
        if n == 0 || n > self.n_batch || n_past + n > self.n_ctx() {
            return Err(ModelError::Config(format!(
                "eval_dump: {n} tokens at {n_past} (n_batch {}, n_ctx {})",
                self.n_batch,
                self.n_ctx()
            )));
        }
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let taps = block_on(self.eval_taps_async(tokens, n_past, &names))?;
        Ok(taps.values.into_iter().map(|t| (t.name, t.data)).collect())
    }

    /// One graph over all of `tokens` (any count up to the context, not just `n_batch`) at
    /// positions `n_past..`, with the nodes named in `names` marked as outputs, so gallocr
    /// keeps exactly those alive past their last use: only requested taps cost memory. The
    /// graph is pruned to what the taps and the K/V stores need (no output head unless a tap
    /// is in it), and gets a scheduler and compute buffers of its own, sized by that plan
    /// ([`Taps::compute_bytes`]); the model's reserved hot-path buffers are untouched. Writes
    /// K/V of the positions as `eval` does.
    pub async fn eval_taps_async(
        &mut self,
        tokens: &[u32],
        n_past: usize,
        names: &[String],
    ) -> Result<Taps, ModelError> {
        let n = tokens.len();
        if n == 0 {
            return Err(ModelError::Config("eval: no tokens".into()));
        }
        if n_past + n > self.n_ctx() {
            return Err(ModelError::ContextFull { needed: n_past + n, n_ctx: self.n_ctx() });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.hparams.n_vocab) {
            return Err(ModelError::BadToken { id: bad, n_vocab: self.hparams.n_vocab });
        }
        // The head runs on every row only when a tap is in it (`result_norm`: HF's last hidden state).
        let in_head = names.iter().any(|n| matches!(n.as_str(), "out_rows" | "result_norm" | "result_output"));
        let io = build_graph(&self.hparams, &self.weights, &self.kv, n_past, n, if in_head { n } else { 1 });
        let mut gf = Graph::with_size(graph_size(&self.hparams));
        for il in 0..self.hparams.n_layer {
            for step in ["k_cpy", "v_cpy"] {
                let t = io.graph.get_tensor(&format!("l{il}.{step}")).expect("every layer stores K and V");
                gf.build_forward_expand(&t);
            }
        }
        let mut wanted = Vec::new();
        for name in names {
            let t = io.graph.get_tensor(name).ok_or_else(|| {
                ModelError::Invalid(format!(
                    "no graph node named '{name}' (tap 'attn', 'hidden' or a node such as 'l0.ffn_gelu')"
                ))
            })?;
            if !(t.ty == GgmlType::F32 && t.is_contiguous()) {
                return Err(ModelError::Invalid(format!(
                    "graph node '{name}' is a view or not f32 ({}): only contiguous f32 nodes can be tapped",
                    t.ty
                )));
            }
            t.set_output();
            gf.build_forward_expand(&t);
            wanted.push(t);
        }
        let mut sched = Sched::new(self.sched.backends().to_vec())?;
        sched.alloc_graph(&gf)?;
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let pos: Vec<i32> = (n_past..n_past + n).map(|p| p as i32).collect();
        io.tokens.set_bytes(bytemuck::cast_slice(&ids), 0);
        io.positions.set_bytes(bytemuck::cast_slice(&pos), 0);
        sched.graph_compute(&gf)?;
        let compute_bytes = (0..sched.n_backends()).map(|i| sched.compute_buffer_size(i)).sum();
        let mut values = Vec::new();
        for t in wanted {
            values.push(TapValue { name: t.name(), ne: t.ne, data: read_f32_async(&t).await? });
        }
        Ok(Taps { values, compute_bytes })
    }

    /// One line: shape, context, batch, backends.
    pub fn describe(&self) -> String {
        let hp = &self.hparams;
        format!(
            "gpt2: {} layers, n_embd {}, {} heads, n_ff {}, n_vocab {}, n_ctx {} (train {}), n_batch {}, backend {}{}",
            hp.n_layer,
            hp.n_embd,
            hp.n_head,
            hp.n_ff,
            hp.n_vocab,
            self.n_ctx(),
            hp.n_ctx_train,
            self.n_batch,
            self.backend.name(),
            self.sched.backends()[1..].iter().map(|b| format!("+{}", b.name())).collect::<String>()
        )
    }
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
