//! gallocr on random graphs: reserve + alloc_graph (one or several buffer types, random
//! alignments and buffer ids, in-place on or off), then
//! - `Gallocr::check_graph`: every tensor inside its buffer and aligned, no two live
//!   tensors share bytes (the checker reasons about lifetimes on its own);
//! - allocating again with the plan in place changes nothing and stays valid;
//! - a graph of the same bytes with a smaller "token count" reuses the plan when its
//!   structure is the same (every eval after the worst-case reserve) and stays valid;
//! - computing the graph in gallocr's placement gives bit for bit what it gives when
//!   every tensor has memory of its own (an allocating context).
#![no_main]

use std::rc::Rc;

use ggweb::allocator::Gallocr;
use ggweb::backend::host::HostBuffer;
use ggweb::backend::{Backend, BackendError, Buffer, BufferType};
use ggweb::cpu::CpuBackend;
use ggweb::graph::Graph;
use ggweb::tensor::{Context, ContextParams, Tensor};
use ggweb_fuzz::graph_gen::{bits, build, fill, pool_size, BuiltGraph, N_MAX};
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

fn bits_of(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter().map(bits).collect()
}

/// The bits of each result and of each weight after a run.
type RunBits = (Vec<Vec<u32>>, Vec<Vec<u32>>);

/// Fills the inputs and runs the graph; the results' and weights' bits, or the error.
fn run(g: &BuiltGraph) -> Result<RunBits, BackendError> {
    // Inputs outside the graph (no sink reaches them) have no memory: skip them.
    for (k, t) in g.inputs.iter().enumerate().filter(|(_, t)| g.gf.contains(t)) {
        fill(t, k);
    }
    CpuBackend::new(1).graph_compute(&g.gf)?;
    Ok((bits_of(&g.results), bits_of(&g.weights)))
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
            let max = if (b / 5).is_multiple_of(8) { 1024 << ((b / 40) % 6) } else { usize::MAX };
            Rc::new(FuzzBuft { name, align, max }) as Rc<dyn BufferType>
        })
        .collect();
    let n_bufts = 1 + cfg.below(3);
    let pick = cfg.u8() as usize;
    let bufts: Vec<Rc<dyn BufferType>> = (0..n_bufts).map(|i| kinds[(pick >> (2 * i)) % 3].clone()).collect();
    let inplace = cfg.bool();
    let ids_seed = cfg.u8() as usize;

    let n_small = 1 + cfg.below(N_MAX as usize) as i64;
    let ids = |gf: &Graph| -> (Vec<usize>, Vec<usize>) {
        (
            (0..gf.nodes.len()).map(|i| (i * 7 + ids_seed) % n_bufts).collect(),
            (0..gf.leafs.len()).map(|i| (i * 5 + ids_seed / 3) % n_bufts).collect(),
        )
    };
    let mut galloc = Gallocr::new(bufts);
    galloc.set_inplace(inplace);
    let alloc = |galloc: &mut Gallocr, gf: &Graph| {
        if n_bufts == 1 {
            galloc.alloc_graph(gf)
        } else {
            let (node_ids, leaf_ids) = ids(gf);
            galloc.alloc_graph_n(gf, &node_ids, &leaf_ids)
        }
    };

    // The worst case (n = N_MAX), planned and placed; then the same graph again, which
    // must reuse the plan; then a graph of the same bytes with n = n_small, which reuses
    // the plan when its structure is the same (the eval path) or plans anew.
    for (round, n) in [(0, N_MAX), (1, N_MAX), (2, n_small)] {
        let (dry, dry_w) = (headers(), headers());
        build(&mut Bytes::new(graph_bytes), &dry, &dry_w, n);
        let (ops_size, w_size) = (pool_size(&dry), pool_size(&dry_w));

        let (ctx, w_ctx) = (headers(), pool(w_size));
        let g = build(&mut Bytes::new(graph_bytes), &ctx, &w_ctx, n);
        let (n_reserves, fits) = (galloc.n_reserves(), galloc.fits_plan(&g.gf, None));
        match alloc(&mut galloc, &g.gf) {
            Ok(ok) => assert!(ok, "alloc_graph returned false with buffer ids given"),
            // A plan above a buffer type's max_size is refused, typed.
            Err(BackendError::OutOfMemory { .. }) if round != 1 => return,
            Err(e) => panic!("round {round}: alloc_graph: {e}"),
        }
        if let Err(e) = galloc.check_graph(&g.gf) {
            panic!("round {round} (n {n}): invalid placement: {e}");
        }
        if round == 1 {
            assert!(fits, "the same graph does not fit its own plan");
        }
        if fits {
            assert_eq!(galloc.n_reserves(), n_reserves, "round {round}: planned again though the graph fits");
        }

        // The same graph with every tensor in its own memory.
        let (ref_ctx, ref_w) = (pool(ops_size), pool(w_size));
        let r = build(&mut Bytes::new(graph_bytes), &ref_ctx, &ref_w, n);
        assert_eq!((r.gf.nodes.len(), r.gf.leafs.len()), (g.gf.nodes.len(), g.gf.leafs.len()));
        match (run(&g), run(&r)) {
            (Ok(got), Ok(want)) => {
                assert!(got.0 == want.0, "round {round}: a result differs from the run in separate memory");
                assert!(got.1 == want.1, "round {round}: a cpy target differs from the run in separate memory");
            }
            (Err(_), Err(_)) => {}
            (got, want) => panic!("round {round}: compute: {:?} with gallocr, {:?} alone", got.err(), want.err()),
        }
    }
});
