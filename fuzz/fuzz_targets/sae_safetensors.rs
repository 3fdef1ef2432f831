//! The SAE reader (`SaeStream`: SAELens's cfg.json and a streamed sae_weights.safetensors) on
//! arbitrary bytes: `[cfg length: u16 LE][cfg.json text][safetensors bytes]`, the file cut
//! into chunks by a plan from a hash of the input. Besides "no panic, no allocation beyond
//! the bytes received" (the capped allocator: a header's claims must not size anything):
//! - the outcome does not depend on the chunking: the planned chunks and one chunk give the
//!   same SAE or the same error message;
//! - an SAE that loads has the shape cfg.json gives, its file holds at least the four
//!   tensors' bytes after its header, and it encodes a row and gives its first and last
//!   decoder rows (`d_in` values each), the same bits both ways.
#![no_main]

use ggweb::model::sae::{Sae, SaeStream};
use ggweb::model::ModelError;
use ggweb_fuzz::{chunk_plan, chunks, fnv1a};
use libfuzzer_sys::fuzz_target;

fn load(cfg: &str, file: &[u8], plan: Option<&[usize]>) -> Result<Sae, ModelError> {
    let mut s = SaeStream::new(cfg)?;
    match plan {
        Some(plan) => {
            for c in chunks(file, plan) {
                s.push(c)?;
            }
        }
        None => s.push(file)?,
    }
    assert_eq!(s.received(), file.len() as u64);
    s.finish()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = (u16::from_le_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
    let Ok(cfg) = std::str::from_utf8(&data[2..2 + n]) else { return };
    let file = &data[2 + n..];
    let plan = chunk_plan(file.len(), fnv1a(data));
    let whole = load(cfg, file, None);
    let streamed = load(cfg, file, Some(&plan));
    match (&whole, &streamed) {
        (Ok(a), Ok(b)) => {
            assert_eq!((a.d_in, a.d_sae, &a.hook_name), (b.d_in, b.d_sae, &b.hook_name));
            // Four f32 tensors of d_in·d_sae, d_sae, d_sae·d_in, d_in values (and maybe others).
            let header = u64::from_le_bytes(file[..8].try_into().unwrap());
            let tensors = 4 * (2 * a.d_in * a.d_sae + a.d_in + a.d_sae) as u64;
            assert!(file.len() as u64 >= 8 + header + tensors, "the four tensors' bytes came");
            let x = vec![0.5f32; a.d_in];
            let (ea, eb) = (a.encode(&x, 3).unwrap(), b.encode(&x, 3).unwrap());
            assert_eq!(ea.top.len(), 1);
            assert_eq!(format!("{:?}", (ea.top, ea.l0, ea.mse)), format!("{:?}", (eb.top, eb.l0, eb.mse)));
            for i in [0, a.d_sae - 1] {
                let (ra, rb) = (a.decoder_row(i).unwrap(), b.decoder_row(i).unwrap());
                assert_eq!(ra.len(), a.d_in);
                assert_eq!(
                    ra.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    rb.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
            assert!(a.decoder_row(a.d_sae).is_err());
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "the same error whatever the chunks"),
        _ => panic!("one chunk: {:?}; planned chunks: {:?}", whole.as_ref().err(), streamed.as_ref().err()),
    }
});
