//! Compiles the crate's own .proto files with protox (pure Rust: no protoc on build machines).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/nri.proto", "proto/ttrpc.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
