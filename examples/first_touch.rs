//! What a fresh page costs on this machine: the nanoseconds per byte of the first write to
//! memory just mapped, with huge pages (`MADV_HUGEPAGE`) and with small ones
//! (`MADV_NOHUGEPAGE`), each touched right after the previous round freed its memory and again
//! after a pause. On a virtual machine whose host takes freed guest memory back (virtio-balloon
//! free page reporting), the paused rounds show what the database's growth pays; the figures
//! behind `growth_pages` (engine/src/arena.rs; docs/results.md, "What a fresh page costs").
//!
//! `cargo run --release --example first_touch -- [MIB] [PAUSE_S]` (default 1024 MiB, 5 s)

use std::time::{Duration, Instant};

const HUGE: usize = 2 << 20;

/// Maps `bytes` (2 MiB-aligned), advises it, writes one byte per 4 KiB page, unmaps it;
/// returns nanoseconds per byte of the writes.
#[cfg(target_os = "linux")]
fn touch(bytes: usize, huge: bool) -> f64 {
    // SAFETY: an anonymous private mapping of our own, written only inside its bounds and
    // unmapped before returning.
    unsafe {
        let len = bytes + HUGE;
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert!(p != libc::MAP_FAILED, "mmap of {len} bytes failed");
        let a = (p as usize).next_multiple_of(HUGE) as *mut u8;
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        libc::madvise(a as *mut libc::c_void, bytes, advice);
        let t = Instant::now();
        for off in (0..bytes).step_by(4096) {
            a.add(off).write_volatile(1);
        }
        let ns = t.elapsed().as_nanos() as f64 / bytes as f64;
        libc::munmap(p, len);
        ns
    }
}

#[cfg(target_os = "linux")]
fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(1024, |a| a.parse().expect("MIB: a whole number of MiB"));
    let pause: u64 = args.next().map_or(5, |a| a.parse().expect("PAUSE_S: a whole number of seconds"));
    let bytes = mib << 20;
    println!("first touch of {mib} MiB, one write per 4 KiB page; ns per byte");
    println!("{:<8} {:>16} {:>16}", "pages", "right after", format!("after {pause} s"));
    for (name, huge) in [("huge", true), ("small", false)] {
        touch(bytes, huge); // frees memory for the next round to reuse at once
        let at_once = touch(bytes, huge);
        std::thread::sleep(Duration::from_secs(pause));
        let paused = touch(bytes, huge);
        println!("{name:<8} {at_once:>16.2} {paused:>16.2}");
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("first_touch measures Linux's transparent huge pages; this is not Linux");
}
