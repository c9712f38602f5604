//! dranet-nri: cost of the framing layers, and of a whole CreateContainer call through the plugin
//! runtime (ttrpc over the mux over a unix socketpair), which is the plugin's share of a
//! container creation. Goal: well under 100 µs.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dranet_nri::fake::FakeRuntime;
use dranet_nri::mux::{Channel, Demux, encode_message};
use dranet_nri::ttrpc::{Message, MessageType};
use dranet_nri::{
    Container, ContainerAdjustment, HandlerError, LinuxDevice, Namespace, NriPlugin, PodSandbox,
    Result, RunnerBuilder,
};

fn message(len: usize) -> Message {
    Message {
        stream_id: 7,
        kind: MessageType::Request,
        flags: 0,
        body: vec![0xa5; len],
    }
}

fn framing(c: &mut Criterion) {
    let mut g = c.benchmark_group("nri_framing");
    // A typical CreateContainer request is ~1-3 KiB; 16 KiB spans four frames.
    for len in [512usize, 2048, 16 * 1024] {
        let msg = message(len);
        let mut wire = Vec::new();
        encode_message(Channel::Plugin, &msg, &mut wire).unwrap();
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("encode", len), &msg, |b, m| {
            let mut out = Vec::with_capacity(wire.len());
            b.iter(|| {
                out.clear();
                encode_message(Channel::Plugin, black_box(m), &mut out).unwrap();
                black_box(out.len())
            })
        });
        g.bench_with_input(BenchmarkId::new("decode", len), &wire, |b, w| {
            b.iter(|| {
                let mut d = Demux::new();
                d.push(black_box(w));
                black_box(d.next_message().unwrap().map(|(_, m)| m.body.len()))
            })
        });
    }
    g.finish();
}

/// What dranet does at CreateContainer: add an RDMA device node and an env var.
struct Injector;

impl NriPlugin for Injector {
    async fn create_container(
        &self,
        _: &PodSandbox,
        _: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        let mut adj = ContainerAdjustment::new();
        adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?
            .add_env("DRANET_RDMA", "mlx5_0")?;
        Ok(adj)
    }
}

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut fake, pod, ctr) = rt.block_on(async {
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let runner = RunnerBuilder::new()
            .name("bench")
            .index(10)
            .from_env(false)
            .connection(ours)
            .build(Injector)
            .unwrap();
        tokio::spawn(runner.run());
        let mut fake = FakeRuntime::new(theirs);
        fake.expect_registration().await.unwrap();
        fake.configure("bench", "0").await.unwrap();
        // A realistic pod: labels, annotations and a netns, as containerd sends them.
        let mut pod = PodSandbox {
            id: "4e50dd220b10c0ffee".repeat(3),
            name: "trainer-0".into(),
            uid: "0a6f3c1e-0000-4000-8000-000000000001".into(),
            namespace: "ml".into(),
            namespaces: vec![Namespace {
                kind: "network".into(),
                path: "/var/run/netns/cni-7e64401b-5aa8-01b6-a57c-06713b2e4dc7".into(),
            }],
            ..Default::default()
        };
        for i in 0..10 {
            pod.labels.insert(format!("label-{i}"), "value".into());
            pod.annotations
                .insert(format!("example.com/annotation-{i}"), "v".repeat(40));
        }
        let ctr = Container {
            id: "c0ffee".repeat(10),
            name: "app".into(),
            args: vec!["/bin/sh".into(), "-c".into(), "sleep 3600".into()],
            env: (0..10).map(|i| format!("VAR_{i}=value")).collect(),
            ..Default::default()
        };
        (fake, pod, ctr)
    });
    c.bench_function("nri_create_container_round_trip", |b| {
        b.iter(|| {
            let adj = rt
                .block_on(fake.create_container(black_box(&pod), black_box(&ctr)))
                .unwrap();
            black_box(adj.devices().len())
        })
    });
}

criterion_group!(benches, framing, round_trip);
criterion_main!(benches);
