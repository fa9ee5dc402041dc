//! A bounded window of recently seen command ids: a command retried by its submitter (or
//! forwarded twice by a reconnecting transport) after it was ordered is recognised while it is
//! among the last `capacity` ids remembered. Memory is bounded; an id older than the window is
//! forgotten (the submitter's retry window is far shorter). Each id may carry a value (where it
//! was ordered); `Window` alone remembers the ids.

use std::collections::{HashMap, VecDeque};

#[derive(Clone, Debug)]
pub struct Window<V = ()> {
    ids: HashMap<u64, V>,
    order: VecDeque<u64>,
    capacity: usize,
}

impl<V> Window<V> {
    pub fn new(capacity: usize) -> Self {
        Window {
            ids: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Remember `id` with `value`; false (and nothing changes) if it is in the window already.
    /// The oldest id leaves once the window is full.
    pub fn insert_with(&mut self, id: u64, value: V) -> bool {
        if self.ids.contains_key(&id) {
            return false;
        }
        self.ids.insert(id, value);
        self.order.push_back(id);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
        true
    }

    /// Remember `id` with `value`, replacing the value it has if it is in the window (its place
    /// in the window stays).
    pub fn set(&mut self, id: u64, value: V) {
        match self.ids.get_mut(&id) {
            Some(v) => *v = value,
            None => {
                self.insert_with(id, value);
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<&V> {
        self.ids.get(&id)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.ids.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Forget everything (a state transfer replaced what was ordered).
    pub fn clear(&mut self) {
        self.ids.clear();
        self.order.clear();
    }
}

impl Window<()> {
    /// Remember `id`; false if it is in the window already.
    pub fn insert(&mut self, id: u64) -> bool {
        self.insert_with(id, ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_ids_only() {
        let mut w = Window::new(2);
        assert!(w.insert(1) && w.insert(2));
        assert!(!w.insert(1), "a duplicate");
        assert!(w.insert(3));
        assert!(!w.contains(1) && w.contains(2) && w.contains(3));
        assert_eq!(w.len(), 2);
        w.clear();
        assert!(w.is_empty() && w.insert(2));
        let mut m: Window<u64> = Window::new(1);
        assert!(m.insert_with(7, 40));
        assert!(!m.insert_with(7, 41), "the first value stays");
        assert_eq!(m.get(7), Some(&40));
        m.set(8, 50);
        assert!(m.get(7).is_none());
        m.set(8, 51);
        assert_eq!((m.get(8), m.len()), (Some(&51), 1));
    }
}
