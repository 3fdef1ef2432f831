//! The device layer: adapter and device setup, error capture, the shader and pipeline
//! caches, the parameter block layout, and the counted wgpu buffers. The layers above:
//! `buffer.rs` (tensor memory), `compute.rs` (graphs as dispatches), `backend.rs`
//! ([`super::WebGpuBackend`]); each uses only the ones before it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{MatMulKernels, WebGpuOptions, WebGpuStats};
use crate::backend::BackendError;
use crate::tensor::Tensor;

/// What adapter the backend runs on, for logs and UIs.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterSummary {
    pub name: String,
    /// "Vulkan", "BrowserWebGpu", ...
    pub backend: String,
    /// "Cpu" for software rasterizers (lavapipe, SwiftShader).
    pub device_type: String,
    pub shader_f16: bool,
    /// The adapter has wgpu's `SUBGROUP` feature.
    pub subgroups: bool,
    /// The kernels in use: subgroup reductions, `shader-f16` paths (see [`WebGpuOptions`]).
    pub subgroup_kernels: bool,
    pub f16_kernels: bool,
    /// The limits in use (after any override).
    pub max_binding_size: u64,
    pub max_buffer_size: u64,
    /// The mul_mat kernels in use (`Auto` resolved).
    pub mat_mul_kernels: MatMulKernels,
}

/// The bytes every parameter block takes in the per-graph uniform buffer (a multiple of
/// minUniformBufferOffsetAlignment, which WebGPU caps at 256).
pub(crate) const PARAMS_STRIDE: u64 = 256;

// Word offsets of the fields of `struct P` (shaders/common.wgsl): a_ne, a_nb, b_ne, b_nb,
// c_ne, c_nb, d_ne, d_nb (4 words each), then off, misc, u, f, then the fused kernels'
// e_nb, f_nb (slots 4 and 5), off2 (the offsets of slots 4..7) and g (its z and w: the
// strides of slots 6 and 7).
pub(crate) const P_A: usize = 0;
pub(crate) const P_B: usize = 8;
pub(crate) const P_C: usize = 16;
pub(crate) const P_D: usize = 24;
pub(crate) const P_OFF: usize = 32;
pub(crate) const P_MISC: usize = 36;
pub(crate) const P_U: usize = 40;
pub(crate) const P_F: usize = 44;
pub(crate) const P_E: usize = 48;
pub(crate) const P_FF: usize = 52;
pub(crate) const P_OFF2: usize = 56;
pub(crate) const P_G: usize = 60;

/// wgpu buffers this backend holds now, on every device (see [`live_buffers`]).
static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// How many wgpu buffers ggweb's WebGPU backends hold right now, all devices together:
/// tensor buffers, the per-graph parameter buffers, the unused-binding placeholders, and
/// readback or patch buffers while a read or write is under way. For leak checks: after a
/// model is dropped it is back where it was before the model was loaded.
pub fn live_buffers() -> usize {
    LIVE_BUFFERS.load(Ordering::Relaxed)
}

/// A wgpu buffer counted in [`live_buffers`] while this handle lives. Clones of the inner
/// `wgpu::Buffer` (bindings of one dispatch) are not counted: they end with the graph.
pub(crate) struct GpuBuffer(wgpu::Buffer);

impl GpuBuffer {
    pub fn new(device: &wgpu::Device, desc: &wgpu::BufferDescriptor<'_>) -> GpuBuffer {
        let buf = device.create_buffer(desc);
        LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
        GpuBuffer(buf)
    }
}

impl core::ops::Deref for GpuBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.0
    }
}

