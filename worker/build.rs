//! Links `service-worker` as a position-dependent executable. A position-independent one has its relocated data
//! (about 240 KiB of `.data.rel.ro`: vtables and tables of pointers) written by the loader at every start, which
//! makes those pages private to each process; one worker runs per session. Linked at a fixed address, the data is
//! read from the file as it is and shared by every worker. The price is that the worker's own code is not at a
//! random address; see SECURITY.md ("The worker is not position-independent") for why that is acceptable.

fn main() {
    // GNU and LLVM linkers on Linux take the flag; elsewhere the worker is linked as the target's default.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
