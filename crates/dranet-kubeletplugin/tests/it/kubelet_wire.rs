//! The registration socket answers the bytes the real kubelet sends.
//!
//! `data/kubelet-1.34.9-getinfo.h2` was recorded from a stock v1.34.9 kubelet dialling
//! `/var/lib/kubelet/plugins_registry/rec.example.com-reg.sock`: the HTTP/2 preface, SETTINGS,
//! the SETTINGS ack, the HEADERS of `GetInfo` with grpc-go's percent-encoded socket path as
//! `:authority` (Huffman-coded, as grpc-go's HPACK encoder writes it) and the empty request body.
//! An h2 server that is not prepared for that authority resets the stream with PROTOCOL_ERROR.

use std::time::Duration;

use crate::common::{DRIVER, Harness};
use dranet_kubeletplugin::proto::pluginregistration::PluginInfo;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const RECORDED: &[u8] = include_bytes!("data/kubelet-1.34.9-getinfo.h2");

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

async fn read_frame(conn: &mut UnixStream) -> std::io::Result<Frame> {
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).await?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload).await?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// Sends the recorded kubelet bytes and returns the response message and the trailers.
async fn replay(socket: &std::path::Path) -> (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>) {
    let mut conn = UnixStream::connect(socket).await.unwrap();
    conn.write_all(RECORDED).await.unwrap();
    let mut decoder = loona_hpack::Decoder::new();
    let mut body = Vec::new();
    let mut headers = Vec::new();
    let read = async {
        loop {
            let f = read_frame(&mut conn)
                .await
                .expect("server closed the connection");
            match f.kind {
                // RST_STREAM on our stream is what an unrepaired h2 sends.
                0x3 if f.stream == 1 => {
                    panic!("stream reset by the server, error code {:?}", &f.payload)
                }
                0x1 if f.stream == 1 => {
                    headers.extend(decoder.decode(&f.payload).unwrap());
                    if f.flags & 0x1 != 0 {
                        break;
                    }
                }
                0x0 if f.stream == 1 => {
                    body.extend_from_slice(&f.payload);
                    if f.flags & 0x1 != 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no answer to the kubelet's GetInfo within 10 s");
    (body, headers)
}

#[tokio::test]
async fn getinfo_as_the_real_kubelet_sends_it_is_answered() {
    let h = Harness::start().await;
    let (body, headers) = replay(h.plugin().registration_socket()).await;
    let status = headers
        .iter()
        .find(|(n, _)| n == b"grpc-status")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
    assert_eq!(status.as_deref(), Some("0"), "headers: {headers:?}");
    // A gRPC message: 1 byte compression flag, 4 bytes length, then the protobuf.
    assert!(body.len() >= 5, "short body {body:?}");
    let info = PluginInfo::decode(&body[5..]).unwrap();
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(
        info.endpoint,
        h.plugin().dra_socket().to_string_lossy().as_ref()
    );
}

#[tokio::test]
async fn the_fake_kubelet_sends_the_authority_grpc_go_sends() {
    let recorded = {
        // The HEADERS frame starts after the preface (24), SETTINGS (9) and SETTINGS ack (9).
        let len = usize::from(RECORDED[42]) << 16
            | usize::from(RECORDED[43]) << 8
            | usize::from(RECORDED[44]);
        let fields = loona_hpack::Decoder::new()
            .decode(&RECORDED[51..51 + len])
            .unwrap();
        fields
            .into_iter()
            .find(|(n, _)| n == b":authority")
            .map(|(_, v)| v)
            .unwrap()
    };
    let ours = dranet_kubeletplugin::fake::grpc_go_authority(std::path::Path::new(
        "/var/lib/kubelet/plugins_registry/rec.example.com-reg.sock",
    ));
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&recorded)
    );
}

#[tokio::test]
async fn oversized_header_blocks_close_the_connection() {
    let h = Harness::start().await;
    let mut conn = UnixStream::connect(h.plugin().registration_socket())
        .await
        .unwrap();
    conn.write_all(&RECORDED[..42]).await.unwrap();
    // A HEADERS frame without END_HEADERS, then CONTINUATIONs past the 64 KiB block limit.
    let send = |kind: u8, flags: u8, len: usize| {
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        f.resize(9 + len, 0x20);
        f
    };
    let mut bytes = send(0x1, 0, 16_000);
    for _ in 0..5 {
        bytes.extend(send(0x9, 0, 16_000));
    }
    // The server may close before it has read everything.
    let _ = conn.write_all(&bytes).await;
    let closed = async {
        loop {
            match read_frame(&mut conn).await {
                Err(_) => break,
                Ok(f) if f.kind == 0x1 && f.stream == 1 => panic!("oversized block was served"),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("connection with an oversized header block stayed open");
}
