//! The eBPF programs attached to a link's traffic-control hooks, and their removal (feature
//! `netlink`).
//!
//! Two ways to attach a program to a link's ingress or egress, both in the link's namespace:
//! - a TC filter of kind `bpf` on the `clsact` qdisc's ingress or egress hook, seen through
//!   rtnetlink (`RTM_GETTFILTER`, the `rtnetlink` crate);
//! - TCX (kernel 6.6+), seen through the `bpf` syscall: `BPF_PROG_QUERY` for `BPF_TCX_INGRESS`
//!   and `BPF_TCX_EGRESS`, each program's name by `BPF_OBJ_GET_INFO_BY_FD`. A kernel without
//!   TCX refuses the query with `EINVAL`: it has no TCX programs.
//!
//! Discovery publishes what it finds (`dra.net/ebpf`, `tcFilterNames`, `tcxProgramNames`); the
//! driver detaches them in a pod that asked (`disableEbpfPrograms`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use futures::TryStreamExt;
use rtnetlink::packet_route::tc::{TcAttribute, TcFilterBpfOption, TcHandle, TcMessage, TcOption};

/// A TC filter of kind `bpf` on a link's clsact hook.
#[derive(Debug, Clone)]
pub struct TcBpfFilter {
    /// The filter as the kernel dumped it: its header (link, parent hook, handle, priority and
    /// protocol) names it for deletion.
    pub message: TcMessage,
    /// The program's name (`TCA_BPF_NAME`), empty when it has none.
    pub name: String,
}

impl TcBpfFilter {
    /// The request that deletes this filter (`RTM_DELTFILTER`): its header, kind and chain.
    pub fn delete_message(&self) -> TcMessage {
        let mut m = TcMessage::default();
        m.header = self.message.header.clone();
        m.attributes = self
            .message
            .attributes
            .iter()
            .filter(|a| matches!(a, TcAttribute::Kind(_) | TcAttribute::Chain(_)))
            .cloned()
            .collect();
        m
    }
}

/// The `bpf` filters of both clsact hooks of link `ifindex`, in the namespace of `handle`'s
/// socket. A link without a clsact qdisc has none; a link gone since it was listed has none.
pub async fn tc_bpf_filters(
    handle: &rtnetlink::Handle,
    ifindex: u32,
) -> Result<Vec<TcBpfFilter>, rtnetlink::Error> {
    let index = i32::try_from(ifindex).unwrap_or(i32::MAX);
    let mut out = Vec::new();
    for hook in [TcHandle::MIN_INGRESS, TcHandle::MIN_EGRESS] {
        let mut req = handle.clone().traffic_filter(index).get();
        req = if hook == TcHandle::MIN_INGRESS {
            req.ingress()
        } else {
            req.egress()
        };
        let msgs: Vec<TcMessage> = match req.execute().try_collect().await {
            Ok(m) => m,
            Err(rtnetlink::Error::NetlinkError(e))
                if e.raw_code().abs() == libc::ENODEV || e.raw_code().abs() == libc::EINVAL =>
            {
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        out.extend(msgs.into_iter().filter_map(bpf_filter));
    }
    Ok(out)
}

/// The filter in `m` when it is a `bpf` one. The kernel dumps each priority's classifier once
/// without a handle (its chain head) before its filters: only the filters count.
fn bpf_filter(m: TcMessage) -> Option<TcBpfFilter> {
    let is_bpf = m
        .attributes
        .iter()
        .any(|a| matches!(a, TcAttribute::Kind(k) if k == "bpf"));
    if !is_bpf || m.header.handle == TcHandle::UNSPEC {
        return None;
    }
    let name = m
        .attributes
        .iter()
        .filter_map(|a| match a {
            TcAttribute::Options(o) => Some(o),
            _ => None,
        })
        .flatten()
        .find_map(|o| match o {
            TcOption::Bpf(TcFilterBpfOption::ProgName(n)) => Some(n.clone()),
            _ => None,
        })
        .unwrap_or_default();
    Some(TcBpfFilter { message: m, name })
}

/// A TCX hook of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcxHook {
    /// `BPF_TCX_INGRESS`.
    Ingress,
    /// `BPF_TCX_EGRESS`.
    Egress,
}

impl TcxHook {
    fn attach_type(self) -> u32 {
        match self {
            TcxHook::Ingress => BPF_TCX_INGRESS,
            TcxHook::Egress => BPF_TCX_EGRESS,
        }
    }
}

/// A program attached to a link's TCX hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcxProgram {
    /// The hook.
    pub hook: TcxHook,
    /// The program's id.
    pub id: u32,
    /// The id of the BPF link holding it, when it was attached through one (`BPF_LINK_CREATE`);
    /// `None` for one attached with `BPF_PROG_ATTACH`.
    pub link_id: Option<u32>,
    /// Its name (`bpf_prog_info.name`), empty when it has none or went away while read.
    pub name: String,
}

