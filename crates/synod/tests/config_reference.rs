//! `synod config`: docs/configuration.md is what `synod config reference` prints (regenerate
//! it with the command the failure names), `synod config check` accepts a good file and names
//! the key of a bad one, and `synod config default` prints a file the server loads.

use std::path::Path;
use std::process::Command;
use synod_server::config::reference;

fn synod(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_synod"))
        .args(args)
        .output()
        .expect("run synod")
}

#[test]
fn docs_configuration_md_is_generated_from_the_structs() {
    let out = synod(&["config", "reference"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    assert_eq!(generated, reference::markdown());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if let Err(e) = reference::compare(&committed, &generated) {
        panic!("{e}");
    }
}

#[test]
fn config_check_and_default() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "cluster_id = 'c'\nnode_id = 1\ninsecure = true\nadmin_addr = '127.0.0.1:9181'\n\
         data_dir = '/tmp/x'\nlog_format = 'json'\n[peers]\n1 = '127.0.0.1:2881'\n",
    )
    .unwrap();
    let out = synod(&["config", "check", good.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");

    let out = synod(&[
        "config",
        "check",
        good.to_str().unwrap(),
        "--set",
        "log_format=xml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("log_format") && err.contains("text or json"),
        "{err}"
    );

    let out = synod(&[
        "config",
        "check",
        dir.path().join("none.toml").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));

    // The default file, with the required keys given, is a configuration the server loads.
    let out = synod(&["config", "default"]);
    assert!(out.status.success());
    let default = dir.path().join("default.toml");
    std::fs::write(&default, &out.stdout).unwrap();
    let out = synod(&[
        "config",
        "check",
        default.to_str().unwrap(),
        "--set",
        "cluster_id=c",
        "--set",
        "node_id=1",
        "--set",
        "peers.1=\"127.0.0.1:2881\"",
        "--set",
        "admin_addr=\"127.0.0.1:9181\"",
        "--set",
        "data_dir=/tmp/x",
        "--set",
        "insecure=true",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
