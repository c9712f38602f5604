//! Compiles our .proto files with protox (pure Rust, no protoc) and tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/pluginregistration.proto",
        "proto/dra_v1.proto",
        "proto/dra_v1beta1.proto",
        "proto/dra_health_v1alpha1.proto",
        "proto/dra_health_v1.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