// The bpf(2) commands and attach types used here (include/uapi/linux/bpf.h).
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_LINK_DETACH: libc::c_long = 34;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;

/// `union bpf_attr`, as the words of the one command's struct; the kernel reads `size` bytes
/// and wants the rest zero.
#[repr(C, align(8))]
#[derive(Default)]
struct Attr([u32; 32]);

impl Attr {
    fn set_u64(&mut self, word: usize, v: u64) {
        self.0[word] = v as u32;
        self.0[word + 1] = (v >> 32) as u32;
    }
}

/// Runs bpf(2) `cmd` on `attr`; the result (an fd or 0), or the kernel's error.
fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, 8-aligned buffer of `size_of::<Attr>()` bytes, as large as the
    // kernel's `union bpf_attr` of every command used here; the pointers set in it point to
    // buffers that outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An fd bpf(2) returned, owned.
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bpf returned an invalid fd"))?;
    // SAFETY: bpf(2) just returned `fd`, a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The programs on both TCX hooks of link `ifindex` in the caller's namespace (the calling
/// thread's). None on a kernel without TCX, or for a link gone since it was listed.
pub fn tcx_programs(ifindex: u32) -> io::Result<Vec<TcxProgram>> {
    let mut out = Vec::new();
    for hook in [TcxHook::Ingress, TcxHook::Egress] {
        let mut cap = 16usize;
        loop {
            let mut ids = vec![0u32; cap];
            let mut links = vec![0u32; cap];
            let mut a = Attr::default();
            a.0[0] = ifindex;
            a.0[1] = hook.attach_type();
            a.set_u64(4, ids.as_mut_ptr() as u64);
            a.0[6] = cap as u32;
            a.set_u64(10, links.as_mut_ptr() as u64);
            match bpf(BPF_PROG_QUERY, &mut a) {
                Ok(_) => {
                    let n = (a.0[6] as usize).min(cap);
                    for i in 0..n {
                        out.push(TcxProgram {
                            hook,
                            id: ids[i],
                            link_id: (links[i] != 0).then_some(links[i]),
                            name: prog_name(ids[i]).unwrap_or_default(),
                        });
                    }
                    break;
                }
                // More programs than room: the kernel said how many.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && (a.0[6] as usize) > cap => {
                    cap = a.0[6] as usize;
                }
                // No TCX in this kernel (an attach type it does not know), or no such link.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENODEV)) => break,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(out)
}

/// A program's fd by id.
fn prog_fd(id: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::default();
    a.0[0] = id;
    owned(bpf(BPF_PROG_GET_FD_BY_ID, &mut a)?)
}

/// `bpf_prog_info.name` of program `id`.
fn prog_name(id: u32) -> io::Result<String> {
    let fd = prog_fd(id)?;
    // struct bpf_prog_info up to and including `name` (at byte 64, 16 bytes).
    let mut info = [0u8; 80];
    let mut a = Attr::default();
    a.0[0] = fd.as_raw_fd() as u32;
    a.0[1] = info.len() as u32;
    a.set_u64(2, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let name = &info[64..80];
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Detaches `p` from link `ifindex` in the caller's namespace (the calling thread's): through its
/// BPF link when it has one (`BPF_LINK_DETACH`), else `BPF_PROG_DETACH`.
pub fn detach_tcx(ifindex: u32, p: &TcxProgram) -> io::Result<()> {
    let mut a = Attr::default();
    match p.link_id {
        Some(link) => {
            a.0[0] = link;
            let fd = owned(bpf(BPF_LINK_GET_FD_BY_ID, &mut a)?)?;
            let mut a = Attr::default();
            a.0[0] = fd.as_raw_fd() as u32;
            bpf(BPF_LINK_DETACH, &mut a)?;
        }
        None => {
            let fd = prog_fd(p.id)?;
            a.0[0] = ifindex;
            a.0[1] = fd.as_raw_fd() as u32;
            a.0[2] = p.hook.attach_type();
            bpf(BPF_PROG_DETACH, &mut a)?;
        }
    }
    Ok(())
}
