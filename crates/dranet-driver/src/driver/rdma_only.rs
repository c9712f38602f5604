//! RDMA links without a netdev, moved into a pod's namespace in exclusive mode and back.

use super::*;

impl NetworkDriver {
    pub(super) async fn move_rdma_only(
        &self,
        claims: &[Arc<ClaimRecord>],
        netns: &Path,
        record: &mut PodRecord,
    ) -> Result<()> {
        let pod = record.pod.clone();
        let fail = |c: &ClaimRecord, d: &DeviceRecord, e: Error| {
            tracing::warn!(pod = %pod, claim = %format!("{}/{}", c.namespace, c.name), device = %d.device, rdma = ?d.rdma, error = %e, "moving an RDMA-only device into the pod failed");
            Error::RdmaAttach {
                pod: pod.clone(),
                reason: device_failure(c, d, &e),
            }
        };
        let mut pod_ns = None;
        for c in claims {
            for d in c.devices.iter().filter(|d| d.netdev.is_none()) {
                let Some(dev) = &d.rdma else { continue };
                if pod_ns.is_none() {
                    pod_ns = Some(
                        dranet_podnet::netns::Netns::open(netns)
                            .map_err(|e| fail(c, d, e.into()))?,
                    );
                }
                let Some(ns) = pod_ns.as_ref() else { continue };
                // Recorded first: a crash after the move still knows to give it back.
                record.rdma_moved.push(dev.clone());
                self.store.put_pod(record).map_err(|e| fail(c, d, e))?;
                dranet_podnet::rdma::move_device(dev, self.podnet.host(), ns)
                    .map_err(|e| fail(c, d, e.into()))?;
            }
        }
        lock(&self.state)
            .pods
            .insert(record.sandbox_id.clone(), record.clone());
        Ok(())
    }

    /// Moves RDMA-only devices back to the host. Never fails: a device left in a namespace goes
    /// back to the host by itself when the namespace is deleted.
    pub(super) async fn return_rdma(&self, record: &mut PodRecord) {
        if record.rdma_moved.is_empty() {
            return;
        }
        if let Some(ns) = record
            .netns
            .as_ref()
            .and_then(|p| dranet_podnet::netns::Netns::open(p).ok())
        {
            for dev in &record.rdma_moved {
                let here = dranet_podnet::rdma::devices(&ns)
                    .map(|d| d.iter().any(|(_, n)| n == dev))
                    .unwrap_or(false);
                if here
                    && let Err(e) = dranet_podnet::rdma::move_device(dev, &ns, self.podnet.host())
                {
                    tracing::warn!(pod = %record.pod, device = %dev, error = %e, "could not move the RDMA device back; the kernel returns it when the pod's namespace goes");
                }
            }
        }
        record.rdma_moved.clear();
        if let Err(e) = self.store.put_pod(record) {
            tracing::warn!(pod = %record.pod, error = %e, "could not update the pod record");
        }
    }
}
