//! NRI device injector: adds the device nodes named in a pod annotation to its containers.
//!
//! Annotate a pod with `devices.nri.dranet.dev/container.<container-name>` (one container) or
//! `devices.nri.dranet.dev/pod` (every container), listing devices separated by whitespace or
//! commas. Each entry is either
//!
//! - `/dev/path=c:MAJOR:MINOR[:MODE]` — a node of that type (`c` or `b`) and numbers, mode octal
//!   (default 666), or
//! - `/dev/path` — mirrors the host's node at the same path (type and numbers from `stat`).
//!
//! ```text
//! devices.nri.dranet.dev/container.app: "/dev/infiniband/uverbs0=c:231:192 /dev/infiniband/rdma_cm"
//! ```
//!
//! A malformed annotation fails the container's creation with a message naming the bad entry.
//!
//! Run: `cargo run --example nri_device_injector -- --socket /var/run/nri/nri.sock`

use clap::Parser;
use dranet_nri::{
    Container, ContainerAdjustment, DeviceType, Error, Event, EventMask, HandlerError, LinuxDevice,
    NriPlugin, PodSandbox, Result, RunnerBuilder,
};

const POD_KEY: &str = "devices.nri.dranet.dev/pod";
const CONTAINER_KEY_PREFIX: &str = "devices.nri.dranet.dev/container.";

#[derive(Parser, Debug)]
#[command(about = "NRI plugin injecting devices named in pod annotations")]
struct Args {
    /// The runtime's NRI socket.
    #[arg(long, default_value = dranet_nri::DEFAULT_SOCKET_PATH)]
    socket: std::path::PathBuf,
    /// Plugin name.
    #[arg(long, default_value = "device-injector")]
    name: String,
    /// Plugin index, 0-99 (orders plugins).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=99))]
    index: u8,
}

/// Parses one annotation value into devices.
fn parse_devices(value: &str) -> Result<Vec<LinuxDevice>> {
    value
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .map(parse_entry)
        .collect()
}

fn parse_entry(entry: &str) -> Result<LinuxDevice> {
    let bad = |why: &str| Error::InvalidInput(format!("device entry {entry:?}: {why}"));
    let Some((path, spec)) = entry.split_once('=') else {
        return LinuxDevice::from_host(entry, entry);
    };
    let fields: Vec<&str> = spec.split(':').collect();
    let (kind, major, minor, mode) = match fields.as_slice() {
        [k, ma, mi] => (*k, *ma, *mi, "666"),
        [k, ma, mi, mo] => (*k, *ma, *mi, *mo),
        _ => return Err(bad("expected TYPE:MAJOR:MINOR[:MODE]")),
    };
    let kind = match DeviceType::from_code(kind)? {
        k @ (DeviceType::Char | DeviceType::Block) => k,
        _ => return Err(bad("type must be c or b")),
    };
    let major = major.parse().map_err(|_| bad("major is not a number"))?;
    let minor = minor.parse().map_err(|_| bad("minor is not a number"))?;
    let mode = u32::from_str_radix(mode, 8).map_err(|_| bad("mode is not octal"))?;
    Ok(LinuxDevice {
        path: path.to_owned(),
        kind,
        major,
        minor,
        file_mode: Some(mode),
        uid: None,
        gid: None,
    })
}

struct Injector;

impl NriPlugin for Injector {
    async fn create_container(
        &self,
        pod: &PodSandbox,
        c: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        let mut adj = ContainerAdjustment::new();
        let keys = [
            POD_KEY.to_owned(),
            format!("{CONTAINER_KEY_PREFIX}{}", c.name),
        ];
        for key in keys {
            let Some(value) = pod.annotations.get(&key) else {
                continue;
            };
            let devices = parse_devices(value).map_err(|e| {
                HandlerError::from(format!(
                    "pod {} annotation {key}: {e}",
                    pod.qualified_name()
                ))
            })?;
            for d in devices {
                tracing::info!(pod = %pod.qualified_name(), container = %c.name, device = %d.path, "injecting");
                adj.add_device(d)?;
            }
        }
        Ok(adj)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let runner = RunnerBuilder::new()
        .socket(args.socket)
        .name(args.name)
        .index(args.index)
        .events(EventMask::of(&[Event::CreateContainer]))
        .build(Injector)?;
    tokio::select! {
        r = runner.run() => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dranet_nri::fake::FakeRuntime;

    #[test]
    fn entries_parse_or_name_what_is_wrong() {
        let d = parse_devices("/dev/infiniband/uverbs0=c:231:192, /dev/x=b:8:0:600").unwrap();
        assert_eq!(d[0], LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192));
        assert_eq!(
            (d[1].kind, d[1].file_mode),
            (DeviceType::Block, Some(0o600))
        );
        assert_eq!(parse_devices("/dev/null").unwrap()[0].major, 1);
        for (bad, why) in [
            ("/dev/x=c:1", "TYPE:MAJOR:MINOR"),
            ("/dev/x=z:1:2", "unknown device type"),
            ("/dev/x=c:a:2", "major"),
            ("/dev/x=c:1:2:999", "octal"),
            ("/dev/does-not-exist", "stat"),
        ] {
            let err = parse_devices(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn injects_annotated_devices_through_the_protocol() {
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let runner = RunnerBuilder::new()
            .name("inj")
            .index(10)
            .from_env(false)
            .connection(ours)
            .build(Injector)
            .unwrap();
        tokio::spawn(runner.run());
        let mut rt = FakeRuntime::new(theirs);
        rt.expect_registration().await.unwrap();
        rt.configure("fake", "0").await.unwrap();
        let mut pod = PodSandbox::default();
        pod.annotations.insert(
            format!("{CONTAINER_KEY_PREFIX}app"),
            "/dev/infiniband/uverbs0=c:231:192".into(),
        );
        let app = Container {
            name: "app".into(),
            ..Default::default()
        };
        let adj = rt.create_container(&pod, &app).await.unwrap();
        assert_eq!(
            adj.devices(),
            &[LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192)]
        );
        let other = Container {
            name: "sidecar".into(),
            ..Default::default()
        };
        assert!(rt.create_container(&pod, &other).await.unwrap().is_empty());
        pod.annotations.insert(POD_KEY.into(), "/dev/x=q".into());
        let err = rt
            .create_container(&pod, &other)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("devices.nri.dranet.dev/pod") && err.contains("/dev/x=q"),
            "{err}"
        );
    }
}
