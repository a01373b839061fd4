//! Links `service-rs` with its relative relocations packed (`-z pack-relative-relocs`, ELF's `DT_RELR`), where the
//! toolchain and the C library take them (GNU ld 2.38 or lld 15, glibc 2.36). The binary is position-independent,
//! so the loader relocates about 84,000 pointers at every start; as `RELA` entries they fill 2 MB that every process
//! reads, packed they fill 25 KB. Every command starts faster by that; a one-shot `run` takes about 6% less (see
//! `docs/src/benchmarks.md`, "How we got here"). A binary so linked needs a C library that knows the
//! format, which the linker records as a version it requires, so the flag is given only when a probe linked with
//! it runs here; a cross build, or an older system, links as before.

use std::path::Path;
use std::process::{Command, Stdio};

const FLAG: &str = "-Wl,-z,pack-relative-relocs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    let Some(out) = std::env::var_os("OUT_DIR") else {
        return;
    };
    if linux && native && probe_runs(Path::new(&out)) {
        println!("cargo:rustc-link-arg-bins={FLAG}");
    }
}

/// Whether a C program linked with [`FLAG`] by the linker cargo uses links and runs on this machine.
fn probe_runs(out: &Path) -> bool {
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    let (source, program) = (out.join("relr_probe.c"), out.join("relr_probe"));
    // Pointers in a table: relative relocations, without which the linker packs nothing and asks nothing of libc.
    let c = "static int v[2];\nint *const table[] = { &v[0], &v[1] };\nint main(void) { return *table[1]; }\n";
    if std::fs::write(&source, c).is_err() {
        return false;
    }
    let quiet = |command: &mut Command| {
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    quiet(
        Command::new(linker)
            .args(["-pie", "-fPIE", FLAG, "-o"])
            .arg(&program)
            .arg(&source),
    ) && quiet(&mut Command::new(&program))
}
