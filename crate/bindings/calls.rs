//! The long calls for JS, all through one entry point: `WasmModel.call(method, inputs,
//! options, checkpoint)` (and `callSae` for a call on an SAE) dispatches by name through the
//! one method table ([`crate::common::methods`]): the options parsed strictly into the
//! entry's struct (unknown keys and bad values `invalid`, naming the key), each input checked
//! (`check_input`), the session's function run with the caller's `checkpoint` asked between
//! its steps ([`interrupt`]: the JS `signal`), and its result serialized as it is (the model's
//! result types are in the API's shape). Errors carry no method name: engine.js adds it.

use wasm_bindgen::prelude::*;

use super::inside::WasmSae;
use super::model::{from_js, interrupt, model_error, to_js, WasmModel};
use crate::common::methods::{api_calls, method, DEFAULT_TOP_K, METHODS};
use crate::common::options;
use crate::model::sae::Sae;

/// The table's names, inputs and flags (`[{ name, public, inputs, sae }]`), so that the JS
/// side can check that this module has the calls web/methods.js names.
#[wasm_bindgen]
pub fn methods() -> JsValue {
    #[derive(serde::Serialize)]
    struct M {
        name: &'static str,
        public: &'static str,
        inputs: &'static [&'static str],
        sae: bool,
    }
    let all: alloc::vec::Vec<M> =
        METHODS.iter().map(|m| M { name: m.name, public: m.public, inputs: m.inputs, sae: m.sae }).collect();
    to_js(&all)
}

/// `inputs` (an array of token id arrays) as vectors.
fn token_inputs(inputs: &js_sys::Array) -> alloc::vec::Vec<alloc::vec::Vec<u32>> {
    inputs
        .iter()
        .map(|v| match v.dyn_into::<js_sys::Uint32Array>() {
            Ok(a) => a.to_vec(),
            Err(v) => js_sys::Uint32Array::new(&v).to_vec(),
        })
        .collect()
}

macro_rules! dispatch {
    (@sae $v:ident sae) => { $v.expect("checked above") };
    (@sae $v:ident) => { () };
    ($( $(#[doc = $doc:literal])* $name:literal $([$sae:ident])? $(as $public:literal)? ($($input:ident),+), |$p:ident: $params:ty| $prep:expr
        => |$s:ident, $o:pat_param, $sae_arg:pat_param| $call:expr; )*) => {
        impl WasmModel {
            async fn dispatch(
                &mut self,
                name: &str,
                sae: Option<&Sae>,
                inputs: js_sys::Array,
                opts: JsValue,
                checkpoint: Option<js_sys::Function>,
            ) -> Result<JsValue, JsValue> {
                let Some(m) = method(name) else {
                    return Err(super::js_error("invalid", alloc::format!("unknown method {name:?}")));
                };
                if m.sae != sae.is_some() {
                    let how = if m.sae { "callSae" } else { "call" };
                    return Err(super::js_error("invalid", alloc::format!("{name} is called through {how}")));
                }
                let n = m.inputs.len();
                if inputs.length() as usize != n {
                    return Err(super::js_error("invalid", alloc::format!("{name} takes {n} token inputs, got {}", inputs.length())));
                }
                let ids = token_inputs(&inputs);
                match name {
                    $($name => {
                        let $p: $params = from_js(m.what, opts)?;
                        let $o = $prep.map_err(|e| model_error("", e))?;
                        for (label, ids) in m.inputs.iter().zip(&ids) {
                            self.check_input(if n > 1 { label } else { "" }, ids)?;
                        }
                        let mut ids = ids.into_iter();
                        $(let $input = ids.next().expect("counted");)+
                        let $sae_arg = dispatch!(@sae sae $($sae)?);
                        let r = self.session.interruptible(interrupt(checkpoint), async |$s| $call.await).await;
                        Ok(to_js(&r.map_err(|e| model_error("", e))?))
                    })*
                    _ => unreachable!("every entry of METHODS has an arm"),
                }
            }
        }
    };
}
api_calls!(dispatch);

#[wasm_bindgen]
impl WasmModel {
    /// A long call of the method table (`score`, `trace`, `run`, `patch`, `logitLens`,
    /// `attribute`): `inputs` its token inputs (arrays of ids, in the table's order),
    /// `opts` its options; `checkpoint` (optional) is asked between steps whether the
    /// caller stopped. Resolves with the call's result in the API's shape.
    pub async fn call(
        &mut self,
        method: String,
        inputs: js_sys::Array,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        self.dispatch(&method, None, inputs, opts, checkpoint).await
    }

    /// A long call on an SAE (`saeEncode`): as `call`, with the SAE first.
    #[wasm_bindgen(js_name = callSae)]
    pub async fn call_sae(
        &mut self,
        method: String,
        sae: &WasmSae,
        inputs: js_sys::Array,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        self.dispatch(&method, Some(sae.sae()), inputs, opts, checkpoint).await
    }
}
