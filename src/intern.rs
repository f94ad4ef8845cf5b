//! Shared copies of the short names that repeat across a cluster's objects (an endpoint's
//! node and zone: a few hundred distinct values behind hundreds of thousands of
//! endpoints). One `Arc<str>` per distinct name instead of one `String` per endpoint.
//!
//! The table is bounded: past [`LIMIT`] names it starts over (names handed out stay
//! valid; only later copies stop sharing with them), so a stream of ever-new names cannot
//! grow it without end.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Distinct names kept before the table starts over.
pub const LIMIT: usize = 65_536;

static TABLE: Mutex<Table> = Mutex::new(Table::new(LIMIT));

/// The shared copy of `name`.
pub fn intern(name: &str) -> Arc<str> {
    // A poisoned table only means another thread panicked mid-insert; the set is intact.
    TABLE.lock().unwrap_or_else(|e| e.into_inner()).get(name)
}

/// Names handed out, at most `limit` of them.
struct Table {
    names: Option<HashSet<Arc<str>>>,
    limit: usize,
}

impl Table {
    const fn new(limit: usize) -> Self {
        Table { names: None, limit }
    }

    fn get(&mut self, name: &str) -> Arc<str> {
        let names = self.names.get_or_insert_with(HashSet::new);
        if let Some(shared) = names.get(name) {
            return shared.clone();
        }
        if names.len() >= self.limit {
            names.clear();
        }
        let shared: Arc<str> = Arc::from(name);
        names.insert(shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_share_one_allocation() {
        let a = intern("node-intern-test");
        let b = intern(&String::from("node-intern-test"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "node-intern-test");
        assert!(!Arc::ptr_eq(&a, &intern("node-intern-other")));
    }

    #[test]
    fn a_full_table_starts_over_and_old_names_stay_valid() {
        let mut t = Table::new(3);
        let first = t.get("n0");
        for name in ["n1", "n2"] {
            t.get(name);
        }
        assert!(Arc::ptr_eq(&first, &t.get("n0")), "still held below the limit");
        t.get("n3");
        assert_eq!(t.names.as_ref().map_or(0, HashSet::len), 1, "started over at the limit");
        assert!(!Arc::ptr_eq(&first, &t.get("n0")), "a new copy after starting over");
        assert_eq!(&*first, "n0");
    }
}
