//! The one method table of the API's long calls: a call that evaluates token inputs with
//! options, may run for seconds, and stops at its next step when the caller's `signal` aborts.
//! Each entry names the call as JS spells it, its token inputs, its options (the struct of
//! [`super::options`] they parse into, and what that gives the session) and the
//! [`Session`](crate::model::session::Session) function it runs; its doc comment is copied into
//! `web/methods.js` (the JS method's own docs and types are in `web/ggweb.d.ts`).
//!
//! Every layer reads this table: the wasm bindings dispatch `WasmModel.call(method, inputs,
//! options, checkpoint)` through it (crate/bindings/calls.rs), and `web/methods.js`, generated
//! from it ([`methods_js`], checked by this module's test), gives the page's `Model`, the
//! worker's allow-list and the engine the same names, inputs and flags. Adding a call is its
//! `Session` function, one entry here, and its types and doc in `web/ggweb.d.ts`; then
//! `GGWEB_BLESS=1 cargo test --lib methods` writes `web/methods.js` again. (A call whose
//! options are a new struct adds it to `options.rs`.)

use alloc::string::String;
use alloc::vec::Vec;

/// The default `topK` of `logitLens` and `sae.encode`.
pub const DEFAULT_TOP_K: u32 = 5;

/// Calls `$then!` with every entry of the table:
/// `/// doc` `"jsName" [[sae]] [as "public.name"] (input, ...), |params: Type| prepare => |session, prepared, sae| call;`
/// where `params` are the options as parsed (errors name them "<public name> options"),
/// `prepare` turns them into what the call takes (a `Result<_, ModelError>`), and `call` is
/// the session's future; `sae` marks a call on an SAE (`sae.encode`), whose handle comes
/// before the inputs.
macro_rules! api_calls {
    ($then:ident) => {
        $then! {
            /// Logprobs, ranks, entropies and the `topK` most likely tokens of every prediction.
            "score" (input), |p: serde_json::Value| options::score_options(p)
                => |s, o, _sae| s.score(&input, o.top_k, &o.hooks);
            /// Attention probabilities, hidden states and graph nodes of one pass.
            "trace" (input), |p: serde_json::Value| options::trace_options(p)
                => |s, taps, _sae| s.trace(&input, &taps);
            /// One forward pass with TransformerLens hooks and captures (and `grad`: a backward pass).
            "run" (input), |p: options::RunParams| Ok(p)
                => |s, p, _sae| s.run_grad(&input, &p.capture.unwrap_or_default(), &p.hooks.unwrap_or_default(), p.grad.as_ref());
            /// An activation patching sweep of `corrupted` with `clean`'s activations (exact, or attribution patching).
            "patch" (clean, corrupted), |p: options::PatchParams| Ok(p)
                => |s, p, _sae| s.patch(&clean, &corrupted, &p.at, p.answer, p.against, p.method.as_deref());
            /// Input attribution on the token embeddings: gradient, gradient × input or integrated gradients.
            "saliency" (input), |p: options::SaliencyParams| Ok(p)
                => |s, p, _sae| s.saliency(&input, &p.of, &p.method, p.steps);
            /// The logit lens: every layer's residual through the final LayerNorm and the unembedding.
            "logitLens" (input), |p: options::TopKParams| Ok(p.top_k.unwrap_or(DEFAULT_TOP_K) as usize)
                => |s, k, _sae| s.logit_lens(&input, k);
            /// Direct logit attribution of `logit[answer] − logit[against]` at `pos` (default −1).
            "attribute" (input), |p: options::AttributeParams| Ok(p)
                => |s, p, _sae| s.attribute(&input, p.answer, p.against, p.pos.unwrap_or(-1));
            /// An SAE's features of `input`: the top `topK` per position, l0 and the reconstruction's MSE.
            "saeEncode" [sae] as "sae.encode" (input), |p: options::TopKParams| Ok(p.top_k.unwrap_or(DEFAULT_TOP_K) as usize)
                => |s, k, sae| s.sae_encode(&input, sae, k);
        }
    };
}
// Read by the wasm bindings' dispatcher only (native builds expand it for METHODS alone).
#[cfg_attr(not(target_family = "wasm"), allow(unused_imports))]
pub(crate) use api_calls;

/// One entry of the table, as the JS side reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method {
    /// The wasm and engine name (`logitLens`).
    pub name: &'static str,
    /// The public name, for error messages (`sae.encode`).
    pub public: &'static str,
    /// What errors in its options are prefixed with (`"sae.encode options"`).
    pub what: &'static str,
    /// Its token inputs, in argument order (`["clean", "corrupted"]`).
    pub inputs: &'static [&'static str],
    /// A call on an SAE: the SAE's handle comes first.
    pub sae: bool,
    /// Its doc comment.
    pub doc: &'static str,
}

macro_rules! table {
    ($( $(#[doc = $doc:literal])* $name:literal $([$sae:ident])? $(as $public:literal)? ($($input:ident),+), |$p:ident: $params:ty| $prep:expr
        => |$s:ident, $o:pat_param, $sae_arg:pat_param| $call:expr; )*) => {
        /// Every long call, in the order of the API's docs.
        pub const METHODS: &[Method] = &[$(Method {
            name: $name,
            public: table!(@public $name $(, $public)?),
            what: concat!(table!(@public $name $(, $public)?), " options"),
            inputs: &[$(stringify!($input)),+],
            sae: table!(@sae $($sae)?),
            doc: concat!($($doc, "\n"),*),
        }),*];
    };
    (@public $name:literal) => { $name };
    (@public $name:literal, $public:literal) => { $public };
    (@sae sae) => { true };
    (@sae) => { false };
}
api_calls!(table);

/// The table's entry for `name`.
pub fn method(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// `web/methods.js`: the table as the JS side imports it.
pub fn methods_js() -> String {
    let mut out = String::from(
        "// Generated from crate/common/methods.rs (the one method table) by\n\
         // `GGWEB_BLESS=1 cargo test --lib methods`: do not edit. `cargo test` fails when it is stale.\n\
         //\n\
         // The API's long calls: each takes token inputs (a string or ids) and options, runs in\n\
         // wasm through WasmModel.call (or callSae), and stops at its next step when its signal aborts.\n\
         // name → { public: the name errors use, inputs: the token inputs in argument order,\n\
         //          sae: a call on an SAE (its handle first) }\n\
         export const METHODS = Object.freeze({\n",
    );
    for m in METHODS {
        for line in m.doc.lines() {
            out.push_str(&alloc::format!("  /**{line} */\n"));
        }
        let inputs: Vec<String> = m.inputs.iter().map(|i| alloc::format!("'{i}'")).collect();
        out.push_str(&alloc::format!(
            "  {}: Object.freeze({{ public: '{}', inputs: Object.freeze([{}]), sae: {} }}),\n",
            m.name,
            m.public,
            inputs.join(", "),
            m.sae
        ));
    }
    out.push_str("});\n");
    out
}

#[cfg(test)]
mod tests {
    extern crate std;

    /// web/methods.js is the table's current text (`GGWEB_BLESS=1` writes it).
    #[test]
    fn methods_js_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/web/methods.js");
        let want = super::methods_js();
        if std::env::var_os("GGWEB_BLESS").is_some() {
            std::fs::write(path, &want).expect("write web/methods.js");
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(have == want, "web/methods.js is stale: run GGWEB_BLESS=1 cargo test --lib methods");
    }

    #[test]
    fn names_are_unique() {
        for (i, m) in super::METHODS.iter().enumerate() {
            assert!(super::METHODS[..i].iter().all(|n| n.name != m.name), "{} twice", m.name);
        }
    }
}
