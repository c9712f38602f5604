//! What cloud detection costs off every cloud, as the daemon runs it (Auto, every cloud a
//! candidate): DMI that names no cloud, and without DMI a round of probes against a metadata
//! address that refuses or never answers. `cargo bench --bench clouds`

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_cloud::MetadataClient;
use dranet_cloud::azure::ImdsClient;
use dranet_cloud::detect::{Clients, Detector, Hint};
use dranet_cloud::fake::{FakeServer, Reply};

/// Every cloud's service at `endpoint` (they share one address on the real clouds).
fn clients(endpoint: &str) -> Clients {
    let m = MetadataClient::new(endpoint);
    Clients {
        azure: ImdsClient {
            endpoint: endpoint.into(),
            ..ImdsClient::default()
        },
        gce: m.clone(),
        aws: m.clone(),
        oke: m.clone(),
        alibaba: m,
    }
}

fn bench(c: &mut Criterion) {
    let nodes = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/nodes");
    let silent = FakeServer::start_blocking(|_, _| Reply::Hang).expect("fake metadata service");
    // A port nothing listens on: bind, note it, close.
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    // A bare-metal server's DMI strings, which name no cloud (the saved nodes are all on one).
    let bare = tempfile::tempdir().expect("tempdir");
    let dmi = bare.path().join("class/dmi/id");
    std::fs::create_dir_all(&dmi).expect("dmi dir");
    for (file, value) in [
        ("sys_vendor", "Supermicro"),
        ("product_name", "AS -8125GS-TNMR2"),
        ("chassis_asset_tag", "To be filled by O.E.M."),
    ] {
        std::fs::write(dmi.join(file), format!("{value}\n")).expect("dmi file");
    }
    let no_dmi = nodes.join("edge-cases/sys");
    let detector = |endpoint: &str, sysfs: &Path| Detector {
        clients: clients(endpoint),
        ..Detector::new(sysfs, Hint::Auto)
    };
    let mut g = c.benchmark_group("cloud_detect_off_every_cloud");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("dmi_names_no_cloud", |b| {
        let d = detector(&silent.endpoint, bare.path());
        b.iter(|| assert!(d.detect_blocking().provider.is_none()));
    });
    g.bench_function("no_dmi_probes_refused", |b| {
        let d = detector(&format!("http://{refused}"), &no_dmi);
        b.iter(|| assert!(d.detect_blocking().provider.is_none()));
    });
    g.bench_function("no_dmi_probes_silent", |b| {
        let d = detector(&silent.endpoint, &no_dmi);
        b.iter(|| assert!(d.detect_blocking().provider.is_none()));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
