//! Multi-partition TPC-C by pieces (engine::distributed, issue 7): a database of warehouses
//! 1 and 2 split into two partitions, each holding one warehouse and all of ITEM, runs the
//! standard profile with many more remote order lines and remote customers than clause
//! 2.4.1.5 / 2.5.1.2 ask for; every transaction spanning both runs as a remote piece on the
//! other partition, then the home piece with the remote piece's reads — Calvin-style, at one
//! timestamp. Checked against one database holding both warehouses running the whole
//! procedures on the same inputs: the same outputs and rollbacks, and per table the same
//! rows (the two partitions' table digests add up to the whole's; ITEM is in each).

use engine::digest::table_digests;
use engine::distributed::{execute_piece, touched, Piece};
use engine::loader::load_database;
use engine::procedures::{execute, TxnInput};
use engine::schema::TableId;
use engine::{LeanDb, TxnError};
use workload::gen::{GenConfig, Generator, Profile};

const SEED: u64 = 2024;

fn loaded(warehouses: std::ops::RangeInclusive<u16>) -> LeanDb {
    let mut db = LeanDb::new();
    load_database(&mut db, warehouses, SEED, &mut |_| {}).unwrap();
    db
}

fn is_rollback(e: &TxnError) -> bool {
    matches!(e, TxnError::Rollback(_))
}

#[test]
fn pieces_on_two_partitions_equal_the_whole_procedures_on_one_database() {
    let mut whole = loaded(1..=2);
    let mut parts = [loaded(1..=1), loaded(2..=2)];
    let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=2);
    cfg.remote_item_pct = 10;
    cfg.remote_payment_pct = 50;
    let mut gen = Generator::new(cfg, 7, SEED).unwrap();
    let (mut multi, mut rolled_back) = (0, 0);
    for n in 0..4_000u64 {
        let ts = 1_000 + n;
        let input: TxnInput = gen.next(ts as i64);
        let expected = execute(&mut whole, ts, &input);
        let w = touched(&input);
        let part_of = |w: u16| usize::from(w) - 1;
        let home = part_of(w[0]);
        let got = if w.iter().all(|&x| part_of(x) == home) {
            execute(&mut parts[home], ts, &input)
        } else {
            multi += 1;
            let remote = 1 - home;
            let local_remote = move |x: u16| part_of(x) == remote;
            let local_home = move |x: u16| part_of(x) == home;
            match execute_piece(&mut parts[remote], ts, &input, &local_remote, None) {
                Ok(Piece::Reads(reads)) => {
                    match execute_piece(&mut parts[home], ts, &input, &local_home, Some(&[reads])) {
                        Ok(Piece::Output(out)) => Ok(out),
                        Ok(Piece::Reads(_)) => panic!("the home piece returns the output"),
                        Err(e) => Err(e),
                    }
                }
                Ok(Piece::Output(_)) => panic!("a remote piece returns reads"),
                // The remote piece rolled back: so does the home piece (it is not run).
                Err(e) => Err(e),
            }
        };
        match (&expected, &got) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "transaction {n}: {input:?}"),
            (Err(a), Err(b)) if is_rollback(a) && is_rollback(b) => rolled_back += 1,
            _ => panic!("transaction {n}: whole {expected:?}, pieces {got:?}: {input:?}"),
        }
    }
    assert!(multi > 500, "{multi} multi-partition transactions");
    assert!(rolled_back > 0, "clause 2.4.2.3 rollbacks happened on both sides");

    let w = table_digests(&mut whole);
    let a = table_digests(&mut parts[0]);
    let b = table_digests(&mut parts[1]);
    for (i, table) in TableId::ALL.iter().enumerate() {
        if *table == TableId::Item {
            assert_eq!((a[i].rows, a[i].sum), (w[i].rows, w[i].sum));
            assert_eq!((b[i].rows, b[i].sum), (w[i].rows, w[i].sum));
        } else {
            assert_eq!(a[i].rows + b[i].rows, w[i].rows, "{}", table.name());
            assert_eq!(a[i].sum.wrapping_add(b[i].sum), w[i].sum, "{} differs", table.name());
        }
    }
}