impl Drop for GpuBuffer {
    /// Destroyed now, not when the JS object is collected: in the browser a dropped wgpu
    /// buffer otherwise lives until the garbage collector finds its wrapper, and a page that
    /// makes thousands (a read-back staging buffer per read, prefetched outputs nobody read)
    /// stalled Firefox's WebGPU. Work already submitted that uses it still completes.
    fn drop(&mut self) {
        self.0.destroy();
        LIVE_BUFFERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Bytes `[lo, hi)` of `src`, copied into `staging` (from its byte 0) by the last graph
/// (`readback.rs` makes and takes them).
pub(crate) struct Prefetched {
    pub(super) src: wgpu::Buffer,
    pub(super) lo: u64,
    pub(super) hi: u64,
    pub(super) staging: GpuBuffer,
}

/// State shared by the backend, its buffer type and its buffers.
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub summary: AdapterSummary,
    /// Binding windows start at multiples of this (minStorageBufferOffsetAlignment).
    pub storage_align: u64,
    pub max_binding: u64,
    pub max_buffer: u64,
    pub max_wg_dim: u32,
    /// mul_mat kernels without workgroup memory (CPU-based adapters).
    pub per_row: bool,
    /// The WGSL extensions the kernels use.
    pub ext: Ext,
    pub layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    /// Bound where a kernel has no such source: slot i at bytes 256 i.. (ranges must not
    /// overlap even when unused).
    pub dummy: GpuBuffer,
    modules: RefCell<HashMap<String, wgpu::ShaderModule>>,
    pipelines: RefCell<HashMap<String, wgpu::ComputePipeline>>,
    /// The per-graph parameter buffer, grown on demand.
    pub params: RefCell<Option<GpuBuffer>>,
    /// Bytes handed to `queue.write_buffer` since the last submit (buffer.rs flushes them).
    pub unsubmitted: Cell<u64>,
    /// The largest buffer made through [`Gpu::create_buffer`] since the device was opened
    /// (bytes): what tests hold to maxBufferSize.
    pub largest_buffer: Cell<u64>,
    /// Copies of the last graph's outputs, made in its submit (see `readback.rs`).
    pub prefetched: RefCell<Vec<Prefetched>>,
    /// Counters since the device was opened ([`WebGpuBackend`](super::WebGpuBackend)'s `stats`).
    pub stats: Cell<WebGpuStats>,
    /// Milliseconds, for `stats.encode_ms` ([`WebGpuOptions::encode_clock`]).
    pub clock: fn() -> f64,
    /// Errors the device reported since the last check (validation, out of memory).
    errors: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Option<String>>>,
}

/// Which optional WGSL extensions a kernel module is built with (see [`WebGpuOptions`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Ext {
    /// The mat-vec kernel reduces with `subgroupAdd` (wgpu's `SUBGROUP`).
    pub subgroups: bool,
    /// `enable f16;`: the tiled kernel keeps F16 weights as f16 in workgroup memory. (Loads
    /// stay `unpack2x16float`: `bitcast<vec2<f16>>(u32)` reads wrong values on lavapipe,
    /// Mesa 22.3 with LLVM 15, so a path built on it could not be tested here.)
    pub f16: bool,
}

impl Ext {
    /// The extensions `file` specialised for `spec` actually uses (others are left off, so
    /// that one module serves both).
    pub fn for_kernel(self, file: &str, spec: &str) -> Ext {
        Ext {
            subgroups: self.subgroups && (file == "mul_mat_q" || file == "mul_mat_ln"),
            f16: self.f16 && spec == "f16" && file == "mul_mat",
        }
    }
    fn label(self) -> String {
        format!("{}{}", if self.f16 { "+f16" } else { "" }, if self.subgroups { "+subgroups" } else { "" })
    }
}

