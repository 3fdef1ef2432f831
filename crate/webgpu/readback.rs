//! Reading device memory back (part of the device layer: it knows wgpu buffers, not
//! tensors): staging copies, their mapping, and the prefetch of spans a graph asks for
//! inside the graph's own submit.
//!
//! A read of a tensor is a copy into a MAP_READ staging buffer, a submit, and a map. For
//! the tensors a graph marks as outputs (the logits) the copy is recorded at the end of the
//! graph's command buffer instead, so the read that follows maps it without a second
//! submit: one submit per token. A prefetched copy is valid until the next graph or write
//! on the device, whichever comes first (both drop it), and is used by one read.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

use super::device::{Gpu, GpuBuffer, Prefetched};
use crate::allocator::align_up;
use crate::backend::BackendError;

fn staging_buffer(gpu: &Gpu, size: u64) -> GpuBuffer {
    gpu.create_buffer(&wgpu::BufferDescriptor {
        label: Some("ggweb readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

impl Gpu {
    /// Records, at the end of `enc`, copies of bytes `[lo, hi)` of each buffer in `spans`
    /// (word-aligned; a graph's outputs, see `compute.rs`), and keeps them for the reads
    /// that follow.
    pub(crate) fn prefetch(&self, enc: &mut wgpu::CommandEncoder, spans: Vec<(wgpu::Buffer, u64, u64)>) {
        let mut kept = Vec::new();
        for (src, lo, hi) in spans.into_iter().filter(|&(_, lo, hi)| lo < hi) {
            let staging = staging_buffer(self, hi - lo);
            enc.copy_buffer_to_buffer(&src, lo, &staging, 0, hi - lo);
            kept.push(Prefetched { src, lo, hi, staging });
        }
        *self.prefetched.borrow_mut() = kept;
    }

    /// Forgets the prefetched copies (the device memory they mirror is about to change).
    pub(crate) fn drop_prefetched(&self) {
        self.prefetched.borrow_mut().clear();
    }

    /// A prefetched copy holding bytes `[lo, hi)` of `src`, with where its byte 0 was in `src`.
    fn take_prefetched(&self, src: &wgpu::Buffer, lo: u64, hi: u64) -> Option<(GpuBuffer, u64)> {
        let mut all = self.prefetched.borrow_mut();
        let i = all.iter().position(|p| p.src == *src && p.lo <= lo && hi <= p.hi)?;
        let p = all.swap_remove(i);
        Some((p.staging, p.lo))
    }
}

/// Reads `out.len()` bytes at byte `offset` of `src`: from the last graph's prefetched
/// copy when it holds them, else through a staging copy of its own (one more submit).
pub(crate) async fn read(gpu: &Gpu, src: &wgpu::Buffer, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
    let lo = (offset / 4 * 4) as u64;
    let hi = align_up(offset + out.len(), 4) as u64;
    let (staging, base) = match gpu.take_prefetched(src, lo, hi) {
        Some(p) => p,
        None => {
            let staging = staging_buffer(gpu, hi - lo);
            let mut enc =
                gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ggweb read") });
            enc.copy_buffer_to_buffer(src, lo, &staging, 0, hi - lo);
            gpu.submit(enc);
            (staging, lo)
        }
    };
    let done = MapDone::default();
    let signal = done.0.clone();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let mut s = signal.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = Some(r.map_err(|e| e.to_string()));
        if let Some(w) = s.1.take() {
            w.wake();
        }
    });
    #[cfg(not(target_family = "wasm"))]
    if let Err(e) = gpu.device.poll(wgpu::PollType::wait_indefinitely()) {
        gpu.check()?;
        return Err(BackendError::Other(format!("WebGPU poll while reading: {e}")));
    }
    if let Err(e) = done.await {
        // The device lost mid-read is the usual cause; its reason says more than the map's.
        gpu.check()?;
        return Err(BackendError::Other(format!("WebGPU map for reading: {e}")));
    }
    {
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| BackendError::Other(format!("WebGPU mapped range: {e:?}")))?;
        let at = offset - base as usize;
        out.copy_from_slice(&view[at..at + out.len()]);
    }
    staging.unmap();
    gpu.count(|s| {
        s.readbacks += 1;
        s.readback_bytes += out.len() as u64;
    });
    gpu.check()
}

/// Completion of `map_async`, awaitable on any executor (the callback runs from
/// `device.poll` natively, from the browser's event loop in wasm).
#[derive(Default)]
struct MapDone(Arc<Mutex<MapState>>);
type MapState = (Option<Result<(), String>>, Option<Waker>);

impl Future for MapDone {
    type Output = Result<(), String>;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match s.0.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
