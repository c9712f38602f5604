//! What Azure detection costs where there is no Azure: the DMI answer, a probe of a metadata
//! address that never answers, and one that refuses. `cargo bench --bench azure`

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_azure::fake::{FakeImds, Reply};
use dranet_azure::{Detector, Hint, ImdsClient};

fn bench(c: &mut Criterion) {
    let nodes = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/nodes");
    let silent = FakeImds::start_blocking(|_, _| Reply::Hang).expect("fake IMDS");
    // A port nothing listens on: bind, note it, close.
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let client = |endpoint: String| ImdsClient {
        endpoint,
        ..ImdsClient::default()
    };
    let mut g = c.benchmark_group("azure_detect_off_azure");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("dmi_not_azure", |b| {
        let d = Detector::new(
            client(silent.endpoint.clone()),
            nodes.join("bm-mi300x-8/sys"),
            Hint::Auto,
        );
        b.iter(|| assert!(d.detect_blocking().provider.is_none()));
    });
    g.bench_function("no_dmi_probe_silent_endpoint", |b| {
        let d = Detector::new(
            client(silent.endpoint.clone()),
            nodes.join("edge-cases/sys"),
            Hint::Auto,
        );
        b.iter(|| assert!(d.detect_blocking().provider.is_none()));
    });
    g.bench_function("no_dmi_probe_refused", |b| {
        let d = Detector::new(
            client(format!("http://{refused}")),
            nodes.join("edge-cases/sys"),
            Hint::Auto,
        );
        b.iter(|| assert!(d.detect_blocking().provider.is_none()));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
