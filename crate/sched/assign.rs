//! The scheduler's tensor → backend table: an open-addressing hash map on tensor ids.
//! `split_graph` looks every node and source up several times per graph, once per decode
//! step; a `BTreeMap` there was ~5% of a 124M decode step on one thread (2026-12-02).

use alloc::vec;
use alloc::vec::Vec;

use super::Assignment;

/// Ids → assignments; ids are never `usize::MAX` (the empty slot).
pub(super) struct Assignments {
    slots: Vec<(usize, Assignment)>,
    len: usize,
}

const EMPTY: usize = usize::MAX;

impl Assignments {
    /// Room for about `n` entries before the first growth.
    pub(super) fn with_capacity(n: usize) -> Assignments {
        let dummy = Assignment { backend: 0, cause: super::Cause::First };
        Assignments { slots: vec![(EMPTY, dummy); (2 * n).next_power_of_two().max(16)], len: 0 }
    }

    /// Where `id` is, or the empty slot where it would go.
    fn slot(&self, id: usize) -> usize {
        let mask = self.slots.len() - 1;
        // Fibonacci hashing: ids are consecutive counters, spread them over the table.
        let bits = mask.count_ones();
        let mut i = ((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize;
        while self.slots[i].0 != id && self.slots[i].0 != EMPTY {
            i = (i + 1) & mask;
        }
        i
    }

    pub(super) fn get(&self, id: &usize) -> Option<&Assignment> {
        let s = &self.slots[self.slot(*id)];
        (s.0 == *id).then_some(&s.1)
    }

    pub(super) fn contains_key(&self, id: &usize) -> bool {
        self.get(id).is_some()
    }

    pub(super) fn insert(&mut self, id: usize, a: Assignment) {
        assert_ne!(id, EMPTY, "sched: tensor id {id}");
        if 2 * (self.len + 1) > self.slots.len() {
            let old = core::mem::take(&mut self.slots);
            *self = Assignments::with_capacity(old.len());
            for (k, v) in old.into_iter().filter(|s| s.0 != EMPTY) {
                self.insert(k, v);
            }
        }
        let i = self.slot(id);
        if self.slots[i].0 == EMPTY {
            self.len += 1;
        }
        self.slots[i] = (id, a);
    }
}

impl core::ops::Index<&usize> for Assignments {
    type Output = Assignment;
    fn index(&self, id: &usize) -> &Assignment {
        self.get(id).unwrap_or_else(|| panic!("sched: tensor {id} has no backend"))
    }
}
