//! Compiles the native KV API (`proto/synod_kv.proto`) into Rust with tonic-build: the messages,
//! the client stub and the server trait. `protoc` comes from the `protoc-bin-vendored` crate, so
//! no system package is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/synod_kv.proto";
    println!("cargo:rerun-if-changed={proto}");
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .bytes(["."])
        .compile_protos(&[proto], &["../../proto"])?;
    Ok(())
}
