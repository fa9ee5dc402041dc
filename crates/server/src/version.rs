//! What this binary is: its version and the commit it was built from (recorded by build.rs).
//! Shown by `synod --version`, the start-up log, `/v1/status` and `synod_build_info`.

/// The release version (the workspace's `version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from (12 hex digits, "-dirty" with uncommitted
/// changes), or "unknown" outside a git checkout.
pub const COMMIT: &str = env!("SYNOD_COMMIT");

/// "0.2.0 (commit 1a2b3c4d5e6f)": the one line every report of the version uses.
pub const DESCRIBE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SYNOD_COMMIT"),
    ")"
);