/// The WGSL of kernel file `file`, specialised for weight type `spec` (get_rows, mul_mat, out_prod;
/// "" for the others) and extensions `ext`: the enable directive, the prelude, the
/// dequantizers, the type's names, the reduction, the file.
pub(crate) fn specialisation(file: &str, spec: &str, ext: Ext) -> String {
    let ext = ext.for_kernel(file, spec);
    let mut src = String::new();
    if ext.f16 {
        src.push_str("enable f16;\n");
    }
    // No `enable subgroups;`: naga 30 rejects the directive ("not yet supported") and
    // allows the builtins on a device with SUBGROUP (which wgpu offers natively only).
    src.push_str(include_str!("../../shaders/common.wgsl"));
    let body = match file {
        "binary" => include_str!("../../shaders/binary.wgsl"),
        "unary" => include_str!("../../shaders/unary.wgsl"),
        "norm" => include_str!("../../shaders/norm.wgsl"),
        "softmax" => include_str!("../../shaders/softmax.wgsl"),
        "cpy" => include_str!("../../shaders/cpy.wgsl"),
        "get_rows" => include_str!("../../shaders/get_rows.wgsl"),
        "backward" => include_str!("../../shaders/backward.wgsl"),
        "out_prod" => include_str!("../../shaders/out_prod.wgsl"),
        "opt" => include_str!("../../shaders/opt.wgsl"),
        "mul_mat" => include_str!("../../shaders/mul_mat.wgsl"),
        "mul_mat_q" | "mul_mat_ln" => include_str!("../../shaders/mul_mat_q.wgsl"),
        "attn" => include_str!("../../shaders/attn.wgsl"),
        other => panic!("no shader file '{other}'"),
    };
    if !spec.is_empty() {
        src.push_str(include_str!("../../shaders/dequant.wgsl"));
        // WGSL has no generics: name the type's loaders under the names the kernels call.
        // `deq4`: 4 consecutive weights (k a multiple of 4, all 4 within the row).
        src.push_str(&format!(
            "\nfn deq_one(base: u32, k: u32) -> f32 {{ return deq_one_{spec}(base, k); }}\n\
             fn deq4(base: u32, k: u32) -> vec4<f32> {{ return deq4_{spec}(base, k); }}\n\
             fn dot_chunk(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {{ \
             return dot_chunk_{spec}(base, c, k_len, xb, xs); }}\n"
        ));
        // The activations' loader: src1 as it is, or (mul_mat_ln) its layer norm, staged in
        // workgroup memory by the kernel's prologue.
        src.push_str(if file == "mul_mat_ln" {
            include_str!("../../shaders/ln_input.wgsl")
        } else {
            "fn ldx(i: u32) -> f32 { return ld1_f32(i); }\nfn x_prologue(li: u32, n0: u32) {}\n"
        });
        // `ldx4`: element i of the first column and the same element of the next ones (src1's
        // columns b_nb.y apart; `x_cols` of them, set by the kernel, the other lanes 0).
        src.push_str(
            "var<private> x_cols: u32 = 1u;\n\
             fn ldx4(i: u32) -> vec4<f32> {\n\
             var v = vec4<f32>(ldx(i), 0.0, 0.0, 0.0);\n\
             if (x_cols > 1u) { v.y = ldx(i + p.b_nb.y); }\n\
             if (x_cols > 2u) { v.z = ldx(i + 2u * p.b_nb.y); }\n\
             if (x_cols > 3u) { v.w = ldx(i + 3u * p.b_nb.y); }\n\
             return v;\n}\n",
        );
        // The tiled kernel's weight tile: f16 when the weights are (exact), else f32.
        src.push_str(if ext.f16 { "alias tile_t = f16;\n" } else { "alias tile_t = f32;\n" });
    }
    if file == "mul_mat_q" || file == "mul_mat_ln" {
        src.push_str(if ext.subgroups {
            include_str!("../../shaders/reduce_subgroup.wgsl")
        } else {
            include_str!("../../shaders/reduce_workgroup.wgsl")
        });
    }
    src.push_str(body);
    src
}

/// Every shader module the backend can build, as (label, WGSL source): the kernel files
/// with the common prelude, the weight-type ones once per type, then the variants with
/// extensions (labels ending "+f16", "+subgroups"). For checks without a device (a WGSL
/// validator).
pub fn kernel_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in ["binary", "unary", "norm", "softmax", "cpy", "backward", "opt", "attn"] {
        out.push((file.to_string(), specialisation(file, "", Ext::default())));
    }
    let specs = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"];
    for file in ["get_rows", "mul_mat", "mul_mat_q", "mul_mat_ln", "out_prod"] {
        for spec in specs {
            out.push((format!("{file}:{spec}"), specialisation(file, spec, Ext::default())));
        }
    }
    for ext in [Ext { f16: true, subgroups: false }, Ext { f16: false, subgroups: true }] {
        for file in ["mul_mat", "mul_mat_q", "mul_mat_ln"] {
            for spec in specs {
                let e = ext.for_kernel(file, spec);
                if e == ext {
                    out.push((format!("{file}:{spec}{}", e.label()), specialisation(file, spec, e)));
                }
            }
        }
    }
    out
}

