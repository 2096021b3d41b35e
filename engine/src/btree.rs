//! The lean kernel's ordered index: an in-memory B+tree from a key to a small value, with
//! nodes in chunked pools (no allocation per insert once a chunk exists; chunks are large
//! enough for transparent huge pages).
//!
//! Guarantees: keys are unique and kept in order; lookups, inserts and deletes descend once
//! from the root; range scans run in either direction and stop when told. Fan-out is high
//! (64 keys per inner node, 32 entries per leaf) so a million entries sit three or four
//! levels deep with the top levels cache-resident. A full leaf that receives a key past its
//! last one splits by starting a new leaf instead of halving (as B-trees in production do for
//! ascending inserts), and one whose inserts keep landing one past the previous insert splits
//! at that point, so TPC-C's ever-growing order keys (ascending within each district, in the
//! middle of the key space) fill leaves completely. Deletion removes empty nodes but does not
//! rebalance under-full ones (lazy deletion).
//! Everything depends only on the sequence of operations: two replicas fed the same sequence
//! hold identical trees.

use std::cmp::Ordering;

use crate::arena::Pool;

/// Entries per leaf.
pub const LEAF_ENTRIES: usize = 32;
/// Keys per inner node (children: one more).
pub const INNER_KEYS: usize = 64;

#[derive(Clone, Copy)]
struct Leaf<K, V> {
    len: u32,
    /// Where the last insert into this leaf went ([`NO_POS`] after a removal): a full leaf
    /// whose inserts keep landing one past the previous one splits there.
    last: u32,
    keys: [K; LEAF_ENTRIES],
    vals: [V; LEAF_ENTRIES],
}

#[derive(Clone, Copy)]
struct Inner<K> {
    /// Number of keys; children = len + 1.
    len: u32,
    keys: [K; INNER_KEYS],
    children: [u32; INNER_KEYS + 1],
}

/// [`Leaf::last`] when no insert position is remembered.
const NO_POS: u32 = u32::MAX;

/// What an insert into a subtree asks of its parent.
enum Split<K> {
    None,
    /// A new right sibling holding keys ≥ the separator.
    New(K, u32),
}

/// Deepest tree supported (fan-out ≥ 32 per level makes 2^32 entries far shallower).
const HEIGHT_MAX: usize = 16;

/// The leaf the last insert went to and the key range it covers (`lo <= key < hi`): the next
/// insert of a nearby key (TPC-C inserts an order's lines one after another) skips the descent.
#[derive(Clone, Copy)]
struct Hint<K> {
    leaf: u32,
    lo: Option<K>,
    hi: Option<K>,
}

/// An ordered map from `K` to `V`.
pub struct BTree<K: Copy + Ord + Default, V: Copy + Default> {
    leaves: Pool<Leaf<K, V>>,
    inners: Pool<Inner<K>>,
    root: u32,
    /// 0: the root is a leaf.
    height: u32,
    len: usize,
    hint: Option<Hint<K>>,
}

impl<K: Copy + Ord + Default, V: Copy + Default> Default for BTree<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy + Ord + Default, V: Copy + Default> BTree<K, V> {
    pub fn new() -> Self {
        let mut leaves = Pool::new();
        let root = leaves.alloc(Self::empty_leaf());
        BTree { leaves, inners: Pool::new(), root, height: 0, len: 0, hint: None }
    }

    fn empty_leaf() -> Leaf<K, V> {
        Leaf { len: 0, last: NO_POS, keys: [K::default(); LEAF_ENTRIES], vals: [V::default(); LEAF_ENTRIES] }
    }

