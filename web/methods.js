// Generated from crate/common/methods.rs (the one method table) by
// `GGWEB_BLESS=1 cargo test --lib methods`: do not edit. `cargo test` fails when it is stale.
//
// The API's long calls: each takes token inputs (a string or ids) and options, runs in
// wasm through WasmModel.call (or callSae), and stops at its next step when its signal aborts.
// name → { public: the name errors use, inputs: the token inputs in argument order,
//          sae: a call on an SAE (its handle first) }
export const METHODS = Object.freeze({
  /** Logprobs, ranks, entropies and the `topK` most likely tokens of every prediction. */
  score: Object.freeze({ public: 'score', inputs: Object.freeze(['input']), sae: false }),
  /** Attention probabilities, hidden states and graph nodes of one pass. */
  trace: Object.freeze({ public: 'trace', inputs: Object.freeze(['input']), sae: false }),
  /** One forward pass with TransformerLens hooks and captures (and `grad`: a backward pass). */
  run: Object.freeze({ public: 'run', inputs: Object.freeze(['input']), sae: false }),
  /** An activation patching sweep of `corrupted` with `clean`'s activations (exact, or attribution patching). */
  patch: Object.freeze({ public: 'patch', inputs: Object.freeze(['clean', 'corrupted']), sae: false }),
  /** Input attribution on the token embeddings: gradient, gradient × input or integrated gradients. */
  saliency: Object.freeze({ public: 'saliency', inputs: Object.freeze(['input']), sae: false }),
  /** The logit lens: every layer's residual through the final LayerNorm and the unembedding. */
  logitLens: Object.freeze({ public: 'logitLens', inputs: Object.freeze(['input']), sae: false }),
  /** Direct logit attribution of `logit[answer] − logit[against]` at `pos` (default −1). */
  attribute: Object.freeze({ public: 'attribute', inputs: Object.freeze(['input']), sae: false }),
  /** An SAE's features of `input`: the top `topK` per position, l0 and the reconstruction's MSE. */
  saeEncode: Object.freeze({ public: 'sae.encode', inputs: Object.freeze(['input']), sae: true }),
});