/// The device goes when its last holder (backend, buffer type, buffer) does, destroyed at
/// once: a dropped `GPUDevice` otherwise waits for the page's garbage collector, holding its
/// memory and queue, and headless Chromium's next `requestAdapter` stalled behind such devices
/// (tests/browser: a WebGPU test after the scheduler's, 277 s without an answer).
impl Drop for Gpu {
    fn drop(&mut self) {
        self.device.destroy();
    }
}

impl Gpu {
    pub async fn create(opts: &WebGpuOptions) -> Result<Gpu, BackendError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends =
            if cfg!(target_family = "wasm") { wgpu::Backends::BROWSER_WEBGPU } else { wgpu::Backends::VULKAN };
        let instance = wgpu::Instance::new(desc);
        let wait = opts.open_timeout_ms.unwrap_or(super::DEFAULT_OPEN_TIMEOUT_MS);
        let adapter = within(wait, "requestAdapter", async {
            instance
                .request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    force_fallback_adapter: opts.force_fallback_adapter,
                    ..Default::default()
                })
                .await
                .map_err(|e| BackendError::Unavailable(format!("no WebGPU adapter: {e}")))
        })
        .await?;
        let info = adapter.get_info();
        let alimits = adapter.limits();
        let has_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
        let has_subgroups = adapter.features().contains(wgpu::Features::SUBGROUP);
        // An extension is used when asked for (an error without it) or, by default, when there.
        let choose = |opt: Option<bool>, has: bool, what: &str| match opt {
            None => Ok(has),
            Some(false) => Ok(false),
            Some(true) if has => Ok(true),
            Some(true) => Err(BackendError::Unavailable(format!("adapter '{}' lacks {what}", info.name))),
        };
        let ext = Ext {
            subgroups: choose(opts.subgroups, has_subgroups, "the subgroups feature")?,
            f16: choose(opts.shader_f16, has_f16, "shader-f16")?,
        };
        // Ask for what the adapter has: WebGPU's defaults (128 MiB bindings, 256 MiB
        // buffers) are below what GPT-2's embedding needs on most devices.
        let limits = alimits.clone();
        if limits.max_storage_buffers_per_shader_stage < 8 || limits.max_compute_invocations_per_workgroup < 256 {
            return Err(BackendError::Unavailable(format!(
                "adapter '{}' lacks compute limits ggweb needs (8 storage buffers, 256 invocations)",
                info.name
            )));
        }
        // Only what the kernels use: a device without SUBGROUP is how the fallback is tested.
        let mut features = wgpu::Features::empty();
        features.set(wgpu::Features::SHADER_F16, ext.f16);
        features.set(wgpu::Features::SUBGROUP, ext.subgroups);
        let (device, queue) = within(wait, "requestDevice", async {
            adapter
                .request_device(&wgpu::DeviceDescriptor {
                    label: Some("ggweb"),
                    required_features: features,
                    required_limits: limits.clone(),
                    ..Default::default()
                })
                .await
                .map_err(|e| BackendError::Unavailable(format!("adapter '{}' refused a device: {e}", info.name)))
        })
        .await?;

        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(e.to_string());
        }));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost_sink = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            // The first reason wins (destroy_device records its own before the callback).
            lost_sink.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| format!("{reason:?}: {msg}"));
        });

        let storage_align = u64::from(limits.min_storage_buffer_offset_alignment).max(4);
        let mut max_binding = limits.max_storage_buffer_binding_size;
        let mut max_buffer = limits.max_buffer_size;
        if let Some(o) = opts.max_binding_size_override {
            max_binding = max_binding.min(o);
        }
        if let Some(o) = opts.max_buffer_size_override {
            max_buffer = max_buffer.min(o);
        }
        // Windows are aligned down to `storage_align` and sized in whole words.
        max_binding = max_binding / storage_align * storage_align;
        if max_binding < 2 * storage_align {
            return Err(BackendError::Unavailable(format!("max binding size {max_binding} is too small")));
        }

        let storage = |binding: u32| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ggweb kernels"),
            entries: &[
                storage(0),
                storage(1),
                storage(2),
                storage(3),
                storage(5),
                storage(6),
                storage(7),
                storage(8),
                wgpu::BindGroupLayoutEntry {
                    binding: 4,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: wgpu::BufferSize::new(PARAMS_STRIDE),
                    },
                    count: None,
                },
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("ggweb kernels"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let dummy = GpuBuffer::new(
            &device,
            &wgpu::BufferDescriptor {
                label: Some("ggweb unused bindings"),
                size: 256 * 8,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            },
        );
        let per_row = match opts.mat_mul_kernels {
            MatMulKernels::Auto => info.device_type == wgpu::DeviceType::Cpu,
            k => k == MatMulKernels::PerRow,
        };
        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            shader_f16: has_f16,
            subgroups: has_subgroups,
            subgroup_kernels: ext.subgroups,
            f16_kernels: ext.f16,
            max_binding_size: max_binding,
            max_buffer_size: max_buffer,
            mat_mul_kernels: if per_row { MatMulKernels::PerRow } else { MatMulKernels::Workgroup },
        };
        let gpu = Gpu {
            device,
            queue,
            summary,
            storage_align,
            max_binding,
            max_buffer,
            max_wg_dim: limits.max_compute_workgroups_per_dimension,
            per_row,
            ext,
            layout,
            pipeline_layout,
            dummy,
            modules: RefCell::default(),
            pipelines: RefCell::default(),
            params: RefCell::new(None),
            unsubmitted: Cell::new(0),
            largest_buffer: Cell::new(0),
            prefetched: RefCell::default(),
            stats: Cell::default(),
            clock: opts.encode_clock.unwrap_or(now_ms),
            errors,
            lost,
        };
        gpu.check()?;
        #[cfg(not(target_family = "wasm"))]
        if std::env::var_os("GGWEB_WEBGPU_INFO").is_some() {
            // For benchmark logs (scripts/device-bench.sh): which adapter and kernels ran.
            eprintln!("ggweb webgpu: {:?} (driver {} {})", gpu.summary, info.driver, info.driver_info);
        }
        Ok(gpu)
    }

    /// Updates the counters.
    pub fn count(&self, f: impl FnOnce(&mut WebGpuStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// `queue.submit`, counted.
    pub fn submit(&self, enc: wgpu::CommandEncoder) {
        self.queue.submit([enc.finish()]);
        self.count(|s| s.submits += 1);
    }

    /// A counted buffer on this device.
    pub fn create_buffer(&self, desc: &wgpu::BufferDescriptor<'_>) -> GpuBuffer {
        self.largest_buffer.set(self.largest_buffer.get().max(desc.size));
        GpuBuffer::new(&self.device, desc)
    }

    /// Why the device was lost, once it was (the reason stays: a lost device never returns).
    /// Records the loss at once, then destroys the device (see
    /// [`super::WebGpuBackend::destroy_device`]).
    pub fn destroy(&self) {
        {
            let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
            lost.get_or_insert_with(|| "Destroyed: the device was destroyed (WebGpuBackend::destroy_device)".into());
        }
        self.device.destroy();
    }

    pub fn lost_reason(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The errors the device reported since the last call, as one `BackendError`; once the
    /// device is lost, `DeviceLost` on every call.
    pub fn check(&self) -> Result<(), BackendError> {
        if let Some(msg) = self.lost_reason() {
            return Err(BackendError::DeviceLost(msg));
        }
        let mut errs = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errs.is_empty() {
            return Ok(());
        }
        let all = errs.join("\n");
        errs.clear();
        Err(BackendError::Other(format!("WebGPU error: {all}")))
    }

    /// The pipeline for `entry` of kernel file `file` specialised for weight type `spec`
    /// ("" when the file has no type parameter) and for the bindings src0..src2 and slots
    /// 4..7 are read from (`homes`: the B0, B1, B2, B4..B7 constants), plus the mat-vec kernels' column count
    /// (NCOL), compiled on first use. The key names the extensions in use (`self.ext`).
    pub fn pipeline(
        &self,
        file: &str,
        spec: &str,
        entry: &str,
        homes: [u32; 7],
        ncol: Option<u32>,
    ) -> wgpu::ComputePipeline {
        let ext = self.ext.for_kernel(file, spec);
        let key = format!("{file}:{spec}{}:{entry}:{homes:?}:{ncol:?}", ext.label());
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return p.clone();
        }
        let mkey = format!("{file}:{spec}{}", ext.label());
        let module = {
            let mut modules = self.modules.borrow_mut();
            modules
                .entry(mkey.clone())
                .or_insert_with(|| {
                    self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(&mkey),
                        source: wgpu::ShaderSource::Wgsl(specialisation(file, spec, ext).into()),
                    })
                })
                .clone()
        };
        let mut constants = vec![
            ("B0", f64::from(homes[0])),
            ("B1", f64::from(homes[1])),
            ("B2", f64::from(homes[2])),
            ("B4", f64::from(homes[3])),
            ("B5", f64::from(homes[4])),
            ("B6", f64::from(homes[5])),
            ("B7", f64::from(homes[6])),
        ];
        if let Some(n) = ncol {
            constants.push(("NCOL", f64::from(n)));
        }
        let p = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&key),
            layout: Some(&self.pipeline_layout),
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        self.pipelines.borrow_mut().insert(key, p.clone());
        p
    }

    /// (x, y) workgroup counts covering `groups` linear workgroups (x at most the limit).
    pub fn fold(&self, groups: u64, what: &Tensor) -> Result<(u32, u32), BackendError> {
        let max = u64::from(self.max_wg_dim);
        let x = groups.clamp(1, max);
        let y = groups.div_ceil(x).max(1);
        if y > max {
            return Err(super::unsupported(what, format!("{groups} workgroups exceed {max}²")));
        }
        Ok((x as u32, y as u32))
    }
}

