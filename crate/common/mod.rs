//! What the front ends (the JS bindings in `bindings/`, the `ggweb` CLI in `bin/`) share and
//! nothing below them needs, as llama.cpp's `common/` is for its tools: the options of every
//! call, parsed and checked one way ([`options`]), the one table of the long calls
//! ([`methods`]), and the choice of backends for a load
//! ([`backends`]). The model layer takes the parsed values (`Gpt2Options`, `GenerateOptions`,
//! hooks) and knows nothing of JS keys or flags.

pub mod backends;
pub mod methods;
pub mod options;

pub use backends::{open_backends, Backends};
