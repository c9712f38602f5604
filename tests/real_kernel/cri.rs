//! A CRI client for the calls the kubelet makes to start, exec into and end pods: the messages
//! of `k8s.io/cri-api` `runtime.v1` this test uses, written out with their field numbers (the
//! wire format is all that matters), and a unary tonic client on containerd's socket.

use std::collections::HashMap;
use std::path::Path;

use tonic::transport::Channel;

/// `runtime.v1.NamespaceMode`: POD = 0, CONTAINER = 1.
const CONTAINER: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    #[prost(int32, tag = "1")]
    pub network: i32,
    #[prost(int32, tag = "2")]
    pub pid: i32,
    #[prost(int32, tag = "3")]
    pub ipc: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerSecurityContext {
    #[prost(message, optional, tag = "3")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerConfig {
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxContainerSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    #[prost(string, tag = "11")]
    pub log_path: String,
    #[prost(message, optional, tag = "15")]
    pub linux: Option<LinuxContainerConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `StartContainerRequest`, `RemoveContainerRequest`, `StopPodSandboxRequest` and
/// `RemovePodSandboxRequest`: one string, field 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IdRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSyncRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, repeated, tag = "2")]
    pub cmd: Vec<String>,
    #[prost(int64, tag = "3")]
    pub timeout: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSyncResponse {
    #[prost(bytes = "vec", tag = "1")]
    pub stdout: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub stderr: Vec<u8>,
    #[prost(int32, tag = "3")]
    pub exit_code: i32,
}

/// Every response this client ignores the content of.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// What an exec printed and how it ended.
#[derive(Debug)]
pub struct Exec {
    pub rc: i32,
    /// stdout, then stderr.
    pub out: String,
}

/// A pod as the test started it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    pub sandbox: String,
    pub container: String,
}

/// containerd's RuntimeService.
#[derive(Clone)]
pub struct Cri {
    grpc: tonic::client::Grpc<Channel>,
    logs: String,
}

fn sandbox_config(name: &str, uid: &str, logs: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: format!("{logs}/{name}"),
        annotations: HashMap::new(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("/dranet-guest/pod{uid}"),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(pod_namespaces()),
            }),
        }),
    }
}

/// Network and IPC of the pod, a PID namespace per container (the kubelet's default).
fn pod_namespaces() -> NamespaceOption {
    NamespaceOption {
        network: 0,
        pid: CONTAINER,
        ipc: 0,
    }
}

impl Cri {
    pub async fn connect(socket: &Path, logs: &Path) -> Result<Cri, String> {
        let ch = dranet_kubeletplugin::fake::unix_channel(socket)
            .await
            .map_err(|e| format!("CRI socket {}: {e}", socket.display()))?;
        Ok(Cri {
            grpc: tonic::client::Grpc::new(ch),
            logs: logs.display().to_string(),
        })
    }

    async fn call<Q, R>(&self, method: &'static str, req: Q) -> Result<R, String>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.grpc.clone();
        grpc.ready().await.map_err(|e| format!("{method}: {e}"))?;
        let path = http::uri::PathAndQuery::from_static(method);
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        grpc.unary(tonic::Request::new(req), path, codec)
            .await
            .map(|r| r.into_inner())
            .map_err(|s| format!("{method}: {:?}: {}", s.code(), s.message()))
    }

    /// RunPodSandbox: the sandbox ID, or the runtime's error (an NRI plugin's refusal included).
    pub async fn run_pod(&self, name: &str, uid: &str) -> Result<String, String> {
        let r: RunPodSandboxResponse = self
            .call(
                "/runtime.v1.RuntimeService/RunPodSandbox",
                RunPodSandboxRequest {
                    config: Some(sandbox_config(name, uid, &self.logs)),
                },
            )
            .await?;
        Ok(r.pod_sandbox_id)
    }

    /// RunPodSandbox, then one container running `sleep`, started.
    pub async fn start_pod(&self, name: &str, uid: &str, image: &str) -> Result<Pod, String> {
        let _ = std::fs::create_dir_all(format!("{}/{name}", self.logs));
        let sandbox = self.run_pod(name, uid).await?;
        let created: CreateContainerResponse = self
            .call(
                "/runtime.v1.RuntimeService/CreateContainer",
                CreateContainerRequest {
                    pod_sandbox_id: sandbox.clone(),
                    config: Some(ContainerConfig {
                        metadata: Some(ContainerMetadata { name: "app".into() }),
                        image: Some(ImageSpec {
                            image: image.into(),
                        }),
                        command: vec!["/bin/sleep".into(), "3600".into()],
                        log_path: "app.log".into(),
                        linux: Some(LinuxContainerConfig {
                            security_context: Some(LinuxContainerSecurityContext {
                                namespace_options: Some(pod_namespaces()),
                            }),
                        }),
                    }),
                    sandbox_config: Some(sandbox_config(name, uid, &self.logs)),
                },
            )
            .await?;
        let _: Empty = self
            .call(
                "/runtime.v1.RuntimeService/StartContainer",
                IdRequest {
                    id: created.container_id.clone(),
                },
            )
            .await?;
        Ok(Pod {
            name: name.into(),
            sandbox,
            container: created.container_id,
        })
    }

    /// ExecSync of `cmd` in the pod's container, with a time limit of `timeout_s`.
    pub async fn exec(&self, pod: &Pod, cmd: &[&str], timeout_s: i64) -> Result<Exec, String> {
        let r: ExecSyncResponse = self
            .call(
                "/runtime.v1.RuntimeService/ExecSync",
                ExecSyncRequest {
                    container_id: pod.container.clone(),
                    cmd: cmd.iter().map(|s| s.to_string()).collect(),
                    timeout: timeout_s,
                },
            )
            .await?;
        let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
        out.push_str(&String::from_utf8_lossy(&r.stderr));
        Ok(Exec {
            rc: r.exit_code,
            out,
        })
    }

    /// StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox: what the kubelet does
    /// when a pod is deleted.
    pub async fn delete_pod(&self, pod: &Pod) -> Result<(), String> {
        let _: Empty = self
            .call(
                "/runtime.v1.RuntimeService/StopContainer",
                StopContainerRequest {
                    container_id: pod.container.clone(),
                    timeout: 1,
                },
            )
            .await?;
        let _: Empty = self
            .call(
                "/runtime.v1.RuntimeService/RemoveContainer",
                IdRequest {
                    id: pod.container.clone(),
                },
            )
            .await?;
        self.delete_sandbox(&pod.sandbox).await
    }

    /// StopPodSandbox and RemovePodSandbox.
    pub async fn delete_sandbox(&self, sandbox: &str) -> Result<(), String> {
        let _: Empty = self
            .call(
                "/runtime.v1.RuntimeService/StopPodSandbox",
                IdRequest { id: sandbox.into() },
            )
            .await?;
        let _: Empty = self
            .call(
                "/runtime.v1.RuntimeService/RemovePodSandbox",
                IdRequest { id: sandbox.into() },
            )
            .await?;
        Ok(())
    }
}
