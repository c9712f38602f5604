//! An FPGA driver written against the dranet crates' public API, with Kubernetes 1.35 types.

use std::sync::Arc;

use dranet_alloc::cel::{DeviceAttributes, DeviceView, Program};
use dranet_core::{AttributeValue, Discover, Quantity};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::Device;
use dranet_kubeletplugin::{
    ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeClient, KubeletPlugin, Prepared,
    PreparedDevice,
};
use dranet_nri::{Container, ContainerAdjustment, NriPlugin, PodSandbox, RunnerBuilder};

struct Fpga;

impl Driver for Fpga {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        Ok(Prepared {
            devices: claim
                .results
                .iter()
                .map(|r| PreparedDevice::for_result(r, vec![format!("example.com/fpga={}", r.device)]))
                .collect(),
            state: None,
        })
    }

    async fn unprepare(&self, _: ClaimToUnprepare) -> Result<(), HandlerError> {
        Ok(())
    }
}

impl NriPlugin for Fpga {
    async fn create_container(
        &self,
        _: &PodSandbox,
        _: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        Ok(ContainerAdjustment::new())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Topology of a fixture tree, without libudev or netlink (default features off).
    if let Some(sys) = std::env::args().nth(1) {
        let d = dranet_discovery::Discovery::new(
            dranet_discovery::Sysfs::new(&sys),
            dranet_discovery::SysfsEnumerator,
            dranet_discovery::NoLinks,
            Default::default(),
        );
        println!("{} devices", d.discover()?.devices.len());
        return Ok(());
    }
    // The scheduler's answer for a selector of the FPGA's class, before publishing it.
    let selector = Program::compile(r#"device.attributes["fpga.example.com"].lanes >= 8"#)?;
    let attributes = DeviceAttributes::new(
        "fpga.example.com",
        [("lanes", AttributeValue::Int(16))],
        [("memory", Quantity::parse("16Gi")?)],
    )?;
    let selected = selector.matches(&DeviceView {
        driver: "fpga.example.com",
        attributes: &attributes,
        allow_multiple_allocations: false,
    })?;
    println!("selected: {selected}");
    let fpga = Arc::new(Fpga);
    let plugin = KubeletPlugin::builder(Arc::clone(&fpga), KubeClient::infer().await?)
        .driver_name("fpga.example.com")
        .node_name("node-1")
        .start()
        .await?;
    plugin.publish(vec![Device {
        name: "fpga0".into(),
        ..Default::default()
    }])?;
    RunnerBuilder::new()
        .name("fpga")
        .index(60)
        .build_shared(fpga)?
        .run()
        .await?;
    plugin.shutdown().await?;
    Ok(())
}
