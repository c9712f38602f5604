//! The runtime's side of the NRI protocol, for testing plugins without a container runtime.
//!
//! [`FakeRuntime`] speaks the same wire protocol as containerd over any unix stream (a socketpair,
//! or a listener the plugin connects to): it accepts the registration, configures the plugin and
//! delivers events, one call at a time.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> dranet_nri::Result<()> {
//! use dranet_nri::{
//!     Container, ContainerAdjustment, HandlerError, LinuxDevice, NriPlugin, PodSandbox, RunnerBuilder,
//! };
//! use dranet_nri::fake::FakeRuntime;
//!
//! struct Injector;
//! impl NriPlugin for Injector {
//!     async fn create_container(&self, _: &PodSandbox, _: &Container) -> Result<ContainerAdjustment, HandlerError> {
//!         let mut adj = ContainerAdjustment::new();
//!         adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?;
//!         Ok(adj)
//!     }
//! }
//!
//! let (ours, theirs) = tokio::net::UnixStream::pair()?;
//! let runner = RunnerBuilder::new().name("inj").index(10).from_env(false).connection(ours).build(Injector)?;
//! tokio::spawn(runner.run());
//! let mut rt = FakeRuntime::new(theirs);
//! assert_eq!(rt.expect_registration().await?, ("inj".to_string(), "10".to_string()));
//! rt.configure("fake", "0").await?;
//! let adj = rt.create_container(&PodSandbox::default(), &Container::default()).await?;
//! assert_eq!(adj.devices()[0].major, 231);
//! # Ok(())
//! # }
//! ```

