//! PyTorch autograd's references through TransformerLens for the gradient calls (issue 37:
//! tests/fixtures/tiny-f32.grad-ref.json + .bin, made by tests/fixtures/make_grad_ref.py) and
//! the comparisons that tests/model/grad.rs (CPU) and tests/webgpu run.

use ggweb::model::context::block_on;
use ggweb::model::grad::{GradSpec, Metric};
use ggweb::model::session::Session;

use super::tl_ref::{hooks_of, Ref};

pub fn load() -> Ref {
    Ref::load_from("tiny-f32.grad-ref.json")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The bound per wrt hook point: ‖g − r‖₂ ≤ 1e-4·‖r‖₂, or every element within 1e-5.
/// Returns ‖g − r‖₂ / ‖r‖₂ (0 when the elementwise bound holds with r = 0).
fn close(what: &str, g: &[f32], r: &[f32]) -> f64 {
    assert_eq!(g.len(), r.len(), "{what}: {} values, the reference has {}", g.len(), r.len());
    let (mut d2, mut r2, mut dmax) = (0f64, 0f64, 0f64);
    for (&a, &b) in g.iter().zip(r) {
        let d = a as f64 - b as f64;
        assert!(d.is_finite(), "{what}: {a} vs {b}");
        d2 += d * d;
        r2 += b as f64 * b as f64;
        dmax = dmax.max(d.abs());
    }
    let rel = if r2 > 0.0 { (d2 / r2).sqrt() } else { 0.0 };
    assert!(
        rel <= 1e-4 || dmax <= 1e-5,
        "{what}: ‖g − r‖/‖r‖ = {rel:e}, largest |g − r| = {dmax:e} (‖r‖ = {:e})",
        r2.sqrt()
    );
    rel
}

/// Every `grad/<case>/<hook>` block: `model.run` with the case's hooks and `grad`, each wrt
/// point's gradient (shape and values) and the metric (within 1e-4). Returns (cases, points
/// checked, the largest relative error and where).
pub fn check_grads(s: &mut Session, r: &Ref) -> (usize, usize, f64, String) {
    let hp = s.model.hparams.clone();
    let (mut points, mut worst, mut at) = (0, 0f64, String::new());
    let cases = r.json["grad"].as_array().unwrap();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let tokens = ids(&case["tokens"]);
        let hooks = hooks_of(&case["hooks"]);
        let spec: GradSpec = serde_json::from_value(case["grad"].clone()).unwrap();
        let run = block_on(s.run_grad(&tokens, &[], &hooks, Some(&spec))).unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = run.metric.unwrap();
        let want = case["metric"].as_f64().unwrap();
        assert!((m as f64 - want).abs() <= 1e-4, "{name}: metric {m} vs {want}");
        let grads = run.grads.unwrap();
        let wrt = ggweb::model::grad::wrt_names(&spec.wrt, &hp).unwrap();
        assert_eq!(grads.len(), wrt.len(), "{name}");
        for g in &grads {
            let (shape, want) = r.block(&format!("grad/{name}/{}", g.name));
            let got: Vec<i64> = g.shape().iter().map(|&x| x as i64).collect();
            assert_eq!(got, shape, "{name}/{}: shape", g.name);
            let rel = close(&format!("{name}/{}", g.name), &g.data, want);
            if rel > worst {
                (worst, at) = (rel, format!("{name}/{}", g.name));
            }
            points += 1;
        }
    }
    (cases.len(), points, worst, at)
}

/// Every `saliency/<case>/<method>` block: scores within 1e-4, the metric and (integrated
/// gradients) delta within 1e-4. Returns the largest score difference.
pub fn check_saliency(s: &mut Session, r: &Ref) -> f32 {
    let mut worst = 0f32;
    for case in r.json["saliency"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let tokens = ids(&case["tokens"]);
        let of: Metric = serde_json::from_value(case["of"].clone()).unwrap();
        let steps = case["steps"].as_u64().unwrap() as u32;
        for method in ["gradient", "gradientXInput", "integratedGradients"] {
            let sal = block_on(s.saliency(&tokens, &of, method, Some(steps))).unwrap();
            let (_, want) = r.block(&format!("saliency/{name}/{method}"));
            assert_eq!(sal.scores.len(), want.len(), "{name}/{method}");
            for (i, (&a, &b)) in sal.scores.iter().zip(want).enumerate() {
                assert!((a - b).abs() <= 1e-4, "{name}/{method}[{i}]: {a} vs {b}");
                worst = worst.max((a - b).abs());
            }
            let m = case["metric"].as_f64().unwrap();
            assert!((sal.metric as f64 - m).abs() <= 1e-4, "{name}/{method}: metric {} vs {m}", sal.metric);
            match method {
                "integratedGradients" => {
                    let d = case["delta"].as_f64().unwrap();
                    let got = sal.delta.expect("delta") as f64;
                    assert!((got - d).abs() <= 1e-4, "{name}: delta {got} vs {d}");
                }
                _ => assert!(sal.delta.is_none(), "{name}/{method}: a delta"),
            }
        }
    }
    worst
}

/// Every `atp/<at>` block: `patch(..., method 'attribution')`'s cells, cleanDiff and
/// corruptedDiff within 1e-4. Returns the largest cell difference.
pub fn check_atp(s: &mut Session, r: &Ref) -> f32 {
    let a = &r.json["atp"];
    let (clean, corrupted) = (ids(&a["clean"]), ids(&a["corrupted"]));
    let (answer, against) = (a["answer"].as_u64().unwrap() as u32, a["against"].as_u64().unwrap() as u32);
    let mut worst = 0f32;
    for at in ["resid_pre", "attn_out", "mlp_out", "z"] {
        let p = block_on(s.patch(&clean, &corrupted, at, answer, against, Some("attribution"))).unwrap();
        let (shape, want) = r.block(&format!("atp/{at}"));
        assert_eq!(p.shape.iter().map(|&x| x as i64).collect::<Vec<_>>(), shape, "{at}");
        for (i, (&x, &y)) in p.cells.iter().zip(want).enumerate() {
            assert!((x - y).abs() <= 1e-4, "atp/{at}[{i}]: {x} vs {y}");
            worst = worst.max((x - y).abs());
        }
        for (got, key) in [(p.clean_diff, "clean_diff"), (p.corrupted_diff, "corrupted_diff")] {
            let want = a[key].as_f64().unwrap();
            assert!((got as f64 - want).abs() <= 1e-4, "{at}: {key} {got} vs {want}");
        }
    }
    worst
}
