//! ggml-alloc: `tallocr` (linear) and `gallocr` (graph allocator). Filled in by the
//! allocator work; see the seeds' section 3.
