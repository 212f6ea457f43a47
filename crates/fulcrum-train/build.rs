//! Records which build this is (the package version and the git commit it was built from), so
//! that a checkpoint can say which binary wrote it and a resume by another one is refused.

use std::process::Command;

fn main() {
    let rev = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!(
        "cargo:rustc-env=FULCRUM_BUILD={} ({rev})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
    for f in ["../../.git/HEAD", "../../.git/refs/heads"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
