//! Shared by this crate's tests: the saved documents under `testdata/`, sysfs fixtures with a
//! cloud's DMI strings, and a detector pointed at a fake with short retries.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dranet_cloud::MetadataClient;
use dranet_cloud::RetryPolicy;
use dranet_cloud::azure::ImdsClient;
use dranet_cloud::detect::{Clients, Detector, Hint};
use dranet_cloud::dmi::{AZURE_ASSET_TAG, Cloud, OCI_ASSET_TAG};
use dranet_discovery::fixture::{Builder, Pci};

/// A saved document under `testdata/`.
pub fn doc(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The DMI strings of a machine on `cloud`, or of a bare-metal server off every cloud.
pub fn dmi_of(cloud: Option<Cloud>) -> (&'static str, &'static str, &'static str) {
    match cloud {
        Some(Cloud::Azure) => ("Microsoft Corporation", "Virtual Machine", AZURE_ASSET_TAG),
        Some(Cloud::Gce) => ("Google", "Google Compute Engine", ""),
        Some(Cloud::Aws) => ("Amazon EC2", "p5.48xlarge", "Amazon EC2"),
        Some(Cloud::Oke) => ("Oracle Corporation", "BM.GPU.GB200.4", OCI_ASSET_TAG),
        Some(Cloud::Alibaba) => ("Alibaba Cloud", "Alibaba Cloud ECS", ""),
        None => ("Supermicro", "AS -8125GS-TNMR2", "To be filled by O.E.M."),
    }
}

/// A sysfs with `cloud`'s DMI strings (or none at all), plus what `extra` adds.
pub fn sysfs(
    dir: &Path,
    cloud: Option<Option<Cloud>>,
    extra: impl FnOnce(&mut Builder) -> std::io::Result<()>,
) -> PathBuf {
    let mut b = Builder::new(dir).unwrap();
    if let Some(c) = cloud {
        let (vendor, product, tag) = dmi_of(c);
        b.dmi(vendor, product, tag).unwrap();
    }
    extra(&mut b).unwrap();
    b.finish().unwrap();
    dir.join("sys")
}

/// A PCI function at `addr` bound to `driver`, on its own root.
pub fn function(b: &mut Builder, addr: &str, driver: &str) -> std::io::Result<String> {
    let root = b.root(&format!("pci{}", &addr[..7]))?;
    b.pci(
        &root,
        &Pci {
            addr,
            class: 0x020000,
            vendor: 0x1d0f,
            device: 0xefa1,
            subsystem: (0x1d0f, 0xefa1),
            driver: Some(driver),
            numa: Some("0"),
        },
    )
}

/// Fast retries, so that tests of failures end quickly.
pub fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        budget: Duration::from_secs(2),
    }
}

/// Every cloud's client pointed at `endpoint` (they share one address on the real clouds).
pub fn clients(endpoint: &str) -> Clients {
    let m = MetadataClient {
        endpoint: endpoint.into(),
        request_timeout: Duration::from_millis(400),
    };
    Clients {
        azure: ImdsClient {
            endpoint: endpoint.into(),
            request_timeout: Duration::from_millis(400),
            ..ImdsClient::default()
        },
        gce: m.clone(),
        aws: m.clone(),
        oke: m.clone(),
        alibaba: m,
    }
}

/// A detector on `sys` with every service at `endpoint`.
pub fn detector(endpoint: &str, sys: &Path, hint: Hint) -> Detector {
    Detector {
        clients: clients(endpoint),
        retry: quick_retry(),
        probe_timeout: Duration::from_millis(300),
        ..Detector::new(sys, hint)
    }
}
