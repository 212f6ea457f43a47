//! Builds the c10d shim (csrc/c10d_shim.cpp) against the headers of the libtorch that tch links
//! (`LIBTORCH`, set by .cargo/config.toml), and links it to that libtorch's own c10d.
//!
//! Gloo's headers are not in the PyPI wheel: they come from `FULCRUM_GLOO_INCLUDE`, else from
//! Debian's libgloo-dev unpacked into `.venv/gloo` (scripts/setup-libtorch.sh does it), else
//! from /usr/include.
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=csrc/c10d_shim.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=FULCRUM_GLOO_INCLUDE");
    let libtorch = PathBuf::from(std::env::var("LIBTORCH").unwrap_or_else(|_| {
        panic!("fulcrum-dist: LIBTORCH is not set (.cargo/config.toml sets it; run scripts/setup-libtorch.sh)")
    }));
    let include = libtorch.join("include");
    if !include
        .join("torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
        .exists()
    {
        panic!(
            "fulcrum-dist: {} has no c10d headers (torch/csrc/distributed/c10d): use the PyPI torch wheel (scripts/setup-libtorch.sh)",
            include.display()
        );
    }
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let gloo = gloo_include(&manifest).unwrap_or_else(|| {
        panic!(
            "fulcrum-dist: no gloo headers (gloo/rendezvous/store.h) in FULCRUM_GLOO_INCLUDE, .venv/gloo/usr/include or /usr/include: \
             run scripts/setup-libtorch.sh (it unpacks Debian's libgloo-dev into .venv/gloo) or `apt-get install libgloo-dev`"
        )
    });
    let mut b = cc::Build::new();
    b.cpp(true)
        .file("csrc/c10d_shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(&gloo)
        .define("USE_DISTRIBUTED", None)
        .define("USE_C10D_GLOO", None)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag("-std=c++17")
        .flag("-w")
        .opt_level(2);
    if std::env::var_os("CARGO_FEATURE_NCCL").is_some() {
        let site = libtorch.parent().expect("LIBTORCH has a parent");
        b.define("USE_C10D_NCCL", None)
            .define("FULCRUM_NCCL", None)
            .include(site.join("nvidia/nccl/include"))
            .include(site.join("nvidia/cu13/include"));
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
    b.compile("fulcrum_c10d");
    println!(
        "cargo:rustc-link-search=native={}",
        libtorch.join("lib").display()
    );
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
}

fn gloo_include(manifest: &Path) -> Option<PathBuf> {
    let root = manifest.join("../..");
    let candidates = [
        std::env::var_os("FULCRUM_GLOO_INCLUDE").map(PathBuf::from),
        Some(root.join(".venv/gloo/usr/include")),
        Some(PathBuf::from("/usr/include")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("gloo/rendezvous/store.h").exists())
}
