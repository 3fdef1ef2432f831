//! `ggweb run --hook`, `ggweb patch` and `ggweb lens` against TransformerLens (the fixtures
//! of tests/fixtures/make_tl_ref.py): the CLI runs the same session core as the JS API.

use std::process::Command;

use serde_json::Value;

use crate::support::tl_ref::{fixture, Ref};

fn ggweb(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ggweb")).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "ggweb {args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("ggweb {args:?}: {e}: {stdout}"))
}

fn ids(v: &[u32]) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

#[test]
fn run_with_hooks_patch_and_lens_equal_transformer_lens() {
    let r = Ref::load();
    let model = fixture("tiny-f32.gguf");
    let model = model.to_str().unwrap();
    let prompt = ids(&r.ids("prompt"));
    let cols = r.ids("logit_ids");
    // Hook case 13: three hooks applied in order.
    let case = &r.json["hooks"][13]["hooks"];
    let hooks: Vec<String> = case.as_array().unwrap().iter().map(|h| h.to_string()).collect();
    let mut args = vec!["run", "--model", model, "--ids", &prompt, "--capture", "blocks.*.hook_resid_post"];
    for h in &hooks {
        args.extend(["--hook", h.as_str()]);
    }
    let out = ggweb(&args);
    let last = out["logits"][0].as_array().unwrap();
    let (_, want) = r.block("hooks/13/logits");
    let off = (r.ids("prompt").len() - 1) * cols.len();
    for (j, &c) in cols.iter().enumerate() {
        let got = last[c as usize].as_f64().unwrap() as f32;
        assert!((got - want[off + j]).abs() <= 1e-4, "column {c}: {got} vs {}", want[off + j]);
    }
    assert_eq!(out["cache"].as_object().unwrap().len(), 3);

    let (clean, corrupted) = (r.ids("clean"), r.ids("corrupted"));
    // patch takes text: the fixture's prompts are "When Mary and John went to the store, ..."
    let text = |v: &[u32]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_ggweb"))
            .args(["tokenize", "--model", model, "--decode"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(format!("{}\n", serde_json::to_string(v).unwrap()).as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap()
    };
    let (answer, against) = (r.json["answer"].to_string(), r.json["against"].to_string());
    let p = ggweb(&[
        "patch",
        "--model",
        model,
        "--clean",
        &text(&clean),
        "--corrupted",
        &text(&corrupted),
        "--at",
        "resid_pre",
        "--answer",
        &answer,
        "--against",
        &against,
    ]);
    let (shape, want) = r.block("patch/resid_pre");
    assert_eq!(p["shape"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>(), shape);
    for (i, w) in want.iter().enumerate() {
        let got = p["cells"][i].as_f64().unwrap() as f32;
        assert!((got - w).abs() <= 1e-4, "cell {i}: {got} vs {w}");
    }

    let l = ggweb(&["lens", "--model", model, "--ids", &prompt, "--top-k", "5"]);
    assert_eq!(l["layers"], 4);
    for layer in 0..4 {
        for pos in 0..r.ids("prompt").len() {
            let got: Vec<u64> =
                l["top"][layer][pos].as_array().unwrap().iter().map(|t| t["token"].as_u64().unwrap()).collect();
            let want: Vec<u64> =
                r.json["lens"]["top_ids"][layer][pos].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            assert_eq!(got, want, "lens {layer}/{pos}");
        }
    }
}

#[test]
fn score_with_hooks_equals_transformer_lens() {
    let r: Value = serde_json::from_slice(&std::fs::read(fixture("tiny-f32.tl-score-ref.json")).unwrap()).unwrap();
    let model = fixture("tiny-f32.gguf");
    let prompt: Vec<u32> = serde_json::from_value(r["prompt"].clone()).unwrap();
    // Case 2: two hooks (an MLP neuron scale and a key's attention score).
    let case = &r["score"][2];
    let hooks: Vec<String> = case["hooks"].as_array().unwrap().iter().map(|h| h.to_string()).collect();
    let prompt = ids(&prompt);
    let mut args = vec!["score", "--model", model.to_str().unwrap(), "--ids", &prompt, "--json"];
    for h in &hooks {
        args.extend(["--hook", h.as_str()]);
    }
    let out = ggweb(&args);
    let (got, want) = (out["logprobs"].as_array().unwrap(), case["logprobs"].as_array().unwrap());
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
        assert!((g - w).abs() <= 1e-4, "row {i}: {g} vs {w}");
    }
    assert_eq!(out["ranks"], case["ranks"]);
}

/// `ggweb run --grad`, `ggweb saliency` and `ggweb patch --method attribution` against PyTorch
/// autograd through TransformerLens (tests/fixtures/make_grad_ref.py): the same session calls
/// as the JS API, JSON out; a bad spec fails naming it.
#[test]
fn run_grad_saliency_and_attribution_patching_equal_pytorch_autograd() {
    let r = crate::support::grad_ref::load();
    let model = fixture("tiny-f32.gguf");
    let model = model.to_str().unwrap();
    let ids_of = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    // The logprob case, every hook point.
    let case = &r.json["grad"][1];
    let prompt = ids(&ids_of(&case["tokens"]));
    let grad = case["grad"].to_string();
    let out = ggweb(&["run", "--model", model, "--ids", &prompt, "--grad", &grad]);
    let m = out["metric"].as_f64().unwrap();
    assert!((m - case["metric"].as_f64().unwrap()).abs() <= 1e-4, "metric {m}");
    let grads = out["grads"].as_object().unwrap();
    assert_eq!(grads.len(), r.json["hook_names"].as_array().unwrap().len());
    for (name, g) in grads {
        let (shape, want) = r.block(&format!("grad/logprob/{name}"));
        let got: Vec<f32> = g["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        assert_eq!(g["shape"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>(), shape);
        let d: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>().sqrt();
        let n: f64 = want.iter().map(|&b| (b as f64).powi(2)).sum::<f64>().sqrt();
        let dmax = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d <= 1e-4 * n || dmax <= 1e-5, "{name}: {d} of {n}");
    }
    // Saliency: integrated gradients of the loss case.
    let sal = &r.json["saliency"][2];
    let steps = sal["steps"].to_string();
    let out = ggweb(&[
        "saliency",
        "--model",
        model,
        "--ids",
        &ids(&ids_of(&sal["tokens"])),
        "--of",
        &sal["of"].to_string(),
        "--method",
        "integratedGradients",
        "--steps",
        &steps,
    ]);
    let (_, want) = r.block("saliency/loss/integratedGradients");
    for (i, (g, w)) in out["scores"].as_array().unwrap().iter().zip(want).enumerate() {
        assert!((g.as_f64().unwrap() as f32 - w).abs() <= 1e-4, "score {i}");
    }
    assert!((out["delta"].as_f64().unwrap() - sal["delta"].as_f64().unwrap()).abs() <= 1e-4);
    // A bad spec names what is wrong; the exit status says it failed.
    let bad = Command::new(env!("CARGO_BIN_EXE_ggweb"))
        .args(["run", "--model", model, "--ids", &prompt, "--grad", r#"{"of":{"loss":"sum"},"wrt":"*"}"#])
        .output()
        .unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("sum"));
}