    fn empty_inner() -> Inner<K> {
        Inner { len: 0, keys: [K::default(); INNER_KEYS], children: [0; INNER_KEYS + 1] }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the child of `n` that covers `key`.
    #[inline]
    fn child_for(n: &Inner<K>, key: &K) -> usize {
        n.keys[..n.len as usize].partition_point(|k| k <= key)
    }

    /// The leaf that would hold `key`.
    #[inline]
    fn leaf_for(&self, key: &K) -> u32 {
        let mut id = self.root;
        for _ in 0..self.height {
            let n = self.inners.get(id);
            id = n.children[Self::child_for(n, key)];
        }
        id
    }

    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        let l = self.leaves.get(self.leaf_for(key));
        let keys = &l.keys[..l.len as usize];
        keys.binary_search(key).ok().map(|i| l.vals[i])
    }

    /// Inserts `key → val`; returns false (and changes nothing) if the key exists.
    pub fn insert(&mut self, key: K, val: V) -> bool {
        if let Some(h) = self.hint {
            if h.lo.is_none_or(|lo| key >= lo) && h.hi.is_none_or(|hi| key < hi) {
                let l = self.leaves.get(h.leaf);
                if (l.len as usize) < LEAF_ENTRIES {
                    let (inserted, split) = self.insert_leaf(h.leaf, key, val);
                    debug_assert!(matches!(split, Split::None));
                    self.len += inserted as usize;
                    return inserted;
                }
            }
        }
        // Descend, remembering the path and the leaf's key range.
        let mut path = [(0u32, 0usize); HEIGHT_MAX];
        let (mut lo, mut hi) = (None, None);
        let mut id = self.root;
        for step in path.iter_mut().take(self.height as usize) {
            let n = self.inners.get(id);
            let idx = Self::child_for(n, &key);
            if idx > 0 {
                lo = Some(n.keys[idx - 1]);
            }
            if idx < n.len as usize {
                hi = Some(n.keys[idx]);
            }
            *step = (id, idx);
            id = n.children[idx];
        }
        let (inserted, mut split) = self.insert_leaf(id, key, val);
        self.len += inserted as usize;
        if matches!(split, Split::None) {
            self.hint = Some(Hint { leaf: id, lo, hi });
            return inserted;
        }
        self.hint = None;
        for &(pid, idx) in path[..self.height as usize].iter().rev() {
            let Split::New(sep, right) = split else { break };
            split = self.insert_inner(pid, idx, sep, right);
        }
        if let Split::New(sep, right) = split {
            let mut r = Self::empty_inner();
            r.len = 1;
            r.keys[0] = sep;
            r.children[0] = self.root;
            r.children[1] = right;
            self.root = self.inners.alloc(r);
            self.height += 1;
            assert!((self.height as usize) < HEIGHT_MAX, "B+tree deeper than {HEIGHT_MAX}");
        }
        inserted
    }

    fn insert_leaf(&mut self, id: u32, key: K, val: V) -> (bool, Split<K>) {
        let l = self.leaves.get_mut(id);
        let n = l.len as usize;
        let pos = if n > 0 && l.keys[n - 1] < key {
            n // appending: TPC-C's common case
        } else {
            match l.keys[..n].binary_search(&key) {
                Ok(_) => return (false, Split::None),
                Err(p) => p,
            }
        };
        if n < LEAF_ENTRIES {
            l.keys.copy_within(pos..n, pos + 1);
            l.vals.copy_within(pos..n, pos + 1);
            l.keys[pos] = key;
            l.vals[pos] = val;
            l.len += 1;
            l.last = pos as u32;
            return (true, Split::None);
        }
        let mut right = Self::empty_leaf();
        if pos == n {
            // Ascending insert: start a new leaf, leave this one full.
            right.keys[0] = key;
            right.vals[0] = val;
            right.len = 1;
            right.last = 0;
        } else if pos > 0 && l.last as usize + 1 == pos {
            // Ascending inserts in the middle of the key space (TPC-C appends each district's
            // orders, and the next district's keys follow in the same leaf): split at the
            // insertion point, so the keys below it keep a full leaf and the next insert goes
            // to its end, rather than halving and leaving half-empty leaves behind for good.
            let moved = n - pos;
            right.keys[..moved].copy_from_slice(&l.keys[pos..n]);
            right.vals[..moved].copy_from_slice(&l.vals[pos..n]);
            right.len = moved as u32;
            l.keys[pos] = key;
            l.vals[pos] = val;
            l.len = pos as u32 + 1;
            l.last = pos as u32;
        } else {
            let mid = LEAF_ENTRIES / 2;
            let moved = n - mid;
            right.keys[..moved].copy_from_slice(&l.keys[mid..n]);
            right.vals[..moved].copy_from_slice(&l.vals[mid..n]);
            right.len = moved as u32;
            l.len = mid as u32;
            let target = if pos <= mid { &mut *l } else { &mut right };
            let p = if pos <= mid { pos } else { pos - mid };
            let tn = target.len as usize;
            target.keys.copy_within(p..tn, p + 1);
            target.vals.copy_within(p..tn, p + 1);
            target.keys[p] = key;
            target.vals[p] = val;
            target.len += 1;
            target.last = p as u32;
        }
        let sep = right.keys[0];
        let rid = self.leaves.alloc(right);
        (true, Split::New(sep, rid))
    }

