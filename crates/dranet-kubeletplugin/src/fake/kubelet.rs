//! The fake kubelet: a tonic client on the plugin's unix sockets.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use crate::driver::ClaimRef;
use crate::error::{Error, Result};
use crate::proto::dra_health_v1::dra_resource_health_client::DraResourceHealthClient as HealthV1Client;
use crate::proto::dra_health_v1alpha1::dra_resource_health_client::DraResourceHealthClient;
use crate::proto::dra_v1::dra_plugin_client::DraPluginClient as V1Client;
use crate::proto::dra_v1beta1::dra_plugin_client::DraPluginClient as V1beta1Client;
use crate::proto::pluginregistration::registration_client::RegistrationClient;
use crate::proto::{dra_v1, dra_v1beta1, pluginregistration};

/// Plays the kubelet: discovers the plugin through its registration socket, then calls its DRA
/// service on the endpoint it advertised.
#[derive(Debug, Clone)]
pub struct FakeKubelet {
    info: pluginregistration::PluginInfo,
    registration: Channel,
    dra: Channel,
}

/// A gRPC channel over a unix socket.
pub async fn unix_channel(path: &Path) -> Result<Channel> {
    let path: PathBuf = path.to_path_buf();
    // The connector below decides where to connect; the URI only gives the `:authority`, which
    // is `localhost` as the kubelet sends it on the DRA socket.
    let endpoint = Endpoint::try_from("http://localhost")?;
    let connector = tower::service_fn(move |_| {
        let path = path.clone();
        async move { UnixStream::connect(path).await.map(TokioIo::new) }
    });
    Ok(endpoint.connect_with_connector(connector).await?)
}

/// A gRPC channel to a registration socket that sends the `:authority` the real kubelet sends:
/// grpc-go, dialling a unix socket without an explicit authority, uses the socket path,
/// percent-encoded (`%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2F...-reg.sock`). That is not a
/// valid URI authority, and an h2 server that is not prepared for it resets the stream.
pub async fn kubelet_registration_channel(path: &Path) -> Result<Channel> {
    let path: PathBuf = path.to_path_buf();
    let authority = grpc_go_authority(&path);
    let endpoint = Endpoint::try_from("http://kubelet.invalid")?;
    let connector = tower::service_fn(move |_| {
        let path = path.clone();
        let authority = authority.clone();
        async move {
            let conn = UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(TokioIo::new(crate::authority::client_side(
                conn,
                crate::authority::Authority::Set(authority),
            )))
        }
    });
    Ok(endpoint.connect_with_connector(connector).await?)
}

/// The authority grpc-go derives from a unix socket path: every byte outside the URI's
/// unreserved and sub-delimiter characters percent-encoded, `/` included.
pub fn grpc_go_authority(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

impl FakeKubelet {
    /// Connects to the registration socket, calls `GetInfo`, and connects to the advertised
    /// endpoint, as the kubelet's plugin watcher does: the registration socket with grpc-go's
    /// percent-encoded socket path as `:authority` (see [`kubelet_registration_channel`]), the DRA
    /// socket with `localhost`.
    pub async fn connect(registration_socket: &Path) -> Result<Self> {
        let registration = kubelet_registration_channel(registration_socket).await?;
        let info = RegistrationClient::new(registration.clone())
            .get_info(pluginregistration::InfoRequest {})
            .await?
            .into_inner();
        if info.endpoint.is_empty() {
            return Err(Error::InvalidRequest(
                "plugin advertised an empty endpoint".into(),
            ));
        }
        let dra = unix_channel(Path::new(&info.endpoint)).await?;
        Ok(Self {
            info,
            registration,
            dra,
        })
    }

    /// What the plugin said in `GetInfo`.
    pub fn info(&self) -> &pluginregistration::PluginInfo {
        &self.info
    }

    /// Tells the plugin the outcome of its registration.
    pub async fn notify_registration(&self, registered: bool, error: &str) -> Result<()> {
        RegistrationClient::new(self.registration.clone())
            .notify_registration_status(pluginregistration::RegistrationStatus {
                plugin_registered: registered,
                error: error.to_string(),
            })
            .await?;
        Ok(())
    }

    /// A raw v1 DRAPlugin client.
    pub fn v1(&self) -> V1Client<Channel> {
        V1Client::new(self.dra.clone())
    }

    /// A raw v1beta1 DRAPlugin client.
    pub fn v1beta1(&self) -> V1beta1Client<Channel> {
        V1beta1Client::new(self.dra.clone())
    }

    /// A raw v1alpha1 DRAResourceHealth client.
    pub fn health_v1alpha1(&self) -> DraResourceHealthClient<Channel> {
        DraResourceHealthClient::new(self.dra.clone())
    }

    /// A raw v1 DRAResourceHealth client.
    pub fn health_v1(&self) -> HealthV1Client<Channel> {
        HealthV1Client::new(self.dra.clone())
    }

    /// `NodePrepareResources` (v1) for these claims.
    pub async fn prepare(
        &self,
        claims: &[ClaimRef],
    ) -> Result<dra_v1::NodePrepareResourcesResponse> {
        let req = dra_v1::NodePrepareResourcesRequest {
            claims: claims.iter().map(v1_claim).collect(),
        };
        Ok(self.v1().node_prepare_resources(req).await?.into_inner())
    }

    /// `NodeUnprepareResources` (v1) for these claims.
    pub async fn unprepare(
        &self,
        claims: &[ClaimRef],
    ) -> Result<dra_v1::NodeUnprepareResourcesResponse> {
        let req = dra_v1::NodeUnprepareResourcesRequest {
            claims: claims.iter().map(v1_claim).collect(),
        };
        Ok(self.v1().node_unprepare_resources(req).await?.into_inner())
    }

    /// `NodePrepareResources` (v1beta1) for these claims.
    pub async fn prepare_v1beta1(
        &self,
        claims: &[ClaimRef],
    ) -> Result<dra_v1beta1::NodePrepareResourcesResponse> {
        let req = dra_v1beta1::NodePrepareResourcesRequest {
            claims: claims.iter().map(v1beta1_claim).collect(),
        };
        Ok(self
            .v1beta1()
            .node_prepare_resources(req)
            .await?
            .into_inner())
    }

    /// `NodeUnprepareResources` (v1beta1) for these claims.
    pub async fn unprepare_v1beta1(
        &self,
        claims: &[ClaimRef],
    ) -> Result<dra_v1beta1::NodeUnprepareResourcesResponse> {
        let req = dra_v1beta1::NodeUnprepareResourcesRequest {
            claims: claims.iter().map(v1beta1_claim).collect(),
        };
        Ok(self
            .v1beta1()
            .node_unprepare_resources(req)
            .await?
            .into_inner())
    }
}

fn v1_claim(c: &ClaimRef) -> dra_v1::Claim {
    dra_v1::Claim {
        namespace: c.namespace.clone(),
        uid: c.uid.clone(),
        name: c.name.clone(),
    }
}

fn v1beta1_claim(c: &ClaimRef) -> dra_v1beta1::Claim {
    dra_v1beta1::Claim {
        namespace: c.namespace.clone(),
        uid: c.uid.clone(),
        name: c.name.clone(),
    }
}
