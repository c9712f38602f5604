//! The gRPC services: registration, DRAPlugin v1 and v1beta1, and device health.
//!
//! The two DRAPlugin versions have the same messages except v1's `share_id`; one macro maps both
//! onto [`NodeService`] so they cannot drift apart.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

use crate::api::KubeApi;
use crate::driver::{ClaimRef, Driver};
use crate::health::{DeviceHealthReport, Health};
use crate::metrics::{Method, Metrics};
use crate::node::NodeService;
use crate::proto::pluginregistration as regpb;

/// Where the kubelet's registration of the plugin stands.
///
/// ResourceSlices are published whether or not the kubelet registered the plugin, so the
/// scheduler can allocate devices to pods the kubelet will not start ("DRA driver ... is not
/// registered"); this tells an operator why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationState {
    /// The kubelet has not called the registration socket yet.
    Waiting,
    /// The kubelet asked for the plugin's info (`GetInfo`) and has not said the outcome yet.
    InfoRequested,
    /// The kubelet registered the plugin.
    Registered,
    /// The kubelet refused the plugin.
    Refused {
        /// The kubelet's error text.
        error: String,
    },
}

impl RegistrationState {
    /// True once the kubelet has said whether it registered the plugin.
    pub fn is_decided(&self) -> bool {
        matches!(self, Self::Registered | Self::Refused { .. })
    }
}

pub(crate) struct Registration {
    pub info: regpb::PluginInfo,
    pub status: watch::Sender<RegistrationState>,
    pub metrics: Arc<dyn Metrics>,
}

#[tonic::async_trait]
impl regpb::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _req: Request<regpb::InfoRequest>,
    ) -> Result<Response<regpb::PluginInfo>, Status> {
        let start = Instant::now();
        let info = self.info.clone();
        tracing::info!(driver = %info.name, endpoint = %info.endpoint, versions = ?info.supported_versions, "the kubelet asked for the plugin's info");
        self.status.send_if_modified(|s| {
            // A kubelet restart asks again: the verdict that follows replaces the old one.
            let changed = *s != RegistrationState::InfoRequested;
            *s = RegistrationState::InfoRequested;
            changed
        });
        self.metrics
            .grpc_request(Method::GetInfo, "", 0, 0, start.elapsed());
        Ok(Response::new(info))
    }

    async fn notify_registration_status(
        &self,
        req: Request<regpb::RegistrationStatus>,
    ) -> Result<Response<regpb::RegistrationStatusResponse>, Status> {
        let start = Instant::now();
        let s = req.into_inner();
        if s.plugin_registered {
            tracing::info!(driver = %self.info.name, "kubelet registered the plugin");
        } else {
            tracing::error!(driver = %self.info.name, error = %s.error, "kubelet refused the plugin registration");
        }
        self.status.send_replace(if s.plugin_registered {
            RegistrationState::Registered
        } else {
            RegistrationState::Refused { error: s.error }
        });
        self.metrics
            .grpc_request(Method::NotifyRegistrationStatus, "", 0, 0, start.elapsed());
        Ok(Response::new(regpb::RegistrationStatusResponse {}))
    }
}

