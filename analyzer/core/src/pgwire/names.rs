//! Prepared statements and portals by name, bounded: past MAX_NAMES the oldest is forgotten
//! (a client that never closes its named statements must not grow memory without bound).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Prepared statements and portals remembered per connection.
pub const MAX_NAMES: usize = 10_000;

/// Names in insertion order (a name put again moves to the end), as a Python dict with
/// pop-then-insert keeps them.
#[derive(Debug, Default)]
pub struct Names {
    map: HashMap<Arc<str>, (u64, Arc<str>)>, // name -> (when put, value)
    order: VecDeque<(u64, Arc<str>)>,        // puts in order; stale ones are skipped
    puts: u64,
}

impl Names {
    pub fn get(&self, key: &str) -> Option<&Arc<str>> {
        self.map.get(key).map(|e| &e.1)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn put(&mut self, key: &str, value: Arc<str>) {
        let key: Arc<str> = match self.map.remove_entry(key) {
            Some((k, _)) => k,
            None => Arc::from(key),
        };
        if self.map.len() >= MAX_NAMES {
            self.forget_oldest();
        }
        self.puts += 1;
        self.map.insert(key.clone(), (self.puts, value));
        self.order.push_back((self.puts, key));
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(at, k)| map.get(k).map(|e| e.0) == Some(*at));
        }
    }

    fn forget_oldest(&mut self) {
        while let Some((at, k)) = self.order.pop_front() {
            if self.map.get(&k).map(|e| e.0) == Some(at) {
                self.map.remove(&k);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_oldest_forgotten() {
        let mut n = Names::default();
        let v: Arc<str> = Arc::from("SELECT 1");
        for i in 0..MAX_NAMES + 10 {
            n.put(&format!("S_{i}"), v.clone());
        }
        assert_eq!(n.len(), MAX_NAMES);
        assert!(n.get("S_0").is_none() && n.get(&format!("S_{}", MAX_NAMES + 9)).is_some());
    }

    #[test]
    fn put_again_moves_to_the_end() {
        let mut n = Names::default();
        for i in 0..MAX_NAMES {
            n.put(&format!("s{i}"), Arc::from("x"));
        }
        n.put("s0", Arc::from("y")); // s0 is now the newest: s1 goes first
        n.put("new", Arc::from("z"));
        assert!(n.get("s1").is_none() && n.get("s0").map(|v| &**v) == Some("y"));
        for _ in 0..100_000 {
            n.put("", Arc::from("unnamed")); // the same name again and again: no growth
        }
        assert!(n.order.len() <= 2 * n.len() + 64);
    }
}
