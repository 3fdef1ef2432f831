//! gallocr on random graphs: reserve + alloc_graph (one or several buffer types, random
//! alignments and buffer ids, in-place on or off), then
//! - `Gallocr::check_graph`: every tensor inside its buffer and aligned, no two live
//!   tensors share bytes (the checker reasons about lifetimes on its own);
//! - allocating again with the plan in place changes nothing and stays valid;
//! - computing the graph in gallocr's placement gives bit for bit what it gives when
//!   every tensor has memory of its own (an allocating context).
#![no_main]

use std::rc::Rc;

use ggweb::allocator::Gallocr;
use ggweb::backend::host::HostBuffer;
use ggweb::backend::{Backend, BackendError, Buffer, BufferType};
use ggweb::cpu::CpuBackend;
use ggweb::tensor::{Context, ContextParams, Tensor};
use ggweb_fuzz::graph_gen::{build, fill, pool_size, BuiltGraph};
use ggweb_fuzz::Bytes;
use libfuzzer_sys::fuzz_target;

struct FuzzBuft {
    name: &'static str,
    align: usize,
    max: usize,
}

impl BufferType for FuzzBuft {
    fn name(&self) -> &str {
        self.name
    }
    fn alignment(&self) -> usize {
        self.align
    }
    fn max_size(&self) -> usize {
        self.max
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(HostBuffer::new(size, self.align, self.name)?))
    }
}

fn headers() -> Context {
    Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true })
}

/// An allocating context of exactly the size a dry run measured (a fixed generous pool
/// costs an mmap per execution).
fn pool(size: usize) -> Context {
    Context::new(ContextParams { mem_size: size, no_alloc: false })
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter().map(|t| t.to_f32_vec().iter().map(|v| v.to_bits()).collect()).collect()
}

/// Fills the inputs and runs the graph; the results' and weights' bits, or the error.
fn run(g: &BuiltGraph) -> Result<(Vec<Vec<u32>>, Vec<Vec<u32>>), BackendError> {
    // Inputs outside the graph (no sink reaches them) have no memory: skip them.
    for (k, t) in g.inputs.iter().enumerate().filter(|(_, t)| g.gf.contains(t)) {
        fill(t, k);
    }
    CpuBackend::new(1).graph_compute(&g.gf)?;
    Ok((bits(&g.results), bits(&g.weights)))
}

fuzz_target!(|data: &[u8]| {
    // 8 bytes of configuration, the rest builds the graph.
    let (cfg_bytes, graph_bytes) = data.split_at(data.len().min(8));
    let mut cfg = Bytes::new(cfg_bytes);
    // Buffer types are compared by name, so a name fixes alignment and size limit; ids
    // naming the same type share one buffer (ggml's rule).
    let kinds: Vec<Rc<dyn BufferType>> = ["A", "B", "CPU"]
        .into_iter()
        .map(|name| {
            let b = cfg.u8() as usize;
            let align = [4, 16, 32, 64, 128][b % 5];
            // Mostly unlimited; sometimes small enough that the plan does not fit.
            let max = if (b / 5) % 8 == 0 { 1024 << (b / 40) % 6 } else { usize::MAX };
            Rc::new(FuzzBuft { name, align, max }) as Rc<dyn BufferType>
        })
        .collect();
    let n_bufts = 1 + cfg.below(3);
    let pick = cfg.u8() as usize;
    let bufts: Vec<Rc<dyn BufferType>> = (0..n_bufts).map(|i| kinds[(pick >> (2 * i)) % 3].clone()).collect();
    let inplace = cfg.bool();
    let ids_seed = cfg.u8() as usize;

    let (dry, dry_w) = (headers(), headers());
    build(&mut Bytes::new(graph_bytes), &dry, &dry_w);
    let (ops_size, w_size) = (pool_size(&dry), pool_size(&dry_w));

    let (ctx, w_ctx) = (headers(), pool(w_size));
    let g = build(&mut Bytes::new(graph_bytes), &ctx, &w_ctx);
    let node_ids: Vec<usize> = (0..g.gf.nodes.len()).map(|i| (i * 7 + ids_seed) % n_bufts).collect();
    let leaf_ids: Vec<usize> = (0..g.gf.leafs.len()).map(|i| (i * 5 + ids_seed / 3) % n_bufts).collect();

    let mut galloc = Gallocr::new(bufts);
    galloc.set_inplace(inplace);
    let placed =
        if n_bufts == 1 { galloc.alloc_graph(&g.gf) } else { galloc.alloc_graph_n(&g.gf, &node_ids, &leaf_ids) };
    match placed {
        Ok(ok) => assert!(ok, "alloc_graph returned false with buffer ids given"),
        // A plan above a buffer type's max_size is refused, typed.
        Err(BackendError::OutOfMemory { .. }) => return,
        Err(e) => panic!("alloc_graph: {e}"),
    }
    if let Err(e) = galloc.check_graph(&g.gf) {
        panic!("invalid placement: {e}");
    }
    let n_reserves = galloc.n_reserves();
    let again =
        if n_bufts == 1 { galloc.alloc_graph(&g.gf) } else { galloc.alloc_graph_n(&g.gf, &node_ids, &leaf_ids) };
    again.expect("the same graph again");
    assert_eq!(galloc.n_reserves(), n_reserves, "the same graph did not fit its own plan");
    galloc.check_graph(&g.gf).expect("valid after the second alloc_graph");

    // The same graph with every tensor in its own memory.
    let (ref_ctx, ref_w) = (pool(ops_size), pool(w_size));
    let r = build(&mut Bytes::new(graph_bytes), &ref_ctx, &ref_w);
    assert_eq!((r.gf.nodes.len(), r.gf.leafs.len()), (g.gf.nodes.len(), g.gf.leafs.len()));
    match (run(&g), run(&r)) {
        (Ok(got), Ok(want)) => {
            assert!(got.0 == want.0, "a result differs between gallocr's placement and separate memory");
            assert!(got.1 == want.1, "a weight (cpy target) differs between gallocr's placement and separate memory");
        }
        (Err(_), Err(_)) => {}
        (got, want) => panic!("compute: {:?} with gallocr, {:?} with separate memory", got.err(), want.err()),
    }
});
