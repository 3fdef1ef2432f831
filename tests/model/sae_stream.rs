//! `SaeStream`: an SAE read from `sae_weights.safetensors` in chunks of any size equals the
//! one read in one piece; a bad file is a typed `format` error as soon as its bytes show it
//! (a hostile header before any data arrives), a truncated one at `finish`.

use ggweb::model::sae::{Sae, SaeStream};
use ggweb::model::ModelError;

use crate::support::tl_ref::fixture;

fn files() -> (String, Vec<u8>) {
    let dir = fixture("tiny-sae");
    (
        std::fs::read_to_string(dir.join("cfg.json")).unwrap(),
        std::fs::read(dir.join("sae_weights.safetensors")).unwrap(),
    )
}

fn streamed(cfg: &str, w: &[u8], chunk: usize) -> Result<Sae, ModelError> {
    let mut s = SaeStream::new(cfg)?;
    for c in w.chunks(chunk) {
        s.push(c)?;
    }
    assert_eq!(s.received(), w.len() as u64);
    s.finish()
}

#[test]
fn chunks_of_any_size_give_the_same_sae() {
    let (cfg, w) = files();
    let whole = Sae::from_parts(&cfg, &w).unwrap();
    let x: Vec<f32> = (0..32 * 3).map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0).collect();
    let want = whole.encode(&x, 5).unwrap();
    for chunk in [1, 3, 7, 8, 9, 100, 4096, w.len()] {
        let s = streamed(&cfg, &w, chunk).unwrap();
        assert_eq!((s.d_in, s.d_sae, s.hook_name.as_str()), (32, 64, "blocks.1.hook_resid_pre"));
        let got = s.encode(&x, 5).unwrap();
        assert_eq!((got.top, got.l0, got.mse), (want.top.clone(), want.l0.clone(), want.mse.clone()), "chunk {chunk}");
        assert_eq!(s.decoder_row(63).unwrap(), whole.decoder_row(63).unwrap());
    }
}

#[test]
fn a_hostile_header_fails_before_the_data_and_a_truncated_file_at_finish() {
    let (cfg, w) = files();
    let n = u64::from_le_bytes(w[..8].try_into().unwrap()) as usize;
    let fails_at_push = |w: &[u8], msg: &str| {
        let mut s = SaeStream::new(&cfg).unwrap();
        // The header alone (no data byte) is enough to refuse it.
        let e = s.push(&w[..(8 + n).min(w.len())]).unwrap_err();
        assert!(matches!(&e, ModelError::Format(m) if m.contains(msg)), "{msg}: {e}");
    };
    let mut huge = w.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    fails_at_push(&huge, "the header claims 18446744073709551615 bytes (at most 104857600)");
    let header = std::str::from_utf8(&w[8..8 + n]).unwrap().to_string();
    let with = |h: String| -> Vec<u8> {
        assert_eq!(h.len(), n, "the edit keeps the header's length");
        [&w[..8], h.as_bytes(), &w[8 + n..]].concat()
    };
    // A lying span (more bytes than the shape) and a dtype this does not read.
    let lying = header.replacen("\"data_offsets\":[0,", "\"data_offsets\":[9,", 1);
    if lying != header {
        fails_at_push(&with(lying), "data_offsets [9,");
    }
    fails_at_push(&with(header.replacen("F32", "F16", 1)), "of dtype F16 (only F32)");
    fails_at_push(&with(header.replacen("{", "[", 1)), "the header is not JSON");
    // Truncated: the header is fine, the data ends early; byte by byte as over a network.
    for cut in [0, 4, 8 + n, w.len() - 4] {
        let e = match streamed(&cfg, &w[..cut], 1) {
            Err(e) => e,
            Ok(_) => panic!("cut {cut}: loaded"),
        };
        let msg = if cut < 8 {
            "too short for the header length"
        } else if cut < 8 + n {
            "the header claims"
        } else {
            "the file is truncated"
        };
        assert!(matches!(&e, ModelError::Format(m) if m.contains(msg)), "cut {cut}: {e}");
    }
    // A bad cfg.json is refused before any byte.
    assert!(matches!(SaeStream::new("{"), Err(ModelError::Format(m)) if m.contains("cfg.json is not JSON")));
}

/// An SAE fits a model only at one of its hook points with `d_in` values per position: the
/// tiny fixture (d_in 32 at blocks.1.hook_resid_pre) fits a 32-wide model, not a 64-wide one,
/// not at an MLP hook (4·32 wide), a missing layer, or an attention pattern.
#[test]
fn an_sae_for_another_model_is_invalid() {
    use ggweb::model::gpt2::Hparams;
    let (cfg, w) = files();
    let hp = |n_embd: usize, n_layer: usize| Hparams {
        n_vocab: 50257,
        n_ctx_train: 1024,
        n_embd,
        n_head: 4,
        n_layer,
        n_ff: 4 * n_embd,
        eps: 1e-5,
    };
    let sae = Sae::from_parts(&cfg, &w).unwrap();
    sae.check_fits(&hp(32, 3)).unwrap();
    let invalid = |s: &Sae, h: &Hparams, msg: &str| {
        let e = s.check_fits(h).unwrap_err();
        assert!(matches!(&e, ModelError::Invalid(m) if m.contains(msg)), "{msg}: {e}");
    };
    invalid(&sae, &hp(64, 3), "the SAE's d_in is 32 but 'blocks.1.hook_resid_pre' has 64 values per position");
    invalid(&sae, &hp(32, 1), "the SAE's hook 'blocks.1.hook_resid_pre' is not in this model");
    let at = |hook: &str| Sae::from_parts(&cfg.replace("blocks.1.hook_resid_pre", hook), &w).unwrap();
    invalid(&at("blocks.1.mlp.hook_post"), &hp(32, 3), "has 128 values per position");
    invalid(&at("blocks.0.attn.hook_pattern"), &hp(32, 3), "depend on the text's length");
}

