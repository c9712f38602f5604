//! Network namespaces by file descriptor, and rtnetlink sockets that live in one.
//!
//! A netlink socket belongs to the network namespace of the thread that created it, for its whole
//! life. So work in a pod's namespace never switches the daemon's own threads: a short-lived
//! thread enters the namespace, opens the socket (or does a sysctl write) and ends; the socket is
//! then used from any async task.

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rtnetlink::packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload,
};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};

use crate::{Error, Result};

/// A network namespace, held open by a file descriptor (so it cannot go away while held, and a
/// path that is later reused for another namespace does not fool us).
#[derive(Debug)]
pub struct Netns {
    fd: OwnedFd,
    path: PathBuf,
}

/// The identity of a namespace: device and inode of its nsfs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetnsId {
    /// `st_dev` of the nsfs file.
    pub dev: u64,
    /// `st_ino` of the nsfs file.
    pub ino: u64,
}

impl Netns {
    /// The namespace of the calling thread (for the daemon: its own, opened at start). Read from
    /// `/proc/thread-self`, which works where `/proc/1/ns/net` is not readable.
    pub fn current() -> Result<Self> {
        Self::open("/proc/thread-self/ns/net")
    }

    /// Opens the namespace at `path` (`/var/run/netns/<name>`, `/proc/<pid>/ns/net`, a CRI
    /// sandbox's netns path), checking that it is one.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::Netns {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let ns = Self {
            fd: file.into(),
            path: path.to_path_buf(),
        };
        // nsfs files have no type we can check cheaply besides setns itself; an ordinary file is
        // refused by the first setns with EINVAL, which `enter` reports with this path.
        Ok(ns)
    }

    /// Another handle on the same namespace (its own descriptor).
    pub fn try_clone(&self) -> Result<Self> {
        let fd = self.fd.try_clone().map_err(|e| Error::Netns {
            path: self.path.clone(),
            reason: format!("duplicating its descriptor: {e}"),
        })?;
        Ok(Self {
            fd,
            path: self.path.clone(),
        })
    }

    /// The path it was opened from (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace's identity.
    pub fn id(&self) -> Result<NetnsId> {
        let st = nix::sys::stat::fstat(&self.fd).map_err(|e| Error::Netns {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(NetnsId {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns its result. For
    /// what the kernel ties to the caller's namespace at the moment of the call: opening sockets,
    /// writing `/proc/sys/net`.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&self.fd, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                    Error::Netns {
                        path: self.path.clone(),
                        reason: format!("entering it: {e}"),
                    }
                })?;
                Ok(f())
            })
            .join()
            .map_err(|_| Error::Netns {
                path: self.path.clone(),
                reason: "the thread working in it panicked".into(),
            })?
        })
    }

    /// An rtnetlink connection whose socket lives in this namespace. Its I/O runs on the current
    /// tokio runtime (it must be called inside one).
    pub async fn rtnl(&self) -> Result<Rtnl> {
        let rt = tokio::runtime::Handle::try_current().map_err(|e| Error::Netns {
            path: self.path.clone(),
            reason: format!("rtnl() needs a tokio runtime: {e}"),
        })?;
        let (conn, handle, _) = self
            .run(|| {
                let _entered = rt.enter();
                rtnetlink::new_connection()
            })?
            .map_err(|e| Error::Netns {
                path: self.path.clone(),
                reason: format!("netlink socket: {e}"),
            })?;
        let task = tokio::spawn(conn);
        Ok(Rtnl {
            handle,
            task,
            ns: self.path.clone(),
        })
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An rtnetlink socket in one namespace, with the requests dranet needs. Dropping it closes the
/// socket.
#[derive(Debug)]
pub struct Rtnl {
    handle: rtnetlink::Handle,
    task: tokio::task::JoinHandle<()>,
    ns: PathBuf,
}

impl Drop for Rtnl {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Rtnl {
    /// The namespace path the socket lives in.
    pub fn netns_path(&self) -> &Path {
        &self.ns
    }

    /// Sends one request with `flags` (plus `NLM_F_REQUEST`, and `NLM_F_ACK` unless it is a dump)
    /// and collects the answers; a kernel error comes back as an [`io::Error`] with its errno.
    pub async fn request(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, io::Error> {
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = NLM_F_REQUEST | flags;
        if flags & NLM_F_DUMP != NLM_F_DUMP {
            req.header.flags |= NLM_F_ACK;
        }
        let mut handle = self.handle.clone();
        let mut stream = handle
            .request(req)
            .map_err(|e| io::Error::other(format!("netlink request: {e}")))?;
        let mut out = Vec::new();
        loop {
            let next = futures::StreamExt::next(&mut stream).await;
            let Some(msg) = next else { break };
            match msg.payload {
                NetlinkPayload::InnerMessage(m) => out.push(m),
                NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                NetlinkPayload::Error(_) | NetlinkPayload::Done(_) => break,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Dumps with a request message (`RTM_GET*`).
    pub async fn dump(
        &self,
        msg: RouteNetlinkMessage,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, io::Error> {
        self.request(msg, NLM_F_DUMP).await
    }

    /// The raw rtnetlink handle, for requests this type has no helper for.
    pub fn handle(&self) -> &rtnetlink::Handle {
        &self.handle
    }

    /// All links of the namespace.
    pub async fn links(&self) -> std::result::Result<Vec<LinkMessage>, io::Error> {
        let msgs = self
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            .await?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .collect())
    }

    /// The link named `name`, if there is one.
    pub async fn link_by_name(
        &self,
        name: &str,
    ) -> std::result::Result<Option<LinkMessage>, io::Error> {
        Ok(self
            .links()
            .await?
            .into_iter()
            .find(|l| link_name(l) == Some(name)))
    }

    /// The addresses of link `index` (its local address where the kernel gives one, as for a
    /// point-to-point link), every scope.
    pub async fn addresses(&self, index: u32) -> std::result::Result<Vec<IpAddr>, io::Error> {
        let msgs = self
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
            .await?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => {
                    let of = |local: bool| {
                        a.attributes.iter().find_map(|x| match x {
                            AddressAttribute::Local(ip) if local => Some(*ip),
                            AddressAttribute::Address(ip) if !local => Some(*ip),
                            _ => None,
                        })
                    };
                    of(true).or_else(|| of(false))
                }
                _ => None,
            })
            .collect())
    }

    /// The link with index `index`, if there is one.
    pub async fn link_by_index(
        &self,
        index: u32,
    ) -> std::result::Result<Option<LinkMessage>, io::Error> {
        Ok(self
            .links()
            .await?
            .into_iter()
            .find(|l| l.header.index == index))
    }
}

/// A link's name attribute.
pub fn link_name(l: &LinkMessage) -> Option<&str> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.as_str()),
        _ => None,
    })
}
