//! WebGPU buffers: allocation rules, byte-exact writes, staged reads.

use std::rc::Rc;

use super::device::{Gpu, GpuBuffer, PARAMS_STRIDE, P_MISC, P_OFF};
use crate::allocator::align_up;
use crate::backend::host::in_bounds;
use crate::backend::{BackendError, Buffer, BufferType};
use crate::tensor::Tensor;

/// Bytes of queued `write_buffer` data after which a load submits them (bounds the staging
/// memory of a streamed load: see `WebGpuBuffer::flush_uploads`).
const UPLOAD_FLUSH: u64 = 32 << 20;

/// ggml_backend_webgpu_buffer_type: storage buffers of one device.
#[derive(Clone)]
pub struct WebGpuBufferType {
    pub(crate) gpu: Rc<Gpu>,
}

impl BufferType for WebGpuBufferType {
    fn name(&self) -> &str {
        "WebGPU"
    }
    /// Tensors start where a storage binding may start (minStorageBufferOffsetAlignment).
    fn alignment(&self) -> usize {
        self.gpu.storage_align as usize
    }
    /// At most isize::MAX: sizes within a buffer are summed in `usize` (wasm32's is 32 bits,
    /// while a GPU's buffers may be larger), and a larger model takes several buffers.
    fn max_size(&self) -> usize {
        usize::try_from(self.gpu.max_buffer).unwrap_or(usize::MAX).min(isize::MAX as usize)
    }
    /// What `row_parts` (compute.rs) fits in one binding: a window starts up to one
    /// storage alignment before the tensor and ends on a whole word.
    fn max_binding(&self) -> u64 {
        self.gpu.max_binding.saturating_sub(self.gpu.storage_align + 4)
    }
    /// Whole words: kernels read and write u32s, so the last word of a tensor must exist.
    fn alloc_size(&self, t: &Tensor) -> usize {
        align_up(t.nbytes(), 4)
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(WebGpuBuffer::new(self.gpu.clone(), size)?))
    }
}

/// One device buffer (STORAGE | COPY_SRC | COPY_DST).
pub struct WebGpuBuffer {
    pub(crate) gpu: Rc<Gpu>,
    pub(crate) buf: GpuBuffer,
    size: usize,
}

impl WebGpuBuffer {
    pub(crate) fn new(gpu: Rc<Gpu>, size: usize) -> Result<WebGpuBuffer, BackendError> {
        let padded = align_up(size.max(4), 4) as u64;
        if padded > gpu.max_buffer {
            return Err(BackendError::OutOfMemory {
                what: "WebGPU buffer (maxBufferSize)".into(),
                requested: size,
                limit: gpu.max_buffer as usize,
            });
        }
        gpu.check()?;
        let buf = gpu.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggweb tensors"),
            size: padded,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        gpu.check().map_err(|e| BackendError::OutOfMemory {
            what: format!("WebGPU buffer ({e})"),
            requested: size,
            limit: gpu.max_buffer as usize,
        })?;
        Ok(WebGpuBuffer { gpu, buf, size })
    }

