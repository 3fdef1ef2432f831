//! `ggweb train` (issue 39 item 4): the command trains as the library does (the same losses,
//! bit for bit, and the same saved file as `Session::save` after the same run in this
//! process), prints a progress line per update on stderr, and refuses bad flags by name with
//! nothing written. With `--lora-rank` it trains an adapter, on a Q8_0 file too: the same
//! losses as the library's `lora` run, and the adapter file it writes, applied to the base
//! with the library (`load_lora`), gives the trained model's logits exactly; `--merge` writes
//! `Session::save`'s merged file.

use std::process::Command;
use std::rc::Rc;

use ggweb::common::options::{from_json, TrainParams};
use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::export::SaveType;
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use serde_json::Value;

const TEXT: &str = "It was the best of times, it was the worst of times, it was the age of wisdom, it was the \
age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, \
it was the season of Darkness, it was the spring of hope, it was the winter of despair.\n";

fn fixture(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name).display().to_string()
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ggweb-train-cli-{}-{name}", std::process::id()))
}

fn ggweb(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ggweb")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn train_equals_the_library_and_saves_its_file() {
    let (data, out) = (tmp("data.txt"), tmp("out.gguf"));
    std::fs::write(&data, TEXT.repeat(3)).unwrap();
    let model = fixture("tiny-f32.gguf");
    let args = [
        "train",
        "--model",
        &model,
        "--data",
        data.to_str().unwrap(),
        "--seq-len",
        "16",
        "--batch",
        "2",
        "--steps",
        "4",
        "--lr",
        "3e-3",
        "--threads",
        "1",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = ggweb(&args);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let losses: Vec<f32> = v["losses"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert_eq!(
        (v["stop"].as_str(), v["steps"].as_u64(), v["tokens"].as_u64()),
        (Some("steps"), Some(4), Some(4 * 2 * 16))
    );
    // A progress line per update: step, loss, tokens/s, ETA.
    for (k, l) in losses.iter().enumerate() {
        let line = format!("step {}/4  loss {l:.4}  ", k + 1);
        assert!(stderr.contains(&line), "no {line:?} in:\n{stderr}");
    }
    assert_eq!(stderr.matches(" tokens/s  ETA 0:00:").count(), 4, "{stderr}");

    // The same run in this process: the same losses, the same file.
    let mut s = Session::new(load_from_path(&model, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
    let seqs = s.train_windows(&[TEXT.repeat(3)], 16).unwrap();
    let p: TrainParams =
        from_json("train options", r#"{"seqLen":16,"batchSize":2,"steps":4,"optimizer":{"type":"adamw","lr":3e-3}}"#)
            .unwrap();
    s.train_start(seqs, p.config(256).unwrap()).unwrap();
    let mut want = Vec::new();
    while let Some(step) = block_on(s.train_step()).unwrap() {
        want.push(step.loss);
    }
    assert_eq!(losses, want);
    assert!(want[3] < want[0], "{want:?}");
    let file = std::fs::read(&out).unwrap();
    assert!(file == s.save(SaveType::F32).unwrap(), "the saved file is not the library's");
    assert_eq!(v["bytes"].as_u64(), Some(file.len() as u64));
    std::fs::remove_file(&out).ok();
    std::fs::remove_file(&data).ok();
}

#[test]
fn bad_flags_are_refused_by_name_and_nothing_is_written() {
    let (data, out) = (tmp("bad.txt"), tmp("bad.gguf"));
    std::fs::write(&data, TEXT).unwrap();
    let (f32m, q8m) = (fixture("tiny-f32.gguf"), fixture("tiny-q8_0.gguf"));
    let (d, o) = (data.to_str().unwrap(), out.to_str().unwrap());
    let base = |model: &str, extra: &[&str]| {
        let mut a = vec!["train", "--model", model, "--data", d, "--steps", "1", "--out", o];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    for (args, want) in [
        (base(&f32m, &["--seq-len", "1000"]), "--seq-len must be from 2 to nCtx (256), got 1000"),
        (base(&f32m, &["--lr", "nan"]), "--lr must be a finite number"),
        (base(&f32m, &["--type", "q4_0"]), "--type must be 'f32', 'f16' or 'q8_0'"),
        (base(&f32m, &["--lora-rank", "0"]), "--lora-rank must be at least 1, got 0"),
        (
            base(&f32m, &["--lora-rank", "33", "--seq-len", "16"]),
            "--lora-rank must be from 1 to the model's n_embd (32), got 33",
        ),
        (base(&f32m, &["--lora-rank", "2", "--lora-alpha", "inf"]), "--lora-alpha must be a finite number"),
        (base(&f32m, &["--lora-rank", "2", "--lora-alpha=-1"]), "--lora-alpha must be a finite number above 0"),
        // A negative number after a space is the flag's value, not a flag of its own.
        (base(&f32m, &["--lora-rank", "2", "--lora-alpha", "-1"]), "--lora-alpha must be a finite number above 0"),
        (base(&f32m, &["--lr", "-0.1"]), "--lr must be a number in [0, "),
        (base(&f32m, &["--lora-rank", "2", "--lora-targets", "attn_q"]), "--lora-targets: unknown target \"attn_q\""),
        (base(&f32m, &["--lora-rank", "2", "--type", "q8_0"]), "--type (of an adapter) must be 'f32' or 'f16'"),
        (base(&f32m, &["--lora-alpha", "4"]), "--lora-alpha needs --lora-rank"),
        (base(&f32m, &["--merge"]), "--merge needs --lora-rank"),
        (base(&f32m, &["--optimizer", "adam"]), "--optimizer must be adamw or sgd"),
        (
            base(&q8m, &["--seq-len", "16"]),
            "weight 'token_embd.weight' is q8_0 (train a low-rank adapter on a quantized file: --lora-rank R)",
        ),
        (base(&f32m, &["--seq-len", "200"]), "data is empty"),
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, stderr) = ggweb(&a);
        assert_eq!(code, 1, "{a:?}: {stderr}");
        assert!(stderr.contains(want), "{a:?}: {stderr}");
        assert!(!out.exists() && !tmp("bad.gguf.part").exists(), "{a:?} wrote {}", out.display());
    }
    std::fs::remove_file(&data).ok();
}

fn train_args<'a>(model: &'a str, data: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "train",
        "--model",
        model,
        "--data",
        data,
        "--seq-len",
        "16",
        "--batch",
        "2",
        "--steps",
        "5",
        "--lr",
        "2e-2",
        "--threads",
        "1",
        "--json",
        "--out",
        out,
    ];
    a.extend_from_slice(extra);
    a
}

const LORA_FLAGS: [&str; 8] =
    ["--lora-rank", "3", "--lora-alpha", "6", "--lora-targets", "attn_qkv,ffn_up", "--seed", "9"];
const LORA_OPTS: &str = r#"{"seqLen":16,"batchSize":2,"steps":5,"seed":9,"optimizer":{"type":"adamw","lr":2e-2},
    "lora":{"rank":3,"alpha":6,"targets":["attn_qkv","ffn_up"]}}"#;

fn losses(v: &Value) -> Vec<f32> {
    v["losses"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// The library's run of `LORA_OPTS` on `model`: the session and its losses.
fn library_lora_run(model: &str) -> (Session, Vec<f32>) {
    let mut s = Session::new(load_from_path(model, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
    let seqs = s.train_windows(&[TEXT.repeat(3)], 16).unwrap();
    let p: TrainParams = from_json("train options", LORA_OPTS).unwrap();
    s.train_start(seqs, p.config(256).unwrap()).unwrap();
    let mut want = Vec::new();
    while let Some(step) = block_on(s.train_step()).unwrap() {
        want.push(step.loss);
    }
    (s, want)
}

/// `--lora-rank` on the F32 and the Q8_0 fixture: the library's losses bit for bit, and the
/// adapter file applied to a fresh base by the library gives the trained model's logits exactly.
#[test]
fn lora_equals_the_library_and_its_adapter_applies() {
    let data = tmp("lora.txt");
    std::fs::write(&data, TEXT.repeat(3)).unwrap();
    let held = [464u32, 1266, 286, 1661, 11, 340, 373]; // a held prompt (GPT-2 ids)
    for file in ["tiny-f32.gguf", "tiny-q8_0.gguf"] {
        let (model, out) = (fixture(file), tmp(&format!("{file}.adapter.gguf")));
        let (code, stdout, stderr) =
            ggweb(&train_args(&model, data.to_str().unwrap(), out.to_str().unwrap(), &LORA_FLAGS));
        assert_eq!(code, 0, "{file}: {stderr}");
        let v: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!((v["adapter"].as_bool(), v["steps"].as_u64()), (Some(true), Some(5)), "{file}: {v}");
        assert!(stderr.contains("saved the LoRA adapter to"), "{stderr}");

        let (mut s, want) = library_lora_run(&model);
        let got = losses(&v);
        assert_eq!(got, want, "{file}");
        // The first update's loss is the base model's (B starts at 0); the loss falls.
        assert!(want[4] < want[0], "{file}: {want:?}");
        let file_bytes = std::fs::read(&out).unwrap();
        assert!(file_bytes == s.save_lora(ggweb::types::GgmlType::F32, false).unwrap(), "{file}: not saveLora's bytes");

        let tuned = block_on(s.logits(&held)).unwrap();
        let mut fresh =
            Session::new(load_from_path(&model, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
        let base = block_on(fresh.logits(&held)).unwrap();
        fresh.load_lora(&file_bytes).unwrap();
        let applied = block_on(fresh.logits(&held)).unwrap();
        assert!(applied == tuned, "{file}: the applied adapter's logits differ from the trained model's");
        let moved = tuned.iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved > 0.1, "{file}: the adapter moved the logits only {moved}");
        std::fs::remove_file(&out).ok();
    }
    std::fs::remove_file(&data).ok();
}

/// `--lora-rank --merge`: `Session::save` of the adapted model (the adapter merged), which
/// loads as a plain model.
#[test]
fn lora_merge_saves_the_merged_model() {
    let (data, out) = (tmp("merge.txt"), tmp("merged.gguf"));
    std::fs::write(&data, TEXT.repeat(3)).unwrap();
    let model = fixture("tiny-f32.gguf");
    let mut flags = LORA_FLAGS.to_vec();
    flags.push("--merge");
    let (code, stdout, stderr) = ggweb(&train_args(&model, data.to_str().unwrap(), out.to_str().unwrap(), &flags));
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["adapter"].as_bool(), Some(false));
    let (s, want) = library_lora_run(&model);
    assert_eq!(losses(&v), want);
    let file_bytes = std::fs::read(&out).unwrap();
    assert!(file_bytes == s.save(SaveType::F32).unwrap(), "not save's merged file");
    let merged = Session::new(
        load_from_path(out.to_str().unwrap(), Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap(),
    );
    assert!(merged.model.weights.lora.is_none());
    std::fs::remove_file(&out).ok();
    std::fs::remove_file(&data).ok();
}

/// `--checkpoint` then `--resume` go on as one run: 2 updates written to a checkpoint, then 3
/// resumed from it, give the last 3 losses of a 5-update run bit for bit and the same saved
/// file; full training (the model read from the checkpoint) and `--lora-rank` (the adapter's
/// checkpoint applied to --model). A `--resume` file without optimizer state is refused by
/// name, nothing written.
#[test]
fn checkpoint_and_resume_go_on_as_one_run() {
    let data = tmp("ck.txt");
    std::fs::write(&data, TEXT.repeat(3)).unwrap();
    let model = fixture("tiny-f32.gguf");
    let d = data.to_str().unwrap();
    let with_steps = |mut a: Vec<&'static str>, steps: &'static str| {
        let i = a.iter().position(|&x| x == "--steps").unwrap();
        a[i + 1] = steps;
        a
    };
    for lora in [false, true] {
        let tag = if lora { "lora" } else { "full" };
        let (whole, first, rest, ck) = (
            tmp(&format!("{tag}-whole.gguf")),
            tmp(&format!("{tag}-first.gguf")),
            tmp(&format!("{tag}-rest.gguf")),
            tmp(&format!("{tag}-ck.gguf")),
        );
        let leak = |p: &std::path::Path| -> &'static str { Box::leak(p.to_str().unwrap().to_owned().into_boxed_str()) };
        let (m, dd) = (leak(std::path::Path::new(&model)), leak(std::path::Path::new(d)));
        let extra: Vec<&'static str> = if lora { LORA_FLAGS.to_vec() } else { Vec::new() };
        let (code, out, err) = ggweb(&train_args(m, dd, leak(&whole), &extra));
        assert_eq!(code, 0, "{tag}: {err}");
        let want = losses(&serde_json::from_str(out.trim()).unwrap());
        let mut a = with_steps(train_args(m, dd, leak(&first), &extra), "2");
        a.extend(["--checkpoint", leak(&ck)]);
        let (code, out, err) = ggweb(&a);
        assert_eq!(code, 0, "{tag}: {err}");
        assert_eq!(losses(&serde_json::from_str(out.trim()).unwrap()), want[..2], "{tag}: the first 2 updates");
        let mut a = with_steps(train_args(m, dd, leak(&rest), &extra), "3");
        a.extend(["--resume", leak(&ck)]);
        let (code, out, err) = ggweb(&a);
        assert_eq!(code, 0, "{tag}: {err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(losses(&v), want[2..], "{tag}: the resumed updates");
        assert_eq!(v["steps"].as_u64(), Some(5), "{tag}: updates counted from the checkpoint's");
        assert!(std::fs::read(&rest).unwrap() == std::fs::read(&whole).unwrap(), "{tag}: the resumed run's file");
        for p in [&whole, &first, &rest, &ck] {
            std::fs::remove_file(p).ok();
        }
    }
    // A file without optimizer state: refused by name, nothing written.
    let out = tmp("noresume.gguf");
    let mut a = train_args(&model, d, out.to_str().unwrap(), &[]);
    a.extend(["--resume", &model]);
    let (code, _, err) = ggweb(&a);
    assert_ne!(code, 0);
    assert!(err.contains("--resume") && err.contains("no optimizer state"), "{err}");
    assert!(!out.exists(), "--out written");
    std::fs::remove_file(&data).ok();
}
