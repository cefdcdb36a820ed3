//! The id index of a session log: entry id → position in the log's entry list (the last entry
//! with that id). Input: the entry list, positions as entries are added. Output: positions.
//!
//! It stores positions only, never the ids: lookups compare against the entries' own `id`
//! fields, so a 100k-entry log does not hold every id a second time as a map key (a map of
//! `String` keys cost about 70 bytes and one allocation per entry). Open addressing with linear
//! probing; nothing is ever removed (logs only grow). Entries with an empty id are not indexed.
//!
//! It also remembers each entry's parent position as found when the entry was indexed, so the
//! walks from a leaf to the root (every context rebuild, `get_tree`) do not hash 100k ids. That
//! answer stays right until an id is indexed twice (a damaged file): from then on parents are
//! looked up by id again, as they are for a parent indexed after its child.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::entry::SessionEntry;

const NO_PARENT: usize = usize::MAX;

#[derive(Clone, Debug, Default)]
pub struct IdIndex {
    /// Position + 1 of an entry, 0 for a free slot. The length is 0 or a power of two.
    slots: Vec<usize>,
    len: usize,
    /// Position → its parent's position when it was indexed (`NO_PARENT`: none found then).
    parents: Vec<usize>,
    /// An id was indexed twice: positions found earlier may be stale.
    duplicates: bool,
    /// Seeded per process: ids come from files, and a fixed hash could be made to collide.
    hasher: RandomState,
}

impl IdIndex {
    /// The position of the last entry with `id`.
    pub fn get(&self, entries: &[SessionEntry], id: &str) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut slot = self.hasher.hash_one(id) as usize & mask;
        loop {
            let position = self.slots[slot].checked_sub(1)?;
            if entries.get(position).is_some_and(|e| e.id == id) {
                return Some(position);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The position of the parent of `entries[position]` (the last entry with its parent id).
    pub fn parent(&self, entries: &[SessionEntry], position: usize) -> Option<usize> {
        let parent_id = entries.get(position)?.parent_id.as_deref()?;
        match self.parents.get(position) {
            Some(&parent) if parent != NO_PARENT && !self.duplicates => Some(parent),
            _ => self.get(entries, parent_id),
        }
    }

    /// Whether `entries[position]` is the entry its id finds (it has an id, and no later entry
    /// has the same one).
    pub fn is_indexed(&self, entries: &[SessionEntry], position: usize) -> bool {
        match entries.get(position) {
            Some(entry) if !self.duplicates => !entry.id.is_empty(),
            Some(entry) => self.get(entries, &entry.id) == Some(position),
            None => false,
        }
    }

    pub fn contains(&self, entries: &[SessionEntry], id: &str) -> bool {
        self.get(entries, id).is_some()
    }

    /// Indexes `entries[position]` under its id, replacing an earlier entry with the same id.
    pub fn insert(&mut self, entries: &[SessionEntry], position: usize) {
        let Some(id) = entries.get(position).map(|e| e.id.as_str()) else {
            return;
        };
        if id.is_empty() {
            return;
        }
        let parent = entries[position]
            .parent_id
            .as_deref()
            .and_then(|p| self.get(entries, p));
        if self.parents.len() <= position {
            self.parents.resize(position + 1, NO_PARENT);
        }
        self.parents[position] = parent.unwrap_or(NO_PARENT);
        // At most half full, so probe runs stay short.
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow(entries);
        }
        let mask = self.slots.len() - 1;
        let mut slot = self.hasher.hash_one(id) as usize & mask;
        loop {
            match self.slots[slot].checked_sub(1) {
                None => {
                    self.slots[slot] = position + 1;
                    self.len += 1;
                    return;
                }
                Some(other) if entries.get(other).is_some_and(|e| e.id == id) => {
                    self.duplicates = true;
                    self.slots[slot] = position + 1;
                    return;
                }
                Some(_) => slot = (slot + 1) & mask,
            }
        }
    }

    /// Reserves room for `additional` more ids (a whole file's worth at once).
    pub fn reserve(&mut self, entries: &[SessionEntry], additional: usize) {
        self.parents.reserve(additional);
        while (self.len + additional) * 2 > self.slots.len() {
            self.grow(entries);
        }
    }

    fn grow(&mut self, entries: &[SessionEntry]) {
        let size = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        let mask = size - 1;
        for position in old.into_iter().filter_map(|p| p.checked_sub(1)) {
            let Some(entry) = entries.get(position) else {
                continue;
            };
            let mut slot = self.hasher.hash_one(entry.id.as_str()) as usize & mask;
            while self.slots[slot] != 0 {
                slot = (slot + 1) & mask;
            }
            self.slots[slot] = position + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::EntryKind;

    fn entry(id: &str) -> SessionEntry {
        let kind = EntryKind::SessionInfo { name: None };
        SessionEntry::new(id.to_string(), None, String::new(), kind)
    }

    #[test]
    fn finds_the_last_entry_per_id_across_growth() {
        let mut entries = Vec::new();
        let mut index = IdIndex::default();
        for n in 0..1000 {
            entries.push(entry(&format!("{n:08x}")));
            index.insert(&entries, n);
        }
        entries.push(entry("00000007")); // a duplicate id, as in a damaged file
        index.insert(&entries, 1000);
        entries.push(entry("")); // never indexed
        index.insert(&entries, 1001);
        assert_eq!(index.get(&entries, "00000000"), Some(0));
        assert_eq!(index.get(&entries, "000003e7"), Some(999));
        assert_eq!(index.get(&entries, "00000007"), Some(1000));
        assert_eq!(index.get(&entries, ""), None);
        assert!(!index.contains(&entries, "nothere"));
        assert_eq!(index.len, 1000);
        assert!(IdIndex::default().get(&entries, "00000000").is_none());
    }

    fn child(id: &str, parent: &str) -> SessionEntry {
        let kind = EntryKind::SessionInfo { name: None };
        SessionEntry::new(id.into(), Some(parent.into()), String::new(), kind)
    }

    #[test]
    fn parents_are_remembered_until_an_id_repeats() {
        let mut entries = vec![entry("a"), child("b", "a"), child("c", "late")];
        let mut index = IdIndex::default();
        for n in 0..entries.len() {
            index.insert(&entries, n);
        }
        assert_eq!(index.parent(&entries, 1), Some(0));
        assert_eq!(index.parent(&entries, 0), None);
        assert_eq!(index.parent(&entries, 2), None, "parent not there yet");
        entries.push(entry("late")); // a parent after its child: found by id
        index.insert(&entries, 3);
        assert_eq!(index.parent(&entries, 2), Some(3));
        assert!(index.is_indexed(&entries, 0));
        entries.push(entry("a")); // the id repeats: b's parent is now the later "a"
        index.insert(&entries, 4);
        assert_eq!(index.parent(&entries, 1), Some(4));
        assert!(!index.is_indexed(&entries, 0));
        assert!(index.is_indexed(&entries, 4));
    }
}
