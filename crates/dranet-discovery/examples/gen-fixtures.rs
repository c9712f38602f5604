//! Regenerates the fixture trees: `cargo run -p dranet-discovery --example gen-fixtures -- testdata/nodes`.

fn main() {
    let Some(out) = std::env::args().nth(1) else {
        eprintln!("usage: gen-fixtures DIR");
        std::process::exit(2);
    };
    for (name, generate) in dranet_discovery::fixture::NODES {
        let dir = std::path::Path::new(&out).join(name);
        if let Err(e) = generate(&dir) {
            eprintln!("{}: {e}", dir.display());
            std::process::exit(1);
        }
        println!("{}", dir.display());
    }
}