    /// Puts separator `sep` and child `right` after child `idx` of inner node `id`.
    fn insert_inner(&mut self, id: u32, idx: usize, sep: K, right: u32) -> Split<K> {
        let n = self.inners.get_mut(id);
        let len = n.len as usize;
        if len < INNER_KEYS {
            n.keys.copy_within(idx..len, idx + 1);
            n.children.copy_within(idx + 1..len + 1, idx + 2);
            n.keys[idx] = sep;
            n.children[idx + 1] = right;
            n.len += 1;
            return Split::None;
        }
        let mut r = Self::empty_inner();
        if idx == len {
            // Ascending insert: the new child starts a new inner node.
            r.len = 0;
            r.children[0] = right;
            let rid = self.inners.alloc(r);
            return Split::New(sep, rid);
        }
        // Middle split over the len + 1 keys and len + 2 children.
        let mut keys = [K::default(); INNER_KEYS + 1];
        let mut children = [0u32; INNER_KEYS + 2];
        keys[..idx].copy_from_slice(&n.keys[..idx]);
        keys[idx] = sep;
        keys[idx + 1..].copy_from_slice(&n.keys[idx..len]);
        children[..idx + 1].copy_from_slice(&n.children[..idx + 1]);
        children[idx + 1] = right;
        children[idx + 2..].copy_from_slice(&n.children[idx + 1..len + 1]);
        let m = INNER_KEYS.div_ceil(2);
        n.len = m as u32;
        n.keys[..m].copy_from_slice(&keys[..m]);
        n.children[..m + 1].copy_from_slice(&children[..m + 1]);
        let up = keys[m];
        let rk = INNER_KEYS - m;
        r.len = rk as u32;
        r.keys[..rk].copy_from_slice(&keys[m + 1..]);
        r.children[..rk + 1].copy_from_slice(&children[m + 1..]);
        let rid = self.inners.alloc(r);
        Split::New(up, rid)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.hint = None;
        let (val, emptied) = self.remove_at(self.root, self.height, key);
        let val = val?;
        self.len -= 1;
        debug_assert!(!emptied || self.height == 0 || self.len == 0);
        // Collapse a root inner node left with a single child.
        while self.height > 0 && self.inners.get(self.root).len == 0 {
            let old = self.root;
            self.root = self.inners.get(old).children[0];
            self.inners.release(old);
            self.height -= 1;
        }
        Some(val)
    }

