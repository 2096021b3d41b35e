//! B+trees over slotted pages: every primary index (clustered: leaves hold the records) and
//! every secondary index (leaves map the encoded secondary key to the packed primary key).
//!
//! Owns: search, insert with node splits, delete, in-place update and leaf-at-a-time range
//! scans, with latch coupling on descent (Bayer & Schkolnick's protocol):
//! - readers couple shared latches from the root down; writers of a leaf couple shared
//!   latches and take the leaf exclusive (optimistic);
//! - an insert into a full leaf restarts pessimistically, coupling exclusive latches and
//!   releasing all ancestors whenever the child has room (is "safe"), then splits upward.
//!
//! Keys are fixed-width, order-preserving byte strings compared by a [`Comparator`] chosen
//! at construction: the generic comparator walks a key descriptor field by field (the
//! conventional "B-tree key evaluation"), the specialised one compares big-endian machine
//! words (the paper's first switch). Both give the same order (byte-lexicographic).
//!
//! Guarantees: the root stays at page 1 (a root split moves its contents into two new
//! children), so no root pointer needs a latch; latches are only ever acquired top-down
//! (parent before child, never a sibling while holding a leaf), so latches never deadlock;
//! a scan never holds a latch while its caller runs (it copies a leaf's qualifying entries
//! out and re-descends for the next leaf using the fence keys seen on the way down), so the
//! caller may block on a lock between leaves. Deletes never merge nodes (as in many real
//! systems); an empty leaf stays in the tree and scans pass it by its fences.

use std::cmp::Ordering;

use super::page::{
    get_u32, hdr, put_u32, PageNo, PageRead, PageStore, PageWrite, HEADER_BYTES, KIND_INTERNAL, KIND_LEAF,
};
use super::stats::Stats;

/// Longest key any index uses (CUSTOMER's secondary key is 39 bytes).
pub(crate) const KEY_BYTES_MAX: usize = 40;
const ROOT: PageNo = 1;

/// One field of a key descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyField {
    /// A big-endian unsigned integer of this many bytes.
    Uint(usize),
    /// Raw bytes compared lexicographically.
    Bytes(usize),
}

/// How B+tree keys are compared (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Comparator {
    Generic(&'static [KeyField]),
    Int64,
    Int128,
    IntWords,
}

impl Comparator {
    pub fn new(generic: bool, descriptor: &'static [KeyField], key_len: usize) -> Comparator {
        debug_assert_eq!(
            descriptor
                .iter()
                .map(|f| match f {
                    KeyField::Uint(n) | KeyField::Bytes(n) => n,
                })
                .sum::<usize>(),
            key_len
        );
        match (generic, key_len) {
            (true, _) => Comparator::Generic(descriptor),
            (false, 8) => Comparator::Int64,
            (false, 16) => Comparator::Int128,
            (false, _) => Comparator::IntWords,
        }
    }

    #[inline]
    pub fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            Comparator::Generic(fields) => generic_cmp(fields, a, b),
            Comparator::Int64 => u64::from_be_bytes(a[..8].try_into().expect("8-byte key"))
                .cmp(&u64::from_be_bytes(b[..8].try_into().expect("8-byte key"))),
            Comparator::Int128 => u128::from_be_bytes(a[..16].try_into().expect("16-byte key"))
                .cmp(&u128::from_be_bytes(b[..16].try_into().expect("16-byte key"))),
            Comparator::IntWords => words_cmp(a, b),
        }
    }
}

/// Interprets the key descriptor: integers are assembled byte by byte and compared as
/// numbers, byte fields compared byte by byte.
fn generic_cmp(fields: &[KeyField], a: &[u8], b: &[u8]) -> Ordering {
    let mut at = 0;
    for field in fields {
        match *field {
            KeyField::Uint(n) => {
                let (mut x, mut y) = (0u64, 0u64);
                for i in at..at + n {
                    x = (x << 8) | a[i] as u64;
                    y = (y << 8) | b[i] as u64;
                }
                if x != y {
                    return x.cmp(&y);
                }
                at += n;
            }
            KeyField::Bytes(n) => {
                for i in at..at + n {
                    if a[i] != b[i] {
                        return a[i].cmp(&b[i]);
                    }
                }
                at += n;
            }
        }
    }
    Ordering::Equal
}