/// A monotonic clock in milliseconds, for the encode-time counter: `Instant` natively,
/// `performance.now()` in a browser (window or worker; 0 where there is none).
#[cfg(not(target_family = "wasm"))]
pub(crate) fn now_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
}

#[cfg(target_family = "wasm")]
pub(crate) fn now_ms() -> f64 {
    use wasm_bindgen::JsCast;
    let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok().filter(|p| p.is_object());
    perf.and_then(|p| {
        let now: js_sys::Function = js_sys::Reflect::get(&p, &"now".into()).ok()?.dyn_into().ok()?;
        now.call0(&p).ok()?.as_f64()
    })
    .unwrap_or(0.0)
}

/// `fut`, or `Unavailable` naming `what` if it has not settled after `ms` milliseconds (the
/// browser's promises for an adapter or a device may never settle). The timer is the global
/// `setTimeout` (window, worker and Node alike); where there is none, `fut` alone decides.
#[cfg(target_family = "wasm")]
async fn within<T>(
    ms: u32,
    what: &str,
    fut: impl core::future::Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    use core::future::Future;
    use core::task::Poll;
    use wasm_bindgen::{JsCast, JsValue};
    let timer = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::new(&mut |resolve, _reject| {
        let set = js_sys::Reflect::get(&js_sys::global(), &"setTimeout".into())
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
        if let Some(set) = set {
            let _ = set.call2(&JsValue::UNDEFINED, &resolve, &JsValue::from(ms));
        }
    }));
    let (mut fut, mut timer) = (core::pin::pin!(fut), core::pin::pin!(timer));
    core::future::poll_fn(|cx| {
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(_) => Poll::Ready(Err(BackendError::Unavailable(format!(
                "WebGPU's {what} did not answer within {ms} ms (the browser's GPU process may be stuck)"
            )))),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Natively wgpu's requests settle at once (or fail): no deadline.
#[cfg(not(target_family = "wasm"))]
async fn within<T>(
    _ms: u32,
    _what: &str,
    fut: impl core::future::Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    fut.await
}
