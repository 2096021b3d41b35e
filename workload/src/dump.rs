//! Dumps a database as one CSV file per TPC-C table, for inspection and for comparing two
//! databases with ordinary tools (`diff`, `cmp`).
//!
//! Guarantees:
//! - byte-for-byte deterministic: the same database contents give the same files. Rows are
//!   sorted by primary key (HISTORY, which has none, keeps the storage's order);
//! - each file starts with a header of the TPC-C column names (clause 1.3) in lower case, in
//!   the clause's column order; money is printed as cents with two decimals (`-10.00`), rates
//!   with four (`0.1234`), null dates and carriers (0) as empty fields, and strings are quoted
//!   only when they contain a comma, a quote or a line break;
//! - nothing half-written: every file is written as `NAME.tmp` and the nine are renamed into
//!   place only after all were written; on failure the temporary files are removed.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use engine::schema::{t, text, Table, TableId};
use engine::Storage;

use crate::error::DumpError;

/// One file of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDump {
    pub table: TableId,
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
}

/// What [`dump`] wrote, in the order of [`TableId::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpSummary {
    pub tables: Vec<TableDump>,
}

impl DumpSummary {
    /// Rows written over all tables.
    pub fn total_rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// Bytes written over all files.
    pub fn total_bytes(&self) -> u64 {
        self.tables.iter().map(|t| t.bytes).sum()
    }
}

/// "N rows in 9 files (B bytes)".
impl std::fmt::Display for DumpSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} rows in {} files ({} bytes)", self.total_rows(), self.tables.len(), self.total_bytes())
    }
}

/// A CSV line under construction.
struct Line {
    buf: Vec<u8>,
    first: bool,
}

impl Line {
    fn new() -> Line {
        Line { buf: Vec::with_capacity(1024), first: true }
    }

    fn sep(&mut self) {
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
    }

    fn int(&mut self, v: impl Into<i64>) -> &mut Line {
        self.sep();
        // Writing into a Vec cannot fail.
        let _ = write!(self.buf, "{}", v.into());
        self
    }

    /// Cents with two decimals: -1000 → "-10.00", 5 → "0.05".
    fn money(&mut self, cents: i64) -> &mut Line {
        self.sep();
        let sign = if cents < 0 { "-" } else { "" };
        let abs = cents.unsigned_abs();
        let _ = write!(self.buf, "{sign}{}.{:02}", abs / 100, abs % 100);
        self
    }

    /// Basis points with four decimals: 1234 → "0.1234".
    fn rate(&mut self, bp: u32) -> &mut Line {
        self.sep();
        let _ = write!(self.buf, "{}.{:04}", bp / 10_000, bp % 10_000);
        self
    }

    /// A date or carrier where 0 is null (empty field).
    fn nullable(&mut self, v: impl Into<i64>) -> &mut Line {
        let v = v.into();
        if v == 0 {
            self.sep();
            self
        } else {
            self.int(v)
        }
    }

    /// A fixed-width text field, quoted only when it must be.
    fn text(&mut self, field: &[u8]) -> &mut Line {
        self.sep();
        let s = text(field);
        if s.iter().any(|&b| matches!(b, b',' | b'"' | b'\n' | b'\r')) {
            self.buf.push(b'"');
            for &b in s {
                if b == b'"' {
                    self.buf.push(b'"');
                }
                self.buf.push(b);
            }
            self.buf.push(b'"');
        } else {
            self.buf.extend_from_slice(s);
        }
        self
    }

    fn address(&mut self, a: &engine::schema::Address) -> &mut Line {
        self.text(&a.street_1).text(&a.street_2).text(&a.city).text(&a.state).text(&a.zip)
    }

    fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        self.buf.push(b'\n');
        out.write_all(&self.buf)?;
        self.buf.clear();
        self.first = true;
        Ok(())
    }
}

/// How one table is written: its columns and its row formatter.
trait CsvTable: Table {
    const COLUMNS: &'static [&'static str];
    fn format(row: &Self::Row, line: &mut Line);
}

impl CsvTable for t::Warehouses {
    const COLUMNS: &'static [&'static str] =
        &["w_id", "w_name", "w_street_1", "w_street_2", "w_city", "w_state", "w_zip", "w_tax", "w_ytd"];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.w_id).text(&r.w_name).address(&r.w_address).rate(r.w_tax).money(r.w_ytd);
    }
}

impl CsvTable for t::Districts {
    const COLUMNS: &'static [&'static str] = &[
        "d_id",
        "d_w_id",
        "d_name",
        "d_street_1",
        "d_street_2",
        "d_city",
        "d_state",
        "d_zip",
        "d_tax",
        "d_ytd",
        "d_next_o_id",
    ];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.d_id).int(r.d_w_id).text(&r.d_name).address(&r.d_address).rate(r.d_tax).money(r.d_ytd);
        l.int(r.d_next_o_id);
    }
}