/// Big-endian 8-byte words, then the tail.
fn words_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        let (x, y) = (u64::from_be_bytes(x.try_into().expect("8")), u64::from_be_bytes(y.try_into().expect("8")));
        if x != y {
            return x.cmp(&y);
        }
    }
    ca.remainder().cmp(cb.remainder())
}

/// A key held by value (scan cursors and fences).
#[derive(Clone, Copy)]
pub(crate) struct KeyBuf {
    len: u8,
    bytes: [u8; KEY_BYTES_MAX],
}

impl KeyBuf {
    pub fn new(k: &[u8]) -> KeyBuf {
        let mut bytes = [0u8; KEY_BYTES_MAX];
        bytes[..k.len()].copy_from_slice(k);
        KeyBuf { len: k.len() as u8, bytes }
    }
    /// The smallest key of this length.
    #[cfg(test)]
    pub fn min(len: usize) -> KeyBuf {
        KeyBuf::new(&[0u8; KEY_BYTES_MAX][..len])
    }
    /// The largest key of this length.
    #[cfg(test)]
    pub fn max(len: usize) -> KeyBuf {
        KeyBuf::new(&[0xFFu8; KEY_BYTES_MAX][..len])
    }
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Where a leaf-at-a-time scan resumes.
#[derive(Clone, Copy)]
pub(crate) enum Cursor {
    /// At the first (forward) or last (backward) key `>=` / `<=` this key.
    At(KeyBuf),
    /// Backward only: at the last key `<` this key.
    Below(KeyBuf),
}

/// What a scan step reports.
pub(crate) enum ScanNext {
    /// No qualifying keys remain.
    Done,
    /// Resume from this cursor.
    Resume(Cursor),
}

#[derive(Default)]
struct Fences {
    lower: Option<KeyBuf>,
    upper: Option<KeyBuf>,
}

/// A B+tree in its own store.
pub(crate) struct BTree {
    store: PageStore,
    key_len: usize,
    val_len: usize,
    cmp: Comparator,
}

impl BTree {
    /// An empty tree (its root leaf is page 1).
    pub fn new(store: PageStore, key_len: usize, val_len: usize, cmp: Comparator, stats: &Stats) -> BTree {
        assert!(key_len <= KEY_BYTES_MAX);
        let tree = BTree { store, key_len, val_len, cmp };
        let (no, mut root) = tree.store.allocate(stats);
        assert_eq!(no, ROOT);
        hdr::init(&mut root, KIND_LEAF, 0);
        drop(root);
        // A split needs at least two entries per half.
        assert!(HEADER_BYTES + 4 * (2 + tree.leaf_cell()) <= tree.store.page_bytes(), "rows too wide for the page");
        tree
    }

    pub fn store(&self) -> &PageStore {
        &self.store
    }

    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// What this tree's pages hold, with `pages` pages in its store.
    pub fn page_shape(&self, pages: super::page::PageNo) -> super::page::PageShape {
        super::page::PageShape::Tree {
            key_len: self.key_len,
            leaf_cell: self.leaf_cell(),
            internal_cell: self.internal_cell(),
            pages,
        }
    }

    #[inline]
    fn leaf_cell(&self) -> usize {
        self.key_len + self.val_len
    }

    #[inline]
    fn internal_cell(&self) -> usize {
        self.key_len + 4
    }

