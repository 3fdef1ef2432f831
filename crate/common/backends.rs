//! [`open_backends`], the one place a front end chooses its backends: cpu / webgpu / auto,
//! the fallback note, the `gpuLayers` split (llama.cpp's `common` does this for its tools).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use super::options::{BackendChoice, LoadOptions};
use crate::backend::{Backend, BackendError};
use crate::gguf::Limits;
use crate::model::context::Gpt2Options;
use crate::model::loader::ModelLoader;
use crate::webgpu::{WebGpuBackend, WebGpuOptions};

/// The backends a load runs on ([`open_backends`]).
pub struct Backends {
    /// What runs the model: "cpu" or "webgpu" (a split is "webgpu"), `info().backend`.
    pub name: &'static str,
    /// The WebGPU backend, when one was opened (device-loss checks).
    pub gpu: Option<WebGpuBackend>,
    /// The CPU backend, when the model, or part of it, runs there.
    pub cpu: Option<Rc<dyn Backend>>,
    /// `gpuLayers` of a split model (the last N blocks on WebGPU, the rest on the CPU).
    pub split: Option<usize>,
    /// Why the backend is not the one asked for (`"auto"` without a usable WebGPU).
    pub note: Option<String>,
}

impl Backends {
    /// In the scheduler's order: WebGPU first, the CPU last (it runs what WebGPU lacks).
    pub fn list(&self) -> Vec<Rc<dyn Backend>> {
        let gpu = self.gpu.as_ref().map(|g| Rc::new(g.clone()) as Rc<dyn Backend>);
        gpu.into_iter().chain(self.cpu.clone()).collect()
    }

    /// A streaming loader for a model on these backends.
    pub fn loader(&self, opts: Gpt2Options, limits: Limits, file_size: Option<u64>) -> ModelLoader {
        let mut list = self.list();
        match self.split {
            Some(n) if list.len() == 2 => {
                let cpu = list.pop().expect("two backends");
                ModelLoader::new_split(list.pop().expect("two backends"), cpu, n, opts, limits, file_size)
            }
            _ => ModelLoader::new(list.swap_remove(0), opts, limits, file_size),
        }
    }
}

/// Opens the backends `opts` asks for, the one policy of every front end (the JS bindings,
/// `Model.inspect`, `ggweb run` and `ggweb inspect`): "cpu" (the default) is the CPU alone
/// (`gpuLayers` ignored); "webgpu" opens a WebGPU device or fails; "auto" falls back to the
/// CPU when WebGPU is not usable, saying why in `note`. With `gpuLayers` a WebGPU model is
/// split with the CPU. `cpu` makes the CPU backend, only when one is needed. Natively drive
/// it with `block_on`: WebGPU opens without waiting on anything but the driver.
pub async fn open_backends(
    opts: &LoadOptions,
    webgpu: WebGpuOptions,
    cpu: impl FnOnce() -> Rc<dyn Backend>,
) -> Result<Backends, BackendError> {
    let choice = opts.backend();
    let on_cpu = |cpu: Rc<dyn Backend>, note| Backends { name: "cpu", gpu: None, cpu: Some(cpu), split: None, note };
    if choice == BackendChoice::Cpu {
        return Ok(on_cpu(cpu(), None));
    }
    let opened = match webgpu_missing() {
        Some(why) => Err((why.clone(), BackendError::Unavailable(format!("{why}; use backend \"cpu\"")))),
        None => WebGpuBackend::new_async(webgpu).await.map_err(|e| (format!("WebGPU is not usable ({e})"), e)),
    };
    match opened {
        Ok(gpu) => {
            let cpu = opts.gpu_layers.map(|_| cpu());
            Ok(Backends { name: "webgpu", gpu: Some(gpu), cpu, split: opts.gpu_layers, note: None })
        }
        Err((why, _)) if choice == BackendChoice::Auto => {
            Ok(on_cpu(cpu(), Some(format!("backend \"auto\": {why}; running on the CPU"))))
        }
        Err((_, e)) => Err(e),
    }
}

/// Why WebGPU cannot even be asked for here: this build has none, or (in a browser, a
/// worker, Node) the global `navigator.gpu` is missing. None when an adapter may be asked for.
fn webgpu_missing() -> Option<String> {
    if cfg!(not(feature = "webgpu")) {
        return Some("this build of the wasm module has no WebGPU backend".into());
    }
    #[cfg(target_family = "wasm")]
    {
        let get =
            |o: &wasm_bindgen::JsValue, k: &str| js_sys::Reflect::get(o, &k.into()).ok().filter(|v| !v.is_undefined());
        if get(&js_sys::global().into(), "navigator").and_then(|n| get(&n, "gpu")).is_none() {
            return Some("WebGPU is not available here (navigator.gpu is missing)".into());
        }
    }
    None
}
