//! Entry ids for session files: 8 hex characters unique within the file (pi's rule).

use std::collections::HashSet;

use crate::ids::{random_bytes, uuid_v4};

/// An entry id: 8 hex characters not yet used in `taken`; after 100 collisions (practically never)
/// a whole UUID, as pi does.
pub fn entry_id(taken: &dyn Fn(&str) -> bool) -> String {
    for _ in 0..100 {
        let mut bytes = [0u8; 4];
        random_bytes(&mut bytes);
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        if !taken(&id) {
            return id;
        }
    }
    uuid_v4()
}

/// Convenience for callers holding a plain set of ids.
pub fn entry_id_not_in(taken: &HashSet<String>) -> String {
    entry_id(&|id| taken.contains(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_are_8_hex_and_avoid_taken() {
        let id = entry_id(&|_| false);
        assert_eq!(id.len(), 8);
        assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));
        // Everything taken: falls back to a whole UUID.
        assert_eq!(entry_id(&|_| true).len(), 36);
    }
}
