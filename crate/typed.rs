//! How a result's arrays of numbers are written, so that one result struct serves every front
//! end (`#[serde(serialize_with = "crate::typed::f32s")]` on its fields): in the browser, as
//! the JS typed arrays the API promises (`Float32Array`, `Uint32Array`), through
//! serde-wasm-bindgen, which the bindings serialize with (`to_js`); natively, as plain
//! arrays (the CLI's JSON). On wasm32 only serde-wasm-bindgen can write such a field.

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

/// `&[f32]` as a `Float32Array`.
pub fn f32s<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
    #[cfg(target_family = "wasm")]
    {
        let a: wasm_bindgen::JsValue = js_sys::Float32Array::from(v).into();
        serde_wasm_bindgen::preserve::serialize(&a, s)
    }
    #[cfg(not(target_family = "wasm"))]
    {
        v.serialize(s)
    }
}

/// `&[u32]` as a `Uint32Array`.
pub fn u32s<S: Serializer>(v: &[u32], s: S) -> Result<S::Ok, S::Error> {
    #[cfg(target_family = "wasm")]
    {
        let a: wasm_bindgen::JsValue = js_sys::Uint32Array::from(v).into();
        serde_wasm_bindgen::preserve::serialize(&a, s)
    }
    #[cfg(not(target_family = "wasm"))]
    {
        v.serialize(s)
    }
}

/// A list of `f32` rows, each a `Float32Array`.
pub fn f32s_list<S: Serializer>(v: &[alloc::vec::Vec<f32>], s: S) -> Result<S::Ok, S::Error> {
    struct Row<'a>(&'a [f32]);
    impl Serialize for Row<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            f32s(self.0, s)
        }
    }
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for row in v {
        seq.serialize_element(&Row(row))?;
    }
    seq.end()
}

/// `Some(rows)` as [`f32s_list`] (with `skip_serializing_if = "Option::is_none"`).
pub fn f32s_list_some<S: Serializer>(
    v: &Option<alloc::vec::Vec<alloc::vec::Vec<f32>>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(rows) => f32s_list(rows, s),
        None => s.serialize_none(),
    }
}

/// A plan's compute bytes as `{ compute }` (a traced graph's `memory`).
pub fn compute<S: Serializer>(bytes: &usize, s: S) -> Result<S::Ok, S::Error> {
    let mut o = s.serialize_struct("Memory", 1)?;
    o.serialize_field("compute", bytes)?;
    o.end()
}

/// Nested lists of `(id, value)` pairs (any depth of `Vec`s around them) as objects
/// `{ <id>: id, <value>: value }`: the `top` lists of the lens and of an SAE's features.
pub trait Pairs {
    fn write<S: Serializer>(&self, names: (&'static str, &'static str), s: S) -> Result<S::Ok, S::Error>;
}

impl Pairs for (u32, f32) {
    fn write<S: Serializer>(&self, (id, value): (&'static str, &'static str), s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("Pair", 2)?;
        o.serialize_field(id, &self.0)?;
        o.serialize_field(value, &self.1)?;
        o.end()
    }
}

impl<T: Pairs> Pairs for alloc::vec::Vec<T> {
    fn write<S: Serializer>(&self, names: (&'static str, &'static str), s: S) -> Result<S::Ok, S::Error> {
        struct Item<'a, T>(&'a T, (&'static str, &'static str));
        impl<T: Pairs> Serialize for Item<'_, T> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.0.write(self.1, s)
            }
        }
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for x in self {
            seq.serialize_element(&Item(x, names))?;
        }
        seq.end()
    }
}

/// `(token, logprob)` pairs as `{ token, logprob }`.
pub fn token_logprobs<S: Serializer, T: Pairs>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    v.write(("token", "logprob"), s)
}

/// `(index, value)` pairs as `{ index, value }`.
pub fn index_values<S: Serializer, T: Pairs>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    v.write(("index", "value"), s)
}