impl CsvTable for t::Customers {
    const COLUMNS: &'static [&'static str] = &[
        "c_id",
        "c_d_id",
        "c_w_id",
        "c_first",
        "c_middle",
        "c_last",
        "c_street_1",
        "c_street_2",
        "c_city",
        "c_state",
        "c_zip",
        "c_phone",
        "c_since",
        "c_credit",
        "c_credit_lim",
        "c_discount",
        "c_balance",
        "c_ytd_payment",
        "c_payment_cnt",
        "c_delivery_cnt",
        "c_data",
    ];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.c_id).int(r.c_d_id).int(r.c_w_id).text(&r.c_first).text(&r.c_middle).text(&r.c_last);
        l.address(&r.c_address).text(&r.c_phone).nullable(r.c_since).text(&r.c_credit);
        l.money(r.c_credit_lim).rate(r.c_discount).money(r.c_balance).money(r.c_ytd_payment);
        l.int(r.c_payment_cnt).int(r.c_delivery_cnt).text(&r.c_data);
    }
}

impl CsvTable for t::Histories {
    const COLUMNS: &'static [&'static str] =
        &["h_c_id", "h_c_d_id", "h_c_w_id", "h_d_id", "h_w_id", "h_date", "h_amount", "h_data"];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.h_c_id).int(r.h_c_d_id).int(r.h_c_w_id).int(r.h_d_id).int(r.h_w_id);
        l.nullable(r.h_date).money(r.h_amount).text(&r.h_data);
    }
}

impl CsvTable for t::Orders {
    const COLUMNS: &'static [&'static str] =
        &["o_id", "o_d_id", "o_w_id", "o_c_id", "o_entry_d", "o_carrier_id", "o_ol_cnt", "o_all_local"];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.o_id).int(r.o_d_id).int(r.o_w_id).int(r.o_c_id).nullable(r.o_entry_d);
        l.nullable(r.o_carrier_id).int(r.o_ol_cnt).int(r.o_all_local);
    }
}

impl CsvTable for t::NewOrders {
    const COLUMNS: &'static [&'static str] = &["no_o_id", "no_d_id", "no_w_id"];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.no_o_id).int(r.no_d_id).int(r.no_w_id);
    }
}

impl CsvTable for t::OrderLines {
    const COLUMNS: &'static [&'static str] = &[
        "ol_o_id",
        "ol_d_id",
        "ol_w_id",
        "ol_number",
        "ol_i_id",
        "ol_supply_w_id",
        "ol_delivery_d",
        "ol_quantity",
        "ol_amount",
        "ol_dist_info",
    ];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.ol_o_id).int(r.ol_d_id).int(r.ol_w_id).int(r.ol_number).int(r.ol_i_id);
        l.int(r.ol_supply_w_id).nullable(r.ol_delivery_d).int(r.ol_quantity).money(r.ol_amount);
        l.text(&r.ol_dist_info);
    }
}

impl CsvTable for t::Items {
    const COLUMNS: &'static [&'static str] = &["i_id", "i_im_id", "i_name", "i_price", "i_data"];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.i_id).int(r.i_im_id).text(&r.i_name).money(r.i_price).text(&r.i_data);
    }
}

impl CsvTable for t::Stocks {
    const COLUMNS: &'static [&'static str] = &[
        "s_i_id",
        "s_w_id",
        "s_quantity",
        "s_dist_01",
        "s_dist_02",
        "s_dist_03",
        "s_dist_04",
        "s_dist_05",
        "s_dist_06",
        "s_dist_07",
        "s_dist_08",
        "s_dist_09",
        "s_dist_10",
        "s_ytd",
        "s_order_cnt",
        "s_remote_cnt",
        "s_data",
    ];
    fn format(r: &Self::Row, l: &mut Line) {
        l.int(r.s_i_id).int(r.s_w_id).int(r.s_quantity);
        for d in &r.s_dist {
            l.text(d);
        }
        l.int(r.s_ytd).int(r.s_order_cnt).int(r.s_remote_cnt).text(&r.s_data);
    }
}