    /// Returns the removed value and whether node `id` is now empty (and was released).
    fn remove_at(&mut self, id: u32, height: u32, key: &K) -> (Option<V>, bool) {
        if height == 0 {
            let l = self.leaves.get_mut(id);
            let n = l.len as usize;
            let Ok(pos) = l.keys[..n].binary_search(key) else { return (None, false) };
            let v = l.vals[pos];
            l.keys.copy_within(pos + 1..n, pos);
            l.vals.copy_within(pos + 1..n, pos);
            l.len -= 1;
            l.last = NO_POS;
            let empty = l.len == 0 && id != self.root;
            if empty {
                self.leaves.release(id);
            }
            return (Some(v), empty);
        }
        let (idx, child) = {
            let n = self.inners.get(id);
            let idx = Self::child_for(n, key);
            (idx, n.children[idx])
        };
        let (v, child_empty) = self.remove_at(child, height - 1, key);
        if !child_empty {
            return (v, false);
        }
        let n = self.inners.get_mut(id);
        let len = n.len as usize;
        if len == 0 {
            // The only child went away: this node is empty too.
            if id != self.root {
                self.inners.release(id);
                return (v, true);
            }
            // An empty root: start over with an empty leaf.
            self.inners.release(id);
            self.root = self.leaves.alloc(Self::empty_leaf());
            self.height = 0;
            return (v, false);
        }
        // Drop child idx and the separator beside it.
        let k = if idx == 0 { 0 } else { idx - 1 };
        n.keys.copy_within(k + 1..len, k);
        n.children.copy_within(idx + 1..len + 1, idx);
        n.len -= 1;
        (v, false)
    }

    /// Visits entries with `lo <= key <= hi` in ascending (`forward`) or descending order
    /// until `f` returns false.
    pub fn range(&self, lo: &K, hi: &K, forward: bool, f: &mut dyn FnMut(&K, &V) -> bool) {
        if lo > hi {
            return;
        }
        self.range_at(self.root, self.height, lo, hi, forward, f);
    }

    fn range_at(&self, id: u32, height: u32, lo: &K, hi: &K, fwd: bool, f: &mut dyn FnMut(&K, &V) -> bool) -> bool {
        if height == 0 {
            let l = self.leaves.get(id);
            let keys = &l.keys[..l.len as usize];
            let a = keys.partition_point(|k| k < lo);
            let b = keys.partition_point(|k| k <= hi);
            if fwd {
                for i in a..b {
                    if !f(&l.keys[i], &l.vals[i]) {
                        return false;
                    }
                }
            } else {
                for i in (a..b).rev() {
                    if !f(&l.keys[i], &l.vals[i]) {
                        return false;
                    }
                }
            }
            return true;
        }
        let n = self.inners.get(id);
        let a = Self::child_for(n, lo);
        let b = Self::child_for(n, hi);
        if fwd {
            for c in a..=b {
                if !self.range_at(n.children[c], height - 1, lo, hi, fwd, f) {
                    return false;
                }
            }
        } else {
            for c in (a..=b).rev() {
                if !self.range_at(n.children[c], height - 1, lo, hi, fwd, f) {
                    return false;
                }
            }
        }
        true
    }

    /// Visits every entry in ascending order.
    pub fn for_each(&self, f: &mut dyn FnMut(&K, &V)) {
        self.for_each_at(self.root, self.height, f);
    }

    fn for_each_at(&self, id: u32, height: u32, f: &mut dyn FnMut(&K, &V)) {
        if height == 0 {
            let l = self.leaves.get(id);
            for i in 0..l.len as usize {
                f(&l.keys[i], &l.vals[i]);
            }
            return;
        }
        let n = self.inners.get(id);
        for c in 0..=n.len as usize {
            self.for_each_at(n.children[c], height - 1, f);
        }
    }

    /// Checks the structural invariants (keys ordered within and across nodes, separators
    /// bound their subtrees, the entry count matches). For tests and debug assertions.
    pub fn check_invariants(&self) {
        let mut prev: Option<K> = None;
        let mut n = 0usize;
        self.for_each(&mut |k, _| {
            if let Some(p) = prev {
                assert_eq!(p.cmp(k), Ordering::Less, "keys strictly ascending");
            }
            prev = Some(*k);
            n += 1;
        });
        assert_eq!(n, self.len, "entry count");
        self.check_bounds(self.root, self.height, None, None);
    }

