//! A second "device" made of host memory, for testing the scheduler where no GPU is: test
//! support, shared by tests/sched.rs and the scheduler's unit tests (crate/sched/tests.rs,
//! which see the crate as `ggweb` through lib.rs's `extern crate self`).
//!
//! [`HostBackend`] computes with the CPU kernels, but in buffers of its own type name and
//! only for the ops its predicate accepts, and it refuses to touch memory of any other
//! type: a copy the scheduler forgot is an error, as it would be on a real device. Two of
//! them with the same buffer type name share memory (a BLAS-like backend beside the CPU).

#![allow(dead_code)] // each user takes what it needs

use std::rc::Rc;

use ggweb::backend::host::HostBuffer;
use ggweb::backend::{Backend, BackendError, Buffer, BufferType};
use ggweb::cpu::{CpuBackend, CPU_ALIGNMENT};
use ggweb::graph::Graph;
use ggweb::tensor::{Op, Tensor};

/// Host memory under a buffer type name of its own.
#[derive(Clone, Debug)]
pub struct HostBufferType {
    name: String,
}

impl HostBufferType {
    pub fn new(name: &str) -> HostBufferType {
        HostBufferType { name: String::from(name) }
    }
}

impl BufferType for HostBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(HostBuffer::new(size, CPU_ALIGNMENT, &self.name)?))
    }
}

type OpFilter = Box<dyn Fn(&Tensor) -> bool>;

/// The CPU kernels behind a backend name, a buffer type name and an op filter.
pub struct HostBackend {
    name: String,
    buft: Rc<HostBufferType>,
    filter: OpFilter,
    cpu: CpuBackend,
}

impl HostBackend {
    /// `supports` chooses the ops it runs among those the CPU kernels have (views and
    /// leafs are always accepted: they run nowhere).
    pub fn new(name: &str, buffer_type: &str, supports: impl Fn(&Tensor) -> bool + 'static) -> HostBackend {
        HostBackend {
            name: String::from(name),
            buft: Rc::new(HostBufferType::new(buffer_type)),
            filter: Box::new(supports),
            cpu: CpuBackend::new(1),
        }
    }

    /// Fails unless `t` (a node or a source of `node`) is in a buffer of this backend's type.
    fn check_reads(&self, node: &Tensor, t: &Tensor) -> Result<(), BackendError> {
        let d = t.data().ok_or_else(|| BackendError::Unsupported {
            node: node.name(),
            reason: format!("operand '{}' is not allocated", t.name()),
        })?;
        if d.buffer.buffer_type_name() != self.buft.name() {
            return Err(BackendError::Unsupported {
                node: node.name(),
                reason: format!(
                    "operand '{}' is in a {} buffer; {} reads only {} buffers",
                    t.name(),
                    d.buffer.buffer_type_name(),
                    self.name,
                    self.buft.name()
                ),
            });
        }
        Ok(())
    }
}

impl Backend for HostBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        self.buft.clone()
    }
    fn graph_compute(&self, graph: &Graph) -> Result<(), BackendError> {
        for node in &graph.nodes {
            if node.op == Op::None || node.op.is_view() {
                continue;
            }
            if !self.supports_op(node) {
                return Err(BackendError::Unsupported {
                    node: node.name(),
                    reason: format!("{} runs no {}", self.name, node.op.name()),
                });
            }
            self.check_reads(node, node)?;
            for s in node.src.iter().flatten() {
                self.check_reads(node, s)?;
            }
            self.cpu.compute_node(node)?;
        }
        Ok(())
    }
    fn supports_op(&self, node: &Tensor) -> bool {
        node.op == Op::None || node.op.is_view() || ((self.filter)(node) && self.cpu.supports_op(node))
    }
}