/// The file's data region as the format requires it (issue 35 item 4): the tensors' spans tile
/// it from byte 0, none overlapping another, no byte between two or after the last. A header
/// that breaks this is refused as soon as it is in, before any data byte, naming the tensor.
#[test]
fn overlapping_gapped_or_trailing_tensor_bytes_are_format_errors() {
    let (cfg, w) = files();
    let n = u64::from_le_bytes(w[..8].try_into().unwrap()) as usize;
    let data = &w[8 + n..];
    let file = |header: serde_json::Value, data: &[u8]| -> Vec<u8> {
        let h = header.to_string();
        [&(h.len() as u64).to_le_bytes()[..], h.as_bytes(), data].concat()
    };
    let spans = |dec: [u64; 2], enc: [u64; 2], bdec: [u64; 2], benc: [u64; 2]| {
        serde_json::json!({
            "W_dec": { "dtype": "F32", "shape": [64, 32], "data_offsets": dec },
            "W_enc": { "dtype": "F32", "shape": [32, 64], "data_offsets": enc },
            "b_dec": { "dtype": "F32", "shape": [32], "data_offsets": bdec },
            "b_enc": { "dtype": "F32", "shape": [64], "data_offsets": benc },
        })
    };
    let fails = |bytes: Vec<u8>, msg: &str| {
        // Whole, and one byte at a time (the error comes as soon as the header is in).
        for chunk in [bytes.len(), 1] {
            match streamed(&cfg, &bytes, chunk) {
                Err(ModelError::Format(m)) => assert!(m.contains(msg), "want '{msg}', got: {m}"),
                other => panic!("want format '{msg}', got {:?}", other.map(|s| s.d_sae)),
            }
        }
    };
    // The fixture's own layout loads.
    assert!(streamed(&cfg, &file(spans([0, 8192], [8192, 16384], [16384, 16512], [16512, 16768]), data), 7).is_ok());
    // W_dec on W_enc's bytes.
    fails(
        file(spans([8192, 16384], [8192, 16384], [16384, 16512], [16512, 16768]), data),
        "leave a hole at byte 0 of the data",
    );
    fails(
        file(spans([0, 8192], [0, 8192], [16384, 16512], [16512, 16768]), data),
        "data_offsets [0, 8192] leave an overlap at byte 0",
    );
    // b_dec inside W_dec.
    fails(
        file(spans([0, 8192], [8192, 16384], [100, 228], [16512, 16768]), data),
        "tensor 'b_dec': data_offsets [100, 228] leave an overlap at byte 100",
    );
    // A 4-byte hole before b_dec.
    let holed = [&data[..16384], &[0u8; 4], &data[16384..]].concat();
    fails(
        file(spans([0, 8192], [8192, 16384], [16388, 16516], [16516, 16772]), &holed),
        "tensor 'b_dec': data_offsets [16388, 16516] leave a hole at byte 16384",
    );
    // Another tensor in the file counts too: one on W_enc's bytes, or one with a bad span.
    let mut extra = spans([0, 8192], [8192, 16384], [16384, 16512], [16512, 16768]);
    extra["extra"] = serde_json::json!({ "dtype": "F32", "shape": [4], "data_offsets": [8192, 8208] });
    fails(file(extra.clone(), data), "leave an overlap at byte 8192");
    extra["extra"] = serde_json::json!({ "dtype": "F32", "shape": [4], "data_offsets": [5, 1] });
    fails(file(extra, data), "tensor 'extra': data_offsets is not [begin, end] with begin ≤ end");
    // Bytes after the last tensor.
    let longer = [data, &[0u8; 4]].concat();
    fails(
        file(spans([0, 8192], [8192, 16384], [16384, 16512], [16512, 16768]), &longer),
        "bytes past the end of the data",
    );
    // Shapes and offsets are lists of whole numbers: an entry that is not one is not dropped.
    let mut odd = spans([0, 8192], [8192, 16384], [16384, 16512], [16512, 16768]);
    odd["W_dec"]["shape"] = serde_json::json!([64, "x", 32]);
    fails(file(odd.clone(), data), "tensor 'W_dec': shape [64,\"x\",32]");
    odd["W_dec"]["shape"] = serde_json::json!([64, 32]);
    odd["W_dec"]["data_offsets"] = serde_json::json!([0, -1, 8192]);
    fails(file(odd, data), "tensor 'W_dec': data_offsets is not [begin, end]");
}
