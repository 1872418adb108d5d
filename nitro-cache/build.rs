//! Records the compiler version and target, so the persistent tier can tell
//! artefacts built by another toolchain apart and ignore them.

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown rustc".to_owned());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown target".to_owned());
    println!("cargo:rustc-env=NITRO_CACHE_RUSTC={version}");
    println!("cargo:rustc-env=NITRO_CACHE_TARGET={target}");
    println!("cargo:rerun-if-env-changed=RUSTC");
    println!("cargo:rerun-if-changed=build.rs");
}
