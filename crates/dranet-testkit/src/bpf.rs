//! A minimal eBPF program (`r0 = 0; exit`, SCHED_CLS, GPL) loaded by the test itself, and its
//! attachment to a link as a TC filter on the clsact ingress hook (rtnetlink) or on the TCX
//! ingress hook (bpf syscall). Root only. Shared by the discovery and driver tests.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use futures::StreamExt;
use rtnetlink::packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload,
};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::tc::{
    TcAttribute, TcBpfFlags, TcFilterBpfOption, TcHandle, TcMessage, TcOption,
};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;

#[repr(C, align(8))]
struct Attr([u8; 128]);

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, 8-aligned 128-byte buffer, at least the kernel's `union
    // bpf_attr` for these commands; the pointers in it point to buffers alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut Attr, 128u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Loads `r0 = 0; exit` as a SCHED_CLS program named `name` (at most 15 bytes).
pub fn load_pass_program(name: &str) -> OwnedFd {
    // BPF_ALU64 | BPF_MOV | BPF_K, dst r0, imm 0; then BPF_JMP | BPF_EXIT.
    let insns: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let license = b"GPL\0";
    let mut a = Attr([0; 128]);
    a.0[0..4].copy_from_slice(&BPF_PROG_TYPE_SCHED_CLS.to_ne_bytes());
    a.0[4..8].copy_from_slice(&2u32.to_ne_bytes());
    a.0[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    a.0[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    a.0[48..48 + name.len()].copy_from_slice(name.as_bytes());
    let fd = bpf(BPF_PROG_LOAD, &mut a).expect("BPF_PROG_LOAD");
    // SAFETY: bpf(2) just returned this new descriptor.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

async fn send(handle: &rtnetlink::Handle, msg: RouteNetlinkMessage, what: &str) {
    let mut req = NetlinkMessage::from(msg);
    req.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let mut answers = handle.clone().request(req).expect(what);
    while let Some(m) = answers.next().await {
        if let NetlinkPayload::Error(e) = m.payload {
            assert!(e.code.is_none(), "{what}: {e:?}");
        }
    }
}

/// Adds a clsact qdisc to link `ifindex` and `prog` as a direct-action `bpf` filter named `name`
/// on its ingress hook, in the namespace of `handle`'s socket.
pub async fn attach_tc_ingress(
    handle: &rtnetlink::Handle,
    ifindex: u32,
    prog: &OwnedFd,
    name: &str,
) {
    let mut q = TcMessage::default();
    q.header.index = ifindex as i32;
    q.header.parent = TcHandle::CLSACT;
    q.header.handle = TcHandle {
        major: 0xffff,
        minor: 0,
    };
    q.attributes.push(TcAttribute::Kind("clsact".into()));
    send(
        handle,
        RouteNetlinkMessage::NewQueueDiscipline(q),
        "add clsact",
    )
    .await;

    let mut f = TcMessage::default();
    f.header.index = ifindex as i32;
    f.header.parent = TcHandle {
        major: 0xffff,
        minor: TcHandle::MIN_INGRESS,
    };
    // Priority 1, protocol ETH_P_ALL in network order.
    f.header.info = (1 << 16) | u32::from(0x0003u16.to_be());
    f.attributes.push(TcAttribute::Kind("bpf".into()));
    f.attributes.push(TcAttribute::Options(vec![
        TcOption::Bpf(TcFilterBpfOption::ProgFd(prog.as_raw_fd() as u32)),
        TcOption::Bpf(TcFilterBpfOption::ProgName(name.into())),
        TcOption::Bpf(TcFilterBpfOption::Flags(TcBpfFlags::DirectAction)),
    ]));
    send(
        handle,
        RouteNetlinkMessage::NewTrafficFilter(f),
        "add bpf filter",
    )
    .await;
}

/// Attaches `prog` to link `ifindex`'s TCX ingress hook, in the calling thread's namespace.
pub fn attach_tcx_ingress(ifindex: u32, prog: &OwnedFd) {
    let mut a = Attr([0; 128]);
    a.0[0..4].copy_from_slice(&ifindex.to_ne_bytes());
    a.0[4..8].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    a.0[8..12].copy_from_slice(&BPF_TCX_INGRESS.to_ne_bytes());
    bpf(BPF_PROG_ATTACH, &mut a).expect("BPF_PROG_ATTACH tcx ingress");
}