/// Writes table `T` to `path`; returns (rows, bytes).
fn write_table<T: CsvTable, S: Storage>(db: &mut S, path: &Path) -> io::Result<(u64, u64)> {
    let mut rows: Vec<T::Row> = Vec::with_capacity(db.count::<T>());
    db.for_each::<T>(|r| rows.push(*r));
    if T::ORG != engine::schema::Organisation::Heap {
        // Stable sort: equal keys cannot occur in keyed tables, so the order is total.
        rows.sort_by_key(T::key);
    }
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut line = Line::new();
    let mut bytes = 0u64;
    for c in T::COLUMNS {
        line.sep();
        line.buf.extend_from_slice(c.as_bytes());
    }
    bytes += line.buf.len() as u64 + 1;
    line.finish(&mut out)?;
    for r in &rows {
        T::format(r, &mut line);
        bytes += line.buf.len() as u64 + 1;
        line.finish(&mut out)?;
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok((rows.len() as u64, bytes))
}

/// Writes the nine tables of `db` as CSV files into `dir` (created if missing):
/// warehouse.csv, district.csv, customer.csv, history.csv, orders.csv, new_order.csv,
/// order_line.csv, item.csv and stock.csv. Existing files of those names are replaced, all
/// nine only once all nine were written.
pub fn dump<S: Storage>(db: &mut S, dir: &Path) -> Result<DumpSummary, DumpError> {
    std::fs::create_dir_all(dir).map_err(|source| DumpError::CreateDir { path: dir.to_path_buf(), source })?;
    let mut written: Vec<(PathBuf, TableDump)> = Vec::with_capacity(TableId::ALL.len());
    let result = (|| -> Result<(), DumpError> {
        for table in TableId::ALL {
            let tmp = dir.join(format!("{}.csv.tmp", table.name()));
            let path = dir.join(format!("{}.csv", table.name()));
            // Record the temporary file before writing so a failure midway removes it too.
            written.push((tmp.clone(), TableDump { table, path, rows: 0, bytes: 0 }));
            let (rows, bytes) = match table {
                TableId::Warehouse => write_table::<t::Warehouses, S>(db, &tmp),
                TableId::District => write_table::<t::Districts, S>(db, &tmp),
                TableId::Customer => write_table::<t::Customers, S>(db, &tmp),
                TableId::History => write_table::<t::Histories, S>(db, &tmp),
                TableId::Orders => write_table::<t::Orders, S>(db, &tmp),
                TableId::NewOrder => write_table::<t::NewOrders, S>(db, &tmp),
                TableId::OrderLine => write_table::<t::OrderLines, S>(db, &tmp),
                TableId::Item => write_table::<t::Items, S>(db, &tmp),
                TableId::Stock => write_table::<t::Stocks, S>(db, &tmp),
            }
            .map_err(|source| DumpError::Write { path: tmp.clone(), source })?;
            let last = written.last_mut().expect("just pushed");
            last.1.rows = rows;
            last.1.bytes = bytes;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (tmp, _) in &written {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    let mut tables = Vec::with_capacity(written.len());
    for (i, (tmp, info)) in written.iter().enumerate() {
        if let Err(source) = std::fs::rename(tmp, &info.path) {
            for (later, _) in &written[i..] {
                let _ = std::fs::remove_file(later);
            }
            return Err(DumpError::Rename { from: tmp.clone(), to: info.path.clone(), source });
        }
        tables.push(info.clone());
    }
    Ok(DumpSummary { tables })
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::loader::load_database;
    use engine::schema::{fixed, Address, Customer, Order, Warehouse};
    use engine::LeanDb;

    /// A fresh directory under the system temp dir, unique per test and process.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("glass-dump-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn read(dir: &Path, table: &str) -> String {
        String::from_utf8(std::fs::read(dir.join(format!("{table}.csv"))).unwrap()).unwrap()
    }

    fn addr() -> Address {
        Address {
            street_1: fixed(b"1 Main St"),
            street_2: fixed(b"Suite \"B\""),
            city: fixed(b"Springfield, IL"),
            state: fixed(b"IL"),
            zip: fixed(b"123411111"),
        }
    }

    #[test]
    fn formats_money_rates_nulls_and_quotes() {
        let mut db = LeanDb::new();
        db.insert::<t::Warehouses>(&Warehouse {
            w_ytd: 30_000_000,
            w_tax: 1234,
            w_id: 1,
            w_name: fixed(b"W1"),
            w_address: addr(),
            _pad: [0],
        })
        .unwrap();
        // Inserted out of key order: the dump sorts them.
        db.insert::<t::Orders>(&Order { o_id: 2, o_carrier_id: 0, ..order() }).unwrap();
        db.insert::<t::Orders>(&Order { o_id: 1, o_carrier_id: 3, ..order() }).unwrap();
        db.insert::<t::Customers>(&Customer {
            c_since: 5,
            c_credit_lim: 5_000_000,
            c_balance: -1_000,
            c_ytd_payment: 5,
            c_id: 1,
            c_discount: 5,
            c_payment_cnt: 1,
            c_delivery_cnt: 0,
            c_w_id: 1,
            c_d_id: 1,
            c_first: fixed(b"Ann"),
            c_middle: *b"OE",
            c_last: fixed(b"BARBARBAR"),
            c_address: addr(),
            c_phone: fixed(b"0123456789012345"),
            c_credit: *b"GC",
            c_data: fixed(b"data"),
            _pad: [0; 6],
        })
        .unwrap();
        let dir = scratch("format");
        let summary = dump(&mut db, &dir).unwrap();
        assert_eq!(summary.total_rows(), 4);
        assert_eq!(summary.tables.len(), 9);
        assert_eq!(summary.to_string(), format!("4 rows in 9 files ({} bytes)", summary.total_bytes()));
        assert_eq!(
            read(&dir, "warehouse"),
            "w_id,w_name,w_street_1,w_street_2,w_city,w_state,w_zip,w_tax,w_ytd\n\
             1,W1,1 Main St,\"Suite \"\"B\"\"\",\"Springfield, IL\",IL,123411111,0.1234,300000.00\n"
        );
        assert_eq!(
            read(&dir, "orders"),
            "o_id,o_d_id,o_w_id,o_c_id,o_entry_d,o_carrier_id,o_ol_cnt,o_all_local\n\
             1,1,1,9,77,3,5,1\n\
             2,1,1,9,77,,5,1\n"
        );
        let customer = read(&dir, "customer");
        assert!(customer.ends_with(",5,GC,50000.00,0.0005,-10.00,0.05,1,0,data\n"), "{customer}");
        assert_eq!(read(&dir, "history"), "h_c_id,h_c_d_id,h_c_w_id,h_d_id,h_w_id,h_date,h_amount,h_data\n");
        assert!(read(&dir, "stock").starts_with("s_i_id,s_w_id,s_quantity,s_dist_01,"));
        assert!(read(&dir, "order_line").contains("ol_delivery_d"));
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn order() -> Order {
        Order {
            o_entry_d: 77,
            o_id: 0,
            o_c_id: 9,
            o_w_id: 1,
            o_d_id: 1,
            o_carrier_id: 0,
            o_ol_cnt: 5,
            o_all_local: 1,
            _pad: [0; 2],
        }
    }

    #[test]
    fn money_formatting_edges() {
        let mut l = Line::new();
        l.money(-1_000).money(-5).money(0).money(30_000_000).money(i64::MIN).rate(0).rate(2_000).rate(10_000);
        assert_eq!(
            String::from_utf8(l.buf).unwrap(),
            "-10.00,-0.05,0.00,300000.00,-92233720368547758.08,0.0000,0.2000,1.0000"
        );
    }

    /// Same seed twice → identical bytes (and a sorted, complete dump of a real load).
    #[test]
    fn dumps_of_the_same_load_are_identical() {
        let dirs = [scratch("det-a"), scratch("det-b")];
        let mut summaries = Vec::new();
        for dir in &dirs {
            let mut db = LeanDb::new();
            load_database(&mut db, 1..=1, 2024, &mut |_| {}).unwrap();
            summaries.push(dump(&mut db, dir).unwrap());
        }
        assert_eq!(
            summaries[0].tables.iter().map(|t| t.rows).collect::<Vec<_>>()[..8],
            [1, 10, 30_000, 30_000, 30_000, 9_000, summaries[0].tables[6].rows, 100_000]
        );
        for table in TableId::ALL {
            let name = format!("{}.csv", table.name());
            let a = std::fs::read(dirs[0].join(&name)).unwrap();
            let b = std::fs::read(dirs[1].join(&name)).unwrap();
            assert!(a == b, "{name} differs between two dumps of the same load");
            let info = &summaries[0].tables[table as usize];
            assert_eq!(info.bytes, a.len() as u64);
            assert_eq!(a.iter().filter(|&&c| c == b'\n').count() as u64, info.rows + 1);
            // Loaded text never needs quoting, so every line has exactly one field per column.
            let columns = a.split(|&c| c == b'\n').next().unwrap().split(|&c| c == b',').count();
            for line in a.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
                assert_eq!(line.split(|&c| c == b',').count(), columns, "{name}");
            }
        }
        let districts = read(&dirs[0], "district");
        let ids: Vec<&str> = districts.lines().skip(1).map(|l| l.split(',').next().unwrap()).collect();
        assert_eq!(ids, ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"], "sorted by key");
        for dir in &dirs {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn unwritable_directory_names_the_path() {
        let base = scratch("unwritable");
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let target = file.join("dump");
        let mut db = LeanDb::new();
        let err = dump(&mut db, &target).unwrap_err();
        assert!(matches!(&err, DumpError::CreateDir { path, .. } if *path == target), "{err:?}");
        assert!(err.to_string().contains(&target.display().to_string()), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