    #[inline]
    fn key_at<'p>(&self, p: &'p [u8], i: usize) -> &'p [u8] {
        let at = hdr::slot(p, i);
        &p[at..at + self.key_len]
    }

    /// Number of keys `< k` (`strict`) or `<= k`.
    #[inline]
    fn rank(&self, p: &[u8], k: &[u8], strict: bool) -> usize {
        let (mut lo, mut hi) = (0, hdr::count(p));
        while lo < hi {
            let mid = (lo + hi) / 2;
            let c = self.cmp.cmp(self.key_at(p, mid), k);
            let go_right = if strict { c == Ordering::Less } else { c != Ordering::Greater };
            if go_right {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Position of `k` in a leaf: `Ok(i)` found, `Err(i)` where it would go.
    #[inline]
    fn search(&self, p: &[u8], k: &[u8]) -> Result<usize, usize> {
        let i = self.rank(p, k, true);
        if i < hdr::count(p) && self.cmp.cmp(self.key_at(p, i), k) == Ordering::Equal {
            Ok(i)
        } else {
            Err(i)
        }
    }

    /// The child to follow for `k` and the index it was chosen by.
    #[inline]
    fn route(&self, p: &[u8], k: &[u8], strict: bool) -> (usize, PageNo) {
        let idx = self.rank(p, k, strict);
        let child = if idx == 0 {
            hdr::leftmost(p)
        } else {
            let at = hdr::slot(p, idx - 1);
            get_u32(p, at + self.key_len)
        };
        (idx, child)
    }

    fn narrow(&self, fences: &mut Fences, p: &[u8], idx: usize) {
        if idx > 0 {
            fences.lower = Some(KeyBuf::new(self.key_at(p, idx - 1)));
        }
        if idx < hdr::count(p) {
            fences.upper = Some(KeyBuf::new(self.key_at(p, idx)));
        }
    }

    /// Couples shared latches down to the leaf for `k`; returns the leaf and its number.
    fn descend_read(
        &self,
        k: &[u8],
        strict: bool,
        stats: &Stats,
        mut fences: Option<&mut Fences>,
    ) -> (PageNo, PageRead<'_>) {
        let (mut no, mut page) = (ROOT, self.store.read(ROOT, stats));
        while hdr::level(&page) > 0 {
            let (idx, child) = self.route(&page, k, strict);
            if let Some(f) = fences.as_deref_mut() {
                self.narrow(f, &page, idx);
            }
            // The child is latched before the parent is released.
            (no, page) = (child, self.store.read(child, stats));
        }
        (no, page)
    }

    /// Couples shared latches down and takes the leaf for `k` exclusive.
    fn descend_write(&self, k: &[u8], stats: &Stats) -> (PageNo, PageWrite<'_>) {
        loop {
            let mut page = self.store.read(ROOT, stats);
            if hdr::level(&page) == 0 {
                drop(page);
                let root = self.store.write(ROOT, stats);
                if hdr::level(&root) == 0 {
                    return (ROOT, root);
                }
                continue; // the root split meanwhile
            }
            loop {
                let (_, child) = self.route(&page, k, false);
                if hdr::level(&page) == 1 {
                    let leaf = self.store.write(child, stats);
                    drop(page);
                    return (child, leaf);
                }
                page = self.store.read(child, stats);
            }
        }
    }

    /// Calls `f(value, page)` with the value stored under `k` and the number of the leaf
    /// holding it, under the leaf's shared latch.
    pub fn get<R>(&self, k: &[u8], stats: &Stats, f: impl FnOnce(&[u8], PageNo) -> R) -> Option<R> {
        let (no, page) = self.descend_read(k, false, stats, None);
        let i = self.search(&page, k).ok()?;
        let at = hdr::slot(&page, i) + self.key_len;
        Some(f(&page[at..at + self.val_len], no))
    }

    /// Removes `k`; `f(before, page)` runs under the leaf's exclusive latch before the entry
    /// goes and returns its result and the LSN to stamp.
    pub fn delete<R>(&self, k: &[u8], stats: &Stats, f: impl FnOnce(&[u8], PageNo) -> (R, Option<u64>)) -> Option<R> {
        let (no, mut page) = self.descend_write(k, stats);
        let i = self.search(&page, k).ok()?;
        let at = hdr::slot(&page, i);
        let (r, lsn) = f(&page[at + self.key_len..at + self.leaf_cell()], no);
        self.remove_at(&mut page, i);
        if let Some(lsn) = lsn {
            hdr::set_lsn(&mut page, lsn);
        }
        Some(r)
    }

    /// Inserts `k → v`; `Err(())` when `k` is present. `log(page)` runs under the exclusive
    /// latch of the leaf that received the entry and returns the LSN to stamp on it. A split
    /// (a structure modification) comes first and is logged page by page: `smo(page, bytes)`
    /// runs under each changed or new page's exclusive latch once its change is complete and
    /// returns the LSN to stamp (its image: redo-only, kept when the inserting transaction
    /// rolls back, as ARIES/IM keeps structure modifications); the entry's own record follows.
    #[allow(clippy::result_unit_err)]
    pub fn insert(
        &self,
        k: &[u8],
        v: &[u8],
        stats: &Stats,
        log: impl FnOnce(PageNo) -> Option<u64>,
        smo: &mut dyn FnMut(PageNo, &[u8]) -> Option<u64>,
    ) -> Result<(), ()> {
        debug_assert_eq!((k.len(), v.len()), (self.key_len, self.val_len));
        {
            let (no, mut page) = self.descend_write(k, stats);
            let pos = match self.search(&page, k) {
                Ok(_) => return Err(()),
                Err(pos) => pos,
            };
            if hdr::has_room(&page, self.leaf_cell()) {
                self.put_entry(&mut page, pos, k, v);
                if let Some(lsn) = log(no) {
                    hdr::set_lsn(&mut page, lsn);
                }
                return Ok(());
            }
        }
        self.insert_pessimistic(k, v, stats, log, smo)
    }

    fn put_entry(&self, p: &mut [u8], pos: usize, k: &[u8], v: &[u8]) {
        let cell = if hdr::kind(p) == KIND_LEAF { self.leaf_cell() } else { self.internal_cell() };
        let at = hdr::alloc_cell(p, cell);
        p[at..at + k.len()].copy_from_slice(k);
        p[at + k.len()..at + k.len() + v.len()].copy_from_slice(v);
        let n = hdr::count(p);
        p.copy_within(HEADER_BYTES + 2 * pos..HEADER_BYTES + 2 * n, HEADER_BYTES + 2 * (pos + 1));
        hdr::set_slot(p, pos, at);
        hdr::set_count(p, n + 1);
    }

    /// All cells of `p` in slot order, flat.
    fn cells(p: &[u8], cell: usize) -> Vec<u8> {
        let n = hdr::count(p);
        let mut out = Vec::with_capacity(n * cell);
        for i in 0..n {
            let at = hdr::slot(p, i);
            out.extend_from_slice(&p[at..at + cell]);
        }
        out
    }

    /// All cells of `p` in slot order with `(k, v)` inserted at `pos`, flat.
    fn cells_with(&self, p: &[u8], pos: usize, k: &[u8], v: &[u8], cell: usize) -> Vec<u8> {
        let n = hdr::count(p);
        let mut out = Vec::with_capacity((n + 1) * cell);
        for i in 0..=n {
            if i == pos {
                out.extend_from_slice(k);
                out.extend_from_slice(v);
            }
            if i < n {
                let at = hdr::slot(p, i);
                out.extend_from_slice(&p[at..at + cell]);
            }
        }
        out
    }

    /// Formats `p` and fills it with `cells` (flat, in order).
    fn fill(p: &mut [u8], kind: u8, level: u8, cells: &[u8], cell: usize) {
        hdr::init(p, kind, level);
        for (i, c) in cells.chunks_exact(cell).enumerate() {
            let at = hdr::alloc_cell(p, cell);
            p[at..at + cell].copy_from_slice(c);
            hdr::set_slot(p, i, at);
        }
        hdr::set_count(p, cells.len() / cell);
    }

    /// Logs a page a structure modification changed and stamps the LSN given.
    fn log_smo(smo: &mut dyn FnMut(PageNo, &[u8]) -> Option<u64>, no: PageNo, page: &mut [u8]) {
        if let Some(lsn) = smo(no, page) {
            hdr::set_lsn(page, lsn);
        }
    }

    fn insert_pessimistic(
        &self,
        k: &[u8],
        v: &[u8],
        stats: &Stats,
        log: impl FnOnce(PageNo) -> Option<u64>,
        smo: &mut dyn FnMut(PageNo, &[u8]) -> Option<u64>,
    ) -> Result<(), ()> {
        let (lc, ic) = (self.leaf_cell(), self.internal_cell());
        let mut path: Vec<(PageNo, PageWrite<'_>)> = Vec::new();
        let (mut no, mut page) = (ROOT, self.store.write(ROOT, stats));
        loop {
            let leaf = hdr::level(&page) == 0;
            if hdr::has_room(&page, if leaf { lc } else { ic }) {
                path.clear(); // a safe node: release every ancestor
            }
            if leaf {
                break;
            }
            let (_, child) = self.route(&page, k, false);
            path.push((no, page));
            page = self.store.write(child, stats);
            no = child;
        }
        let pos = match self.search(&page, k) {
            Ok(_) => return Err(()),
            Err(pos) => pos,
        };
        if hdr::has_room(&page, lc) {
            self.put_entry(&mut page, pos, k, v);
            if let Some(lsn) = log(no) {
                hdr::set_lsn(&mut page, lsn);
            }
            return Ok(());
        }

        // The structure modification: split the full leaf in two halves of its own entries
        // (the new entry is not part of it), each page logged once complete.
        let cells = Self::cells(&page, lc);
        let mid = cells.len() / lc / 2;
        let sep = KeyBuf::new(&cells[mid * lc..mid * lc + self.key_len]);
        let into_right = self.cmp.cmp(k, sep.as_slice()) != Ordering::Less;
        let lsn_before = hdr::lsn(&page);
        let (left_no, mut left, right_no, mut right);
        let mut root = None;
        if no == ROOT {
            let (l, lp) = self.store.allocate(stats);
            let (r, rp) = self.store.allocate(stats);
            (left_no, left, right_no, right) = (l, lp, r, rp);
            hdr::init(&mut page, KIND_INTERNAL, 1);
            hdr::set_leftmost(&mut page, left_no);
            let mut child = [0u8; 4];
            put_u32(&mut child, 0, right_no);
            self.put_entry(&mut page, 0, sep.as_slice(), &child);
            root = Some(page);
        } else {
            let (r, rp) = self.store.allocate(stats);
            (left_no, left, right_no, right) = (no, page, r, rp);
        }
        let old_next = hdr::next(&left);
        hdr::set_lsn(&mut right, lsn_before);
        hdr::set_lsn(&mut left, lsn_before);
        Self::fill(&mut right, KIND_LEAF, 0, &cells[mid * lc..], lc);
        hdr::set_next(&mut right, if no == ROOT { 0 } else { old_next });
        Self::fill(&mut left, KIND_LEAF, 0, &cells[..mid * lc], lc);
        hdr::set_next(&mut left, right_no);
        Self::log_smo(smo, left_no, &mut left);
        Self::log_smo(smo, right_no, &mut right);
        if let Some(mut root) = root {
            Self::log_smo(smo, ROOT, &mut root);
        }
        let (target_no, mut target) = if into_right { (right_no, right) } else { (left_no, left) };
        if no != ROOT {
            self.push_separator(path, sep, right_no, stats, smo);
        }

        // The entry itself, into the half it belongs to (which has room now).
        let pos = self.search(&target, k).expect_err("the key was absent before the split");
        self.put_entry(&mut target, pos, k, v);
        if let Some(lsn) = log(target_no) {
            hdr::set_lsn(&mut target, lsn);
        }
        Ok(())
    }

    /// Pushes separator `sep` (its right child `child_no`) up the path of exclusively latched
    /// ancestors, splitting each full one; every page changed is logged once complete.
    fn push_separator(
        &self,
        mut path: Vec<(PageNo, PageWrite<'_>)>,
        sep: KeyBuf,
        child_no: PageNo,
        stats: &Stats,
        smo: &mut dyn FnMut(PageNo, &[u8]) -> Option<u64>,
    ) {
        let ic = self.internal_cell();
        let (mut sep, mut child_no) = (sep, child_no);
        while let Some((pno, mut parent)) = path.pop() {
            let mut child = [0u8; 4];
            put_u32(&mut child, 0, child_no);
            let ppos = self.rank(&parent, sep.as_slice(), false);
            if hdr::has_room(&parent, ic) {
                self.put_entry(&mut parent, ppos, sep.as_slice(), &child);
                Self::log_smo(smo, pno, &mut parent);
                return;
            }
            let cells = self.cells_with(&parent, ppos, sep.as_slice(), &child, ic);
            let total = cells.len() / ic;
            let mid = total / 2;
            let up = KeyBuf::new(&cells[mid * ic..mid * ic + self.key_len]);
            let mid_child = get_u32(&cells, mid * ic + self.key_len);
            let level = hdr::level(&parent);
            let lsn_before = hdr::lsn(&parent);
            if pno == ROOT {
                let (l, mut lp) = self.store.allocate(stats);
                let (r, mut rp) = self.store.allocate(stats);
                Self::fill(&mut lp, KIND_INTERNAL, level, &cells[..mid * ic], ic);
                hdr::set_leftmost(&mut lp, hdr::leftmost(&parent));
                Self::fill(&mut rp, KIND_INTERNAL, level, &cells[(mid + 1) * ic..], ic);
                hdr::set_leftmost(&mut rp, mid_child);
                hdr::set_lsn(&mut lp, lsn_before);
                hdr::set_lsn(&mut rp, lsn_before);
                hdr::init(&mut parent, KIND_INTERNAL, level + 1);
                hdr::set_leftmost(&mut parent, l);
                let mut rc = [0u8; 4];
                put_u32(&mut rc, 0, r);
                self.put_entry(&mut parent, 0, up.as_slice(), &rc);
                Self::log_smo(smo, l, &mut lp);
                Self::log_smo(smo, r, &mut rp);
                Self::log_smo(smo, ROOT, &mut parent);
                return;
            }
            let (r, mut rp) = self.store.allocate(stats);
            let leftmost = hdr::leftmost(&parent);
            Self::fill(&mut parent, KIND_INTERNAL, level, &cells[..mid * ic], ic);
            hdr::set_leftmost(&mut parent, leftmost);
            Self::fill(&mut rp, KIND_INTERNAL, level, &cells[(mid + 1) * ic..], ic);
            hdr::set_leftmost(&mut rp, mid_child);
            hdr::set_lsn(&mut rp, lsn_before);
            Self::log_smo(smo, pno, &mut parent);
            Self::log_smo(smo, r, &mut rp);
            (sep, child_no) = (up, r);
        }
        unreachable!("an unsafe path ends at the root, which splits in place")
    }

    /// Redo of an entry's insert, physiological: puts `k → v` into leaf `no` itself (not by
    /// descent), skipped when the page LSN shows it applied. Sound because every structure
    /// modification is logged before the entries that depend on it, so redo in log order
    /// finds the page as the insert found it.
    pub fn redo_put(
        &self,
        no: PageNo,
        k: &[u8],
        v: &[u8],
        lsn: Option<u64>,
        stats: &Stats,
        stamp: impl FnOnce(PageNo) -> Option<u64>,
    ) -> Result<(), &'static str> {
        if (k.len(), v.len()) != (self.key_len, self.val_len) {
            return Err("index entry width");
        }
        let Some(mut page) = self.store.write_logged(no, KIND_LEAF, lsn, stats)? else { return Ok(()) };
        let Err(pos) = self.search(&page, k) else { return Err("index entry already on its page") };
        if !hdr::has_room(&page, self.leaf_cell()) {
            return Err("index entry does not fit its page");
        }
        self.put_entry(&mut page, pos, k, v);
        if let Some(l) = stamp(no) {
            hdr::set_lsn(&mut page, l);
        }
        Ok(())
    }

    /// Redo of an entry's delete, physiological: removes `k` from leaf `no` itself.
    pub fn redo_cut(
        &self,
        no: PageNo,
        k: &[u8],
        lsn: Option<u64>,
        stats: &Stats,
        stamp: impl FnOnce(PageNo) -> Option<u64>,
    ) -> Result<(), &'static str> {
        if k.len() != self.key_len {
            return Err("index key width");
        }
        let Some(mut page) = self.store.write_logged(no, KIND_LEAF, lsn, stats)? else { return Ok(()) };
        let i = self.search(&page, k).map_err(|_| "index entry missing from its page")?;
        self.remove_at(&mut page, i);
        if let Some(l) = stamp(no) {
            hdr::set_lsn(&mut page, l);
        }
        Ok(())
    }

    fn remove_at(&self, page: &mut [u8], i: usize) {
        let at = hdr::slot(page, i);
        let n = hdr::count(page);
        page.copy_within(HEADER_BYTES + 2 * (i + 1)..HEADER_BYTES + 2 * n, HEADER_BYTES + 2 * i);
        hdr::set_count(page, n - 1);
        hdr::free_cell(page, at);
    }

    /// One step of a range scan over `[lo, hi]`: descends to the leaf for `from`, offers its
    /// qualifying entries to `take(leaf, key, value)` (`leaf`: the leaf's page number) in
    /// `forward` or backward order under the leaf's shared latch, and says where to resume. `take` returning false stops the step
    /// with the cursor at that entry (it will be offered again).
    pub fn scan_step(
        &self,
        from: Cursor,
        forward: bool,
        lo: &[u8],
        hi: &[u8],
        stats: &Stats,
        mut take: impl FnMut(PageNo, &[u8], &[u8]) -> bool,
    ) -> ScanNext {
        let mut fences = Fences::default();
        let (key, strict) = match &from {
            Cursor::At(k) => (k.as_slice(), false),
            Cursor::Below(k) => (k.as_slice(), true),
        };
        let (leaf, page) = self.descend_read(key, strict, stats, Some(&mut fences));
        let entry = |i: usize| {
            let at = hdr::slot(&page, i);
            (&page[at..at + self.key_len], &page[at + self.key_len..at + self.leaf_cell()])
        };
        if forward {
            debug_assert!(!strict);
            for i in self.rank(&page, key, true)..hdr::count(&page) {
                let (k, v) = entry(i);
                if self.cmp.cmp(k, hi) == Ordering::Greater {
                    return ScanNext::Done;
                }
                if !take(leaf, k, v) {
                    return ScanNext::Resume(Cursor::At(KeyBuf::new(k)));
                }
            }
            match fences.upper {
                Some(u) if self.cmp.cmp(u.as_slice(), hi) != Ordering::Greater => ScanNext::Resume(Cursor::At(u)),
                _ => ScanNext::Done,
            }
        } else {
            for i in (0..self.rank(&page, key, strict)).rev() {
                let (k, v) = entry(i);
                if self.cmp.cmp(k, lo) == Ordering::Less {
                    return ScanNext::Done;
                }
                if !take(leaf, k, v) {
                    return ScanNext::Resume(Cursor::At(KeyBuf::new(k)));
                }
            }
            match fences.lower {
                Some(l) if self.cmp.cmp(l.as_slice(), lo) == Ordering::Greater => ScanNext::Resume(Cursor::Below(l)),
                _ => ScanNext::Done,
            }
        }
    }

    /// Visits every entry in key order (tests).
    #[cfg(test)]
    pub fn for_each(&self, stats: &Stats, mut f: impl FnMut(&[u8], &[u8])) {
        let (lo, hi) = (KeyBuf::min(self.key_len), KeyBuf::max(self.key_len));
        let mut batch = Vec::new();
        let mut cursor = Cursor::At(lo);
        loop {
            batch.clear();
            let next = self.scan_step(cursor, true, lo.as_slice(), hi.as_slice(), stats, |_, k, v| {
                batch.extend_from_slice(k);
                batch.extend_from_slice(v);
                true
            });
            for c in batch.chunks_exact(self.leaf_cell()) {
                f(&c[..self.key_len], &c[self.key_len..]);
            }
            match next {
                ScanNext::Done => return,
                ScanNext::Resume(c) => cursor = c,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const DESC: &[KeyField] = &[KeyField::Uint(2), KeyField::Uint(1), KeyField::Uint(4), KeyField::Uint(1)];

    fn tree(generic: bool, val_len: usize) -> BTree {
        let stats = Stats::default();
        BTree::new(
            PageStore::new(0, None, 8192, super::super::latch::LatchMode::Mutex),
            8,
            val_len,
            Comparator::new(generic, DESC, 8),
            &stats,
        )
    }

    fn key(k: u64) -> [u8; 8] {
        k.to_be_bytes()
    }

    #[test]
    fn generic_and_integer_comparators_agree() {
        let ks = [0u64, 1, 255, 256, 1 << 40, u64::MAX - 1, u64::MAX, 0x0102_0304_0506_0708];
        for &a in &ks {
            for &b in &ks {
                let want = a.cmp(&b);
                assert_eq!(generic_cmp(DESC, &key(a), &key(b)), want);
                assert_eq!(Comparator::Int64.cmp(&key(a), &key(b)), want);
                assert_eq!(words_cmp(&key(a), &key(b)), want);
            }
        }
    }

    #[test]
    fn inserts_splits_deletes_and_scans_match_a_btreemap() {
        for generic in [true, false] {
            let t = tree(generic, 300);
            let stats = Stats::default();
            let mut model = BTreeMap::new();
            // A permutation of 0..3000 (spread keys, many splits at 300-byte values).
            for i in 0..3000u64 {
                let k = (i * 7919) % 3000 * 3;
                let v = [(k % 251) as u8; 300];
                t.insert(&key(k), &v, &stats, |_| None, &mut |_, _| None).unwrap();
                model.insert(k, v[0]);
            }
            assert!(t.insert(&key(3), &[0; 300], &stats, |_| None, &mut |_, _| None).is_err());
            for k in (0..9000u64).step_by(7) {
                let gone = t.delete(&key(k), &stats, |v, _| (v[0], None));
                assert_eq!(gone, model.remove(&k));
            }
            let mut seen = Vec::new();
            t.for_each(&stats, |k, v| seen.push((u64::from_be_bytes(k.try_into().unwrap()), v[0])));
            assert_eq!(seen, model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
            // Backward scan of a range, leaf at a time.
            let (lo, hi) = (key(1000), key(5000));
            let mut back = Vec::new();
            let mut cursor = Cursor::At(KeyBuf::new(&hi));
            loop {
                let next = t.scan_step(cursor, false, &lo, &hi, &stats, |_, k, _| {
                    back.push(u64::from_be_bytes(k.try_into().unwrap()));
                    true
                });
                match next {
                    ScanNext::Done => break,
                    ScanNext::Resume(c) => cursor = c,
                }
            }
            let want: Vec<u64> = model.range(1000..=5000).rev().map(|(&k, _)| k).collect();
            assert_eq!(back, want);
        }
    }
}