use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::adjust::ContainerAdjustment;
use crate::error::{Error, Result};
use crate::events::{Event, EventMask};
use crate::mux::{Channel, Demux, frame_message};
use crate::proto::nri as pb;
use crate::service::{PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::ttrpc::{Message, MessageType, Request, Response};
use crate::types::{Container, PodSandbox};

/// A minimal NRI runtime: drives one plugin connection.
#[derive(Debug)]
pub struct FakeRuntime {
    stream: UnixStream,
    demux: Demux,
    next_stream: u32,
    buf: Vec<u8>,
}

impl FakeRuntime {
    /// Drives the plugin at the other end of `stream`.
    pub fn new(stream: UnixStream) -> Self {
        FakeRuntime {
            stream,
            demux: Demux::new(),
            next_stream: 1,
            buf: vec![0; 64 * 1024],
        }
    }

    /// Waits for a plugin to connect to `listener`.
    pub async fn accept(listener: &UnixListener) -> Result<Self> {
        let (stream, _) = listener.accept().await?;
        Ok(Self::new(stream))
    }

    /// Reads the next whole message from the plugin.
    async fn recv(&mut self) -> Result<(Channel, Message)> {
        loop {
            if let Some(m) = self.demux.next_message()? {
                return Ok(m);
            }
            let n = self.stream.read(&mut self.buf).await?;
            if n == 0 {
                self.demux.finish()?;
                return Err(Error::Closed);
            }
            self.demux.push(&self.buf[..n]);
        }
    }

    /// Length (header included) of the largest mux frame the plugin has sent.
    pub fn largest_frame(&self) -> usize {
        self.demux.largest_frame()
    }

    /// Writes raw bytes to the plugin (for protocol-violation tests).
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Waits until the plugin closes the connection; messages still arriving are discarded.
    pub async fn expect_closed(&mut self) -> Result<()> {
        loop {
            match self.stream.read(&mut self.buf).await {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                // A reset is the plugin closing too.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Accepts the plugin's RegisterPlugin call and returns its (name, index).
    pub async fn expect_registration(&mut self) -> Result<(String, String)> {
        let (channel, msg) = self.recv().await?;
        if channel != Channel::Runtime || msg.kind != MessageType::Request {
            return Err(Error::UnexpectedMessage {
                what: format!(
                    "{:?} on {channel:?} while waiting for RegisterPlugin",
                    msg.kind
                ),
            });
        }
        let req = Request::decode(&msg.body)?;
        if req.service != RUNTIME_SERVICE || req.method != "RegisterPlugin" {
            return Err(Error::UnexpectedMessage {
                what: format!(
                    "call {}/{} instead of RegisterPlugin",
                    req.service, req.method
                ),
            });
        }
        let r = pb::RegisterPluginRequest::decode(req.payload.as_slice()).map_err(|source| {
            Error::Decode {
                what: "RegisterPluginRequest",
                source,
            }
        })?;
        self.answer(msg.stream_id, Response::Ok(pb::Empty {}.encode_to_vec()))
            .await?;
        Ok((r.plugin_name, r.plugin_idx))
    }

    async fn answer(&mut self, stream_id: u32, resp: Response) -> Result<()> {
        let body = resp.encode_to_vec();
        self.send(Channel::Runtime, stream_id, MessageType::Response, body)
            .await
    }

    /// Frames one message of `kind` on `channel` and writes it.
    async fn send(
        &mut self,
        channel: Channel,
        stream_id: u32,
        kind: MessageType,
        body: Vec<u8>,
    ) -> Result<()> {
        let out = frame_message(channel, stream_id, kind, body)?;
        self.write_raw(&out).await
    }

    /// Sends a plugin-service request without waiting for its answer (as a runtime under load
    /// does); returns its stream id. Read answers with [`Self::recv_answer`].
    pub async fn send_request(&mut self, method: &str, payload: Vec<u8>) -> Result<u32> {
        let stream_id = self.next_stream;
        self.next_stream += 2;
        let req = Request {
            service: PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano: 2_000_000_000,
        };
        self.send(
            Channel::Plugin,
            stream_id,
            MessageType::Request,
            req.encode_to_vec(),
        )
        .await?;
        Ok(stream_id)
    }

    /// The next answer of the plugin: its stream id and whether it succeeded.
    pub async fn recv_answer(&mut self) -> Result<(u32, bool)> {
        let (channel, m) = self.recv().await?;
        if channel != Channel::Plugin || m.kind != MessageType::Response {
            return Err(Error::UnexpectedMessage {
                what: format!("{:?} on {channel:?} while waiting for answers", m.kind),
            });
        }
        Ok((
            m.stream_id,
            matches!(Response::decode(&m.body)?, Response::Ok(_)),
        ))
    }

    /// Calls a plugin-service method with an encoded request; returns the encoded answer.
    pub async fn call(&mut self, method: &str, payload: Vec<u8>) -> Result<Vec<u8>> {
        let stream_id = self.send_request(method, payload).await?;
        // One call at a time: the next message must be this call's answer.
        let (channel, m) = self.recv().await?;
        if channel != Channel::Plugin || m.kind != MessageType::Response || m.stream_id != stream_id
        {
            return Err(Error::UnexpectedMessage {
                what: format!(
                    "{:?} on {channel:?} (stream {}) while waiting for the answer to {method}",
                    m.kind, m.stream_id
                ),
            });
        }
        match Response::decode(&m.body)? {
            Response::Ok(p) => Ok(p),
            Response::Err { code, message } => Err(Error::Status {
                method: "plugin call",
                code,
                message,
            }),
        }
    }

    /// Configures the plugin; returns the events it subscribed to.
    pub async fn configure(
        &mut self,
        runtime_name: &str,
        runtime_version: &str,
    ) -> Result<EventMask> {
        let req = pb::ConfigureRequest {
            runtime_name: runtime_name.into(),
            runtime_version: runtime_version.into(),
            ..Default::default()
        };
        let body = self.call("Configure", req.encode_to_vec()).await?;
        let r = pb::ConfigureResponse::decode(body.as_slice()).map_err(|source| Error::Decode {
            what: "ConfigureResponse",
            source,
        })?;
        // The mask travels as int32; reinterpreting its bits is the intent.
        Ok(EventMask::from_bits(r.events as u32))
    }

    /// Synchronizes the plugin, split into pages of at most `page` pods and `page` containers.
    pub async fn synchronize(
        &mut self,
        pods: &[PodSandbox],
        containers: &[Container],
        page: usize,
    ) -> Result<()> {
        let page = page.max(1);
        let mut pods = pods.chunks(page);
        let mut ctrs = containers.chunks(page);
        loop {
            let (p, c) = (pods.next(), ctrs.next());
            let more = pods.len() > 0 || ctrs.len() > 0;
            let req = pb::SynchronizeRequest {
                pods: p.unwrap_or_default().iter().map(Into::into).collect(),
                containers: c.unwrap_or_default().iter().map(Into::into).collect(),
                more,
            };
            let body = self.call("Synchronize", req.encode_to_vec()).await?;
            let r = pb::SynchronizeResponse::decode(body.as_slice()).map_err(|source| {
                Error::Decode {
                    what: "SynchronizeResponse",
                    source,
                }
            })?;
            if r.more != more {
                return Err(Error::UnexpectedMessage {
                    what: format!(
                        "SynchronizeResponse more={} for a request with more={more}",
                        r.more
                    ),
                });
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Delivers a pod or container event through `StateChange`, as NRI ≤ v0.11 runtimes
    /// (containerd 1.7) do.
    pub async fn state_change(
        &mut self,
        event: Event,
        pod: &PodSandbox,
        container: Option<&Container>,
    ) -> Result<()> {
        let req = pb::StateChangeEvent {
            event: event as i32,
            pod: Some(pod.into()),
            container: container.map(Into::into),
        };
        self.call("StateChange", req.encode_to_vec())
            .await
            .map(drop)
    }

    /// Delivers a pod event through its dedicated method, as NRI v0.12 runtimes do.
    ///
    /// To send one without waiting for the answer, use [`Self::send_request`] with
    /// [`pod_request`].
    pub async fn pod_event(&mut self, event: Event, pod: &PodSandbox) -> Result<()> {
        let req = pb::PodRequest {
            pod: Some(pod.into()),
        };
        self.call(event.name(), req.encode_to_vec()).await.map(drop)
    }

    /// Asks the plugin for its adjustment of a container being created.
    pub async fn create_container(
        &mut self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<ContainerAdjustment> {
        let req = pb::ContainerRequest {
            pod: Some(pod.into()),
            container: Some(container.into()),
        };
        let body = self.call("CreateContainer", req.encode_to_vec()).await?;
        let r = pb::CreateContainerResponse::decode(body.as_slice()).map_err(|source| {
            Error::Decode {
                what: "CreateContainerResponse",
                source,
            }
        })?;
        r.adjust
            .map(ContainerAdjustment::try_from)
            .unwrap_or_else(|| Ok(ContainerAdjustment::new()))
    }

    /// Tells the plugin the runtime is shutting it down.
    pub async fn shutdown(&mut self) -> Result<()> {
        self.call("Shutdown", pb::Empty {}.encode_to_vec())
            .await
            .map(drop)
    }
}

/// The encoded request of a dedicated pod-event call (`RunPodSandbox`, `StopPodSandbox`, ...).
pub fn pod_request(pod: &PodSandbox) -> Vec<u8> {
    pb::PodRequest {
        pod: Some(pod.into()),
    }
    .encode_to_vec()
}
