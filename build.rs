//! Links the `lachesis` executable at a fixed address instead of as a position-independent one.
//!
//! A PIE of this size carries about 68,000 relative relocations (panic locations, vtables, string
//! tables): the loader rewrites ~1.6 MB of pages in every process before `main`, which was more
//! than half of a command's start-up (`--version`: 2.4 ms of CPU and 615 page faults as a PIE,
//! 1.0 ms and 189 as a fixed-address executable). Every command and every stage's shim pays it.
//! Heap, stack, mmap and shared libraries stay randomized; only the image's own address is fixed
//! (Go's default on Linux too). `LACHESIS_PIE=1 cargo build` keeps a PIE for those who prefer it.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LACHESIS_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if linux && std::env::var_os("LACHESIS_PIE").is_none_or(|v| v.is_empty() || v == "0") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