    /// The wgpu buffer, for code that binds it directly.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buf
    }

    /// Reads `out.len()` bytes at `offset` without blocking (the browser's way; natively
    /// the device is polled until the copy is done).
    pub async fn read_async(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        if out.is_empty() {
            return Ok(());
        }
        if !in_bounds(offset, out.len(), self.size) {
            return Err(BackendError::Other(format!(
                "WebGPU read of {} bytes at {offset} past the buffer's {} bytes",
                out.len(),
                self.size
            )));
        }
        // A lost device maps nothing: say so rather than fail the mapping obscurely.
        self.gpu.check()?;
        super::readback::read(&self.gpu, &self.buf, offset, out).await
    }

    /// Writes `data` at `offset` byte-exactly: the word-aligned middle by
    /// `queue.write_buffer`, partial words at either end by a masked-store kernel (no
    /// read-back, so it works in the browser too).
    fn write(&self, offset: usize, data: &[u8]) {
        let gpu = &self.gpu;
        gpu.drop_prefetched();
        let end = offset + data.len();
        let mid_lo = align_up(offset, 4).min(end);
        let mid_hi = (end / 4 * 4).max(mid_lo);
        if mid_hi > mid_lo {
            gpu.queue.write_buffer(&self.buf, mid_lo as u64, &data[mid_lo - offset..mid_hi - offset]);
            self.flush_uploads((mid_hi - mid_lo) as u64);
        }
        // (word, mask, value) for the bytes outside [mid_lo, mid_hi).
        let mut patches: Vec<[u32; 3]> = Vec::new();
        let mut add = |range: core::ops::Range<usize>| {
            for pos in range {
                let word = (pos / 4) as u32;
                let shift = (pos % 4) * 8;
                let byte = u32::from(data[pos - offset]);
                match patches.iter_mut().find(|p| p[0] == word) {
                    Some(p) => {
                        p[1] |= 0xff << shift;
                        p[2] |= byte << shift;
                    }
                    None => patches.push([word, 0xff << shift, byte << shift]),
                }
            }
        };
        add(offset..mid_lo);
        add(mid_hi.max(mid_lo)..end);
        if !patches.is_empty() {
            self.patch(&patches);
        }
    }

    /// Submits the queued writes once `UPLOAD_FLUSH` bytes are waiting. wgpu copies each
    /// `write_buffer` into a staging buffer that lives until the next submit completes: a
    /// model streamed in without one would hold a second copy of all its weights there.
    /// Natively the copy is waited for; in the browser the implementation (Dawn) stages
    /// outside the wasm heap and this only keeps its queue short.
    fn flush_uploads(&self, bytes: u64) {
        let gpu = &self.gpu;
        let n = gpu.unsubmitted.get() + bytes;
        if n < UPLOAD_FLUSH {
            gpu.unsubmitted.set(n);
            return;
        }
        gpu.unsubmitted.set(0);
        gpu.queue.submit([]);
        #[cfg(not(target_family = "wasm"))]
        // A failed wait (a lost device) shows at the next check; nothing to do about it here.
        let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
    }

    fn patch(&self, patches: &[[u32; 3]]) {
        let gpu = &self.gpu;
        let pipeline = gpu.pipeline("cpy", "", "patch_words", [0, 1, 2, 4, 5, 6, 7], None);
        // One patch (at most two: the partial words at either end) per dispatch, each with
        // its triple in its own aligned slot and its own small window of the buffer.
        let slot = gpu.storage_align.max(16);
        let n = patches.len() as u64;
        let triples = gpu.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggweb byte patches"),
            size: slot * n,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let params = gpu.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggweb patch params"),
            size: PARAMS_STRIDE * n,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut windows = Vec::new();
        for (i, p) in patches.iter().enumerate() {
            let i = i as u64;
            gpu.queue.write_buffer(&triples, slot * i, bytemuck::cast_slice(&p[..]));
            let start = (u64::from(p[0]) * 4) / gpu.storage_align * gpu.storage_align;
            let mut words = [0u32; (PARAMS_STRIDE / 4) as usize];
            words[P_MISC] = 1; // one triple
            words[P_OFF + 3] = (start / 4) as u32;
            gpu.queue.write_buffer(&params, PARAMS_STRIDE * i, bytemuck::cast_slice(&words));
            windows.push((start, u64::from(p[0]) * 4 + 4 - start));
        }
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ggweb patch") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("ggweb patch"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline);
            for (i, (start, size)) in windows.iter().enumerate() {
                let i = i as u64;
                let bg = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &gpu.layout,
                    entries: &[
                        entry(0, &triples, slot * i, 12),
                        entry(1, &gpu.dummy, 256, 256),
                        entry(2, &gpu.dummy, 512, 256),
                        entry(3, &self.buf, *start, *size),
                        entry(4, &params, 0, PARAMS_STRIDE),
                        entry(5, &gpu.dummy, 1024, 256),
                        entry(6, &gpu.dummy, 1280, 256),
                        entry(7, &gpu.dummy, 1536, 256),
                        entry(8, &gpu.dummy, 1792, 256),
                    ],
                });
                pass.set_bind_group(0, &bg, &[(PARAMS_STRIDE * i) as u32]);
                pass.dispatch_workgroups(1, 1, 1);
            }
        }
        gpu.submit(enc);
        gpu.count(|s| s.dispatches += n);
    }
}

pub(crate) fn entry(binding: u32, buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset,
            size: wgpu::BufferSize::new(size),
        }),
    }
}

impl Buffer for WebGpuBuffer {
    fn buffer_type_name(&self) -> &str {
        "WebGPU"
    }
    fn size(&self) -> usize {
        self.size
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) {
        assert!(
            in_bounds(offset, data.len(), self.size),
            "set_bytes: {}+{} past {} bytes",
            offset,
            data.len(),
            self.size
        );
        self.write(offset, data);
    }
    /// Natively: copies to a staging buffer, maps it and waits. In the browser this cannot
    /// wait and panics: use `WebGpuBackend::read_tensor_async` / `WebGpuBuffer::read_async`.
    fn get_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(
            in_bounds(offset, out.len(), self.size),
            "get_bytes: {}+{} past {} bytes",
            offset,
            out.len(),
            self.size
        );
        if let Err(e) = self.try_get_bytes(offset, out) {
            panic!("WebGPU get_bytes of {} bytes at {offset}: {e}", out.len());
        }
    }
    /// Natively as `get_bytes`, with a lost device as `DeviceLost`; in the browser an
    /// `Unsupported` error (a read there must be awaited: `read_async`).
    fn try_get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        #[cfg(target_family = "wasm")]
        {
            let _ = (offset, out);
            Err(BackendError::Unsupported {
                node: String::from("(buffer read)"),
                reason: String::from("WebGPU memory cannot be read synchronously in the browser: use read_async"),
            })
        }
        #[cfg(not(target_family = "wasm"))]
        pollster::block_on(self.read_async(offset, out))
    }
    fn clear(&self, value: u8) {
        let gpu = &self.gpu;
        if value == 0 {
            let mut enc =
                gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ggweb clear") });
            gpu.drop_prefetched();
            enc.clear_buffer(&self.buf, 0, None);
            gpu.submit(enc);
            return;
        }
        let chunk = vec![value; self.size.min(1 << 20)];
        let mut at = 0;
        while at < self.size {
            let n = chunk.len().min(self.size - at);
            self.write(at, &chunk[..n]);
            at += n;
        }
    }
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}
