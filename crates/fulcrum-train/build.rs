//! Records which build this is (the package version and the git commit it was built from), so
//! that a checkpoint can say which binary wrote it and a resume by another one is refused.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|r| !r.is_empty())
}

fn main() {
    let rev = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!(
        "cargo:rustc-env=FULCRUM_BUILD={} ({rev})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
    // Build again when the commit changes. Only files that exist are named: cargo takes a
    // missing one as changed on every build, which would recompile this crate each time (a
    // worktree keeps HEAD in its own git directory; a source tarball has none).
    let mut watched = 0;
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]);
        let dirs = [Some(dir.clone()), common];
        for (base, file) in dirs
            .iter()
            .flatten()
            .flat_map(|d| ["HEAD", "refs/heads", "packed-refs"].map(move |f| (d.clone(), f)))
        {
            let path = PathBuf::from(base).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
                watched += 1;
            }
        }
    }
    if watched == 0 {
        println!("cargo:rerun-if-changed=build.rs");
    }
}
