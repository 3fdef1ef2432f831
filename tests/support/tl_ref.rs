//! TransformerLens's references (tests/fixtures/tiny-f32.tl-ref.json + .bin, made by
//! tests/fixtures/make_tl_ref.py) and the hook-point comparison that tests/model/tl_hooks.rs
//! (CPU) and tests/webgpu/tl_hooks_webgpu.rs run.

use ggweb::model::context::block_on;
use ggweb::model::hooks::hook_names;
use ggweb::model::session::Session;
use serde_json::Value;

pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

pub struct Ref {
    pub json: Value,
    pub bin: Vec<f32>,
}

impl Ref {
    pub fn load() -> Ref {
        let json: Value = serde_json::from_slice(&std::fs::read(fixture("tiny-f32.tl-ref.json")).unwrap()).unwrap();
        let bytes = std::fs::read(fixture(json["bin"].as_str().unwrap())).unwrap();
        let bin = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        Ref { json, bin }
    }

    /// A block's shape and values.
    pub fn block(&self, name: &str) -> (Vec<i64>, &[f32]) {
        let b = &self.json["blocks"][name];
        assert!(b.is_object(), "no block {name} in the reference");
        let shape: Vec<i64> = b["shape"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let off = b["offset"].as_u64().unwrap() as usize;
        let n = shape.iter().product::<i64>() as usize;
        (shape, &self.bin[off..off + n])
    }

    pub fn ids(&self, key: &str) -> Vec<u32> {
        self.json[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    }
}

/// TransformerLens's shape from a node's ggml `ne`: `ne` reversed, the unused outer axes dropped.
pub fn tl_shape(ne: [i64; 4], rank: usize) -> Vec<i64> {
    assert!(ne[rank..].iter().all(|&x| x == 1), "ne {ne:?} has more than {rank} axes");
    ne[..rank].iter().rev().copied().collect()
}

/// Traces every hook point of `prompt` by its TransformerLens name and checks each against the
/// reference: shape, −∞ exactly where TransformerLens masks, the rest within `tol`. Returns
/// the largest difference and where.
pub fn check_hook_points(s: &mut Session, r: &Ref, tol: f32) -> (f32, String) {
    let prompt = r.ids("prompt");
    let names = hook_names(&s.model.hparams);
    let want: Vec<String> =
        r.json["hook_names"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
    assert_eq!(names, want, "the model's hook names are TransformerLens's");
    assert_eq!(names.len(), 2 + 17 * 3 + 2);

    let t = block_on(s.trace(&prompt, &names)).unwrap();
    assert_eq!(t.nodes.len(), names.len(), "one value per hook name");
    let mut worst = (0f32, String::new());
    let mut masked = 0;
    for name in &names {
        let got = t.nodes.iter().find(|v| &v.name == name).unwrap_or_else(|| panic!("{name} not traced"));
        let (shape, want) = r.block(&format!("capture/{name}"));
        assert_eq!(tl_shape(got.ne, shape.len()), shape, "{name}: shape");
        assert_eq!(got.data.len(), want.len(), "{name}: size");
        for (i, (&a, &b)) in got.data.iter().zip(want).enumerate() {
            if b == f32::NEG_INFINITY {
                // A masked score: −∞ in both (the key after the query).
                assert_eq!(a, b, "{name}[{i}]: masked entry");
                masked += 1;
                continue;
            }
            let d = (a - b).abs();
            assert!(d <= tol, "{name}[{i}]: ours {a}, TransformerLens {b} (diff {d})");
            if d > worst.0 {
                worst = (d, name.clone());
            }
        }
    }
    // 3 layers × 4 heads × the 45 keys after their query in 10 positions.
    assert_eq!(masked, 3 * 4 * 45);
    worst
}