    fn check_bounds(&self, id: u32, height: u32, lo: Option<K>, hi: Option<K>) {
        let within = |k: &K| lo.is_none_or(|l| *k >= l) && hi.is_none_or(|h| *k < h);
        if height == 0 {
            let l = self.leaves.get(id);
            assert!(l.keys[..l.len as usize].iter().all(within), "leaf keys within separators");
            return;
        }
        let n = self.inners.get(id);
        for c in 0..=n.len as usize {
            let clo = if c == 0 { lo } else { Some(n.keys[c - 1]) };
            let chi = if c == n.len as usize { hi } else { Some(n.keys[c]) };
            self.check_bounds(n.children[c], height - 1, clo, chi);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A model-based test: random inserts, deletes and scans against std's BTreeMap.
    #[test]
    fn matches_a_reference_map_under_random_operations() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..4 {
            let mut t = BTree::<u64, u32>::new();
            let mut m = BTreeMap::new();
            let space = [50u64, 5_000, 200_000, 1 << 40][round];
            for i in 0..60_000u32 {
                let k = next() % space;
                match next() % 10 {
                    0..=5 => {
                        let fresh = !m.contains_key(&k);
                        if fresh {
                            m.insert(k, i);
                        }
                        assert_eq!(t.insert(k, i), fresh);
                    }
                    6..=8 => assert_eq!(t.remove(&k), m.remove(&k)),
                    _ => assert_eq!(t.get(&k), m.get(&k).copied()),
                }
            }
            t.check_invariants();
            assert_eq!(t.len(), m.len());
            let lo = next() % space;
            let hi = lo + next() % (space / 4 + 1);
            for fwd in [true, false] {
                let mut got = Vec::new();
                t.range(&lo, &hi, fwd, &mut |k, v| {
                    got.push((*k, *v));
                    got.len() < 100
                });
                let mut want: Vec<_> = m.range(lo..=hi).map(|(k, v)| (*k, *v)).collect();
                if !fwd {
                    want.reverse();
                }
                want.truncate(100);
                assert_eq!(got, want, "range {lo}..={hi} fwd={fwd}");
            }
        }
    }

    #[test]
    fn ascending_inserts_fill_leaves_and_deletes_free_nodes() {
        let mut t = BTree::<u64, u32>::new();
        for k in 0..100_000u64 {
            assert!(t.insert(k, k as u32));
        }
        t.check_invariants();
        // Full leaves: one leaf per LEAF_ENTRIES keys (rounding up).
        assert_eq!(t.leaves.live(), 100_000usize.div_ceil(LEAF_ENTRIES));
        for k in 0..100_000u64 {
            assert_eq!(t.remove(&k), Some(k as u32));
        }
        t.check_invariants();
        assert!(t.is_empty());
        assert_eq!(t.leaves.live(), 1, "only the root leaf remains");
        assert_eq!(t.inners.live(), 0);
    }

    /// TPC-C's pattern: ten districts, each appending its orders' keys in the middle of the
    /// key space, round robin. Leaves end (nearly) full, not half full: at most one partial
    /// leaf per district beyond the full ones.
    #[test]
    fn ascending_runs_in_the_middle_fill_leaves() {
        let mut t = BTree::<u64, u32>::new();
        let districts = 10u64;
        let per_district = 20_000u64;
        for o in 0..per_district {
            for d in 0..districts {
                assert!(t.insert((d << 32) | o, o as u32));
            }
        }
        t.check_invariants();
        let n = (districts * per_district) as usize;
        assert_eq!(t.len(), n);
        let full = n.div_ceil(LEAF_ENTRIES);
        assert!(t.leaves.live() <= full + 2 * districts as usize, "{} leaves for {n} keys", t.leaves.live());
        for d in 0..districts {
            assert_eq!(t.get(&((d << 32) | 777)), Some(777));
        }
    }

    #[test]
    fn duplicate_insert_changes_nothing() {
        let mut t = BTree::<u64, u32>::new();
        assert!(t.insert(5, 1));
        assert!(!t.insert(5, 2));
        assert_eq!(t.get(&5), Some(1));
        assert_eq!(t.len(), 1);
    }
}