macro_rules! dra_service {
    ($name:ident, $pb:ident, $api:literal, |$dev:ident| $device:expr) => {
        /// Serves this DRAPlugin API version on top of the shared [`NodeService`].
        pub(crate) struct $name<D, A>(pub Arc<NodeService<D, A>>);

        #[tonic::async_trait]
        impl<D: Driver, A: KubeApi> crate::proto::$pb::dra_plugin_server::DraPlugin for $name<D, A> {
            async fn node_prepare_resources(
                &self,
                req: Request<crate::proto::$pb::NodePrepareResourcesRequest>,
            ) -> Result<Response<crate::proto::$pb::NodePrepareResourcesResponse>, Status> {
                use crate::proto::$pb as pb;
                let start = Instant::now();
                let claims: Vec<ClaimRef> = req.into_inner().claims.into_iter().map(claim_ref_from!($pb)).collect();
                let n = claims.len();
                let results = self.0.prepare(claims).await;
                let mut failed = 0;
                let claims = results
                    .into_iter()
                    .map(|(uid, r)| {
                        let entry = match r {
                            Ok(devices) => pb::NodePrepareResourceResponse {
                                devices: devices.into_iter().map(|$dev| $device).collect(),
                                error: String::new(),
                            },
                            Err(e) => {
                                failed += 1;
                                let error = dranet_util::error_chain(&e);
                                tracing::warn!(claim_uid = %uid, %error, "prepare failed");
                                pb::NodePrepareResourceResponse { devices: Vec::new(), error }
                            }
                        };
                        (uid, entry)
                    })
                    .collect();
                self.0.metrics.grpc_request(Method::Prepare, $api, n, failed, start.elapsed());
                Ok(Response::new(pb::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<crate::proto::$pb::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<crate::proto::$pb::NodeUnprepareResourcesResponse>, Status> {
                use crate::proto::$pb as pb;
                let start = Instant::now();
                let claims: Vec<ClaimRef> = req.into_inner().claims.into_iter().map(claim_ref_from!($pb)).collect();
                let n = claims.len();
                let results = self.0.unprepare(claims).await;
                let mut failed = 0;
                let claims = results
                    .into_iter()
                    .map(|(uid, r)| {
                        let error = match r {
                            Ok(()) => String::new(),
                            Err(e) => {
                                failed += 1;
                                let error = dranet_util::error_chain(&e);
                                tracing::warn!(claim_uid = %uid, %error, "unprepare failed");
                                error
                            }
                        };
                        (uid, pb::NodeUnprepareResourceResponse { error })
                    })
                    .collect();
                self.0.metrics.grpc_request(Method::Unprepare, $api, n, failed, start.elapsed());
                Ok(Response::new(pb::NodeUnprepareResourcesResponse { claims }))
            }
        }
    };
}

macro_rules! claim_ref_from {
    ($pb:ident) => {
        |c: crate::proto::$pb::Claim| ClaimRef {
            namespace: c.namespace,
            name: c.name,
            uid: c.uid,
        }
    };
}

dra_service!(DraV1, dra_v1, "v1", |d| crate::proto::dra_v1::Device {
    request_names: d.requests,
    pool_name: d.pool,
    device_name: d.device,
    cdi_device_ids: d.cdi_device_ids,
    share_id: d.share_id,
});

dra_service!(DraV1beta1, dra_v1beta1, "v1beta1", |d| {
    crate::proto::dra_v1beta1::Device {
        request_names: d.requests,
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: d.cdi_device_ids,
    }
});

/// Serves the device health stream. Streams end when the plugin shuts down; otherwise a kubelet
/// watching health would keep the server's graceful shutdown waiting forever.
#[derive(Clone)]
pub(crate) struct HealthService {
    pub reports: watch::Receiver<Vec<DeviceHealthReport>>,
    pub shutdown: watch::Receiver<bool>,
    pub metrics: Arc<dyn Metrics>,
}

impl HealthService {
    /// The current reports, then each change, until shutdown.
    fn stream<T: Send + 'static>(
        &self,
        api: &'static str,
        convert: fn(&[DeviceHealthReport]) -> T,
    ) -> Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>> {
        let start = Instant::now();
        let mut shutdown = self.shutdown.clone();
        let stop = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        // WatchStream yields the current value first, then each change. It ends when the reporter
        // is dropped (or was never given); the kubelet would reopen an ended stream every few
        // seconds and log each time, so the stream stays open until shutdown either way.
        let stream = WatchStream::new(self.reports.clone())
            .map(move |reports| Ok(convert(&reports)))
            .chain(futures::stream::pending())
            .take_until(stop);
        self.metrics
            .grpc_request(Method::WatchResources, api, 0, 0, start.elapsed());
        Box::pin(stream)
    }
}

fn unix_secs(t: std::time::SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Implements one version of `DRAResourceHealth`; v1alpha1 and v1 share their messages.
macro_rules! health_service {
    ($pb:ident, $api:literal) => {
        impl HealthService {
            fn $pb(
                reports: &[DeviceHealthReport],
            ) -> crate::proto::$pb::NodeWatchResourcesResponse {
                use crate::proto::$pb as pb;
                pb::NodeWatchResourcesResponse {
                    devices: reports
                        .iter()
                        .map(|r| pb::DeviceHealth {
                            device: Some(pb::DeviceIdentifier {
                                pool_name: r.pool.clone(),
                                device_name: r.device.clone(),
                            }),
                            health: match r.health {
                                Health::Unknown => pb::HealthStatus::Unknown,
                                Health::Healthy => pb::HealthStatus::Healthy,
                                Health::Unhealthy => pb::HealthStatus::Unhealthy,
                            } as i32,
                            last_updated_time: unix_secs(r.checked_at),
                            health_check_timeout_seconds: r
                                .valid_for
                                .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
                                .unwrap_or(0),
                            message: r.message.clone(),
                        })
                        .collect(),
                }
            }
        }

        #[tonic::async_trait]
        impl crate::proto::$pb::dra_resource_health_server::DraResourceHealth for HealthService {
            type NodeWatchResourcesStream = Pin<
                Box<
                    dyn Stream<Item = Result<crate::proto::$pb::NodeWatchResourcesResponse, Status>>
                        + Send,
                >,
            >;

            async fn node_watch_resources(
                &self,
                _req: Request<crate::proto::$pb::NodeWatchResourcesRequest>,
            ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
                Ok(Response::new(self.stream($api, HealthService::$pb)))
            }
        }
    };
}

health_service!(dra_health_v1alpha1, "v1alpha1");
health_service!(dra_health_v1, "v1");
