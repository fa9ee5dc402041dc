//! Compiles etcd's vendored v3 API (`proto/etcd`, see its README) and synod's log command
//! (`proto/synod_etcd.proto`) with tonic-build. `protoc` comes from `protoc-bin-vendored`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for f in [
        "etcd/rpc.proto",
        "etcd/kv.proto",
        "etcd/auth.proto",
        "synod_etcd.proto",
    ] {
        println!("cargo:rerun-if-changed=../../proto/{f}");
    }
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .bytes(["."])
        .compile_protos(
            &["../../proto/etcd/rpc.proto", "../../proto/synod_etcd.proto"],
            &["../../proto/etcd", "../../proto"],
        )?;
    Ok(())
}
