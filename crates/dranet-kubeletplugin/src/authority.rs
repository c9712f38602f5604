//! Repairs the HTTP/2 `:authority` header of gRPC clients that send one h2 refuses.
//!
//! The kubelet dials a plugin's registration socket with grpc-go and no explicit authority, so
//! grpc-go sends the socket path, percent-encoded (`%2Fvar%2Flib%2Fkubelet%2F...-reg.sock`), as
//! `:authority`. That is not a valid URI authority; h2 (under tonic and hyper) answers it with
//! `RST_STREAM(PROTOCOL_ERROR)`, and the kubelet never registers the plugin. No h2 option relaxes
//! the check, and a `[patch]` in our workspace would not reach the crates that embed this one.
//!
//! So every accepted connection goes through a small pump in front of the tonic server. Frames
//! from the client are read one by one; header blocks (HEADERS plus CONTINUATION) are decoded with
//! HPACK, keeping the client's dynamic table, an `:authority` that h2 would refuse is replaced, and
//! the block is re-encoded without the dynamic table (every field a literal without indexing), so
//! the server's decoder state never depends on the client's. All other frames, and everything the
//! server sends, pass through unchanged. Every buffer is bounded: a header block over
//! [`MAX_HEADER_BLOCK`] bytes, or decoding to over [`MAX_HEADER_LIST`] bytes, closes the connection.
//!
//! The fake kubelet uses the same pump the other way round, to send exactly what the real
//! kubelet sends.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

/// The client connection preface of HTTP/2 (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_SETTINGS: u8 = 0x4;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// Every HTTP/2 peer accepts frames of this size (the protocol's minimum maximum).
const MAX_OUT_FRAME: usize = 16_384;
/// The HPACK dynamic table size until the server says otherwise (RFC 9113 section 6.5.2).
const DEFAULT_TABLE_SIZE: usize = 4_096;

/// The largest encoded header block (HEADERS and its CONTINUATIONs) accepted from a client.
pub(crate) const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// The largest decoded header list accepted from a client (names and values, plus 32 bytes per
/// field as HPACK counts them).
pub(crate) const MAX_HEADER_LIST: usize = 256 * 1024;
/// Bytes buffered between the pump and the server, per direction.
const PIPE: usize = 64 * 1024;

/// What to do with the `:authority` of requests passing through.
#[derive(Debug, Clone)]
pub(crate) enum Authority {
    /// Replace it with `localhost` when h2 would refuse it (the plugin's servers).
    RepairInvalid,
    /// Replace it with these bytes whatever it is (the fake kubelet, dialling as grpc-go does).
    #[cfg_attr(not(feature = "fake"), allow(dead_code))]
    Set(Vec<u8>),
}

/// Why a connection was closed by the pump.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PumpError {
    #[error("connection I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("client did not start with the HTTP/2 connection preface")]
    Preface,
    #[error("header block of stream {stream} is over {MAX_HEADER_BLOCK} bytes")]
    BlockTooLarge { stream: u32 },
    #[error("header list of stream {stream} decodes to over {MAX_HEADER_LIST} bytes")]
    ListTooLarge { stream: u32 },
    #[error("HPACK decoding of stream {stream}: {reason}")]
    Hpack { stream: u32, reason: String },
    #[error("malformed frame on stream {stream}: {reason}")]
    Frame { stream: u32, reason: &'static str },
}

/// Puts the pump between `client` (the side that sends the preface) and a new in-memory pipe;
/// returns the pipe's other end, to hand to an HTTP/2 server. The pump runs until either side
/// closes.
pub(crate) fn serve_side<C>(client: C, authority: Authority) -> DuplexStream
where
    C: AsyncRead + AsyncWrite + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE);
    tokio::spawn(pump(client, ours, authority));
    theirs
}

/// Puts the pump between a new in-memory pipe and `server`; returns the pipe's other end, to
/// hand to an HTTP/2 client.
#[cfg_attr(not(feature = "fake"), allow(dead_code))]
pub(crate) fn client_side<S>(server: S, authority: Authority) -> DuplexStream
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE);
    tokio::spawn(pump(ours, server, authority));
    theirs
}

/// Moves bytes both ways until one side closes, rewriting the client's header blocks.
pub(crate) async fn pump<C, S>(client: C, server: S, authority: Authority)
where
    C: AsyncRead + AsyncWrite + Send + 'static,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (client_rd, mut client_wr) = tokio::io::split(client);
    let (mut server_rd, server_wr) = tokio::io::split(server);
    // The server's SETTINGS_HEADER_TABLE_SIZE bounds the table the client may use.
    let table = Arc::new(AtomicUsize::new(DEFAULT_TABLE_SIZE));
    let table_seen = Arc::clone(&table);
    let upstream = async move {
        let r = client_to_server(client_rd, server_wr, authority, &table).await;
        if let Err(e) = &r {
            tracing::debug!(error = %e, "HTTP/2 authority pump closed the connection");
        }
    };
    let downstream = async move {
        let _ = server_to_client(&mut server_rd, &mut client_wr, &table_seen).await;
        let _ = client_wr.shutdown().await;
    };
    // Either direction ending ends the connection: the peers see EOF and clean up.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

struct FrameHeader {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHeader {
    fn parse(b: &[u8; FRAME_HEADER]) -> Self {
        Self {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; FRAME_HEADER] {
    let s = stream.to_be_bytes();
    [
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        kind,
        flags,
        s[0],
        s[1],
        s[2],
        s[3],
    ]
}

async fn client_to_server<R, W>(
    mut rd: R,
    mut wr: W,
    authority: Authority,
    table: &AtomicUsize,
) -> Result<(), PumpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    rd.read_exact(&mut preface).await?;
    if &preface != PREFACE {
        return Err(PumpError::Preface);
    }
    wr.write_all(PREFACE).await?;
    let mut decoder = loona_hpack::Decoder::new();
    let mut allowed = DEFAULT_TABLE_SIZE;
    decoder.set_max_allowed_table_size(allowed);
    let mut head = [0u8; FRAME_HEADER];
    loop {
        match rd.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let h = FrameHeader::parse(&head);
        if h.kind != TYPE_HEADERS {
            // Not ours to look at: copy it through without buffering it whole. A CONTINUATION
            // here follows no HEADERS; the server will say so.
            wr.write_all(&head).await?;
            let copied = tokio::io::copy(&mut (&mut rd).take(h.len as u64), &mut wr).await?;
            if copied < h.len as u64 {
                return Ok(());
            }
            wr.flush().await?;
            continue;
        }
        let block = read_header_block(&mut rd, &h).await?;
        let seen = table.load(Ordering::Relaxed);
        if seen != allowed {
            allowed = seen;
            decoder.set_max_allowed_table_size(allowed);
        }
        let fields = decode(&mut decoder, &block, h.stream)?;
        let encoded = encode(&fields, &authority);
        let end_stream = h.flags & FLAG_END_STREAM;
        write_header_frames(&mut wr, &encoded, end_stream, h.stream).await?;
        wr.flush().await?;
    }
}

/// Reads the header block that starts with HEADERS frame `h` (its payload still unread),
/// including any CONTINUATION frames, without padding and priority fields.
async fn read_header_block<R: AsyncRead + Unpin>(
    rd: &mut R,
    h: &FrameHeader,
) -> Result<Vec<u8>, PumpError> {
    let too_large = || PumpError::BlockTooLarge { stream: h.stream };
    if h.len > MAX_HEADER_BLOCK {
        return Err(too_large());
    }
    let mut payload = vec![0u8; h.len];
    rd.read_exact(&mut payload).await?;
    let mut start = 0;
    let mut end = payload.len();
    if h.flags & FLAG_PADDED != 0 {
        let pad = usize::from(*payload.first().ok_or(PumpError::Frame {
            stream: h.stream,
            reason: "PADDED HEADERS frame without a pad length",
        })?);
        start = 1;
        end = end.checked_sub(pad).ok_or(PumpError::Frame {
            stream: h.stream,
            reason: "padding longer than the HEADERS frame",
        })?;
    }
    if h.flags & FLAG_PRIORITY != 0 {
        start += 5;
    }
    if start > end {
        return Err(PumpError::Frame {
            stream: h.stream,
            reason: "HEADERS frame shorter than its padding and priority fields",
        });
    }
    let mut block = payload[start..end].to_vec();
    let mut flags = h.flags;
    let mut head = [0u8; FRAME_HEADER];
    while flags & FLAG_END_HEADERS == 0 {
        rd.read_exact(&mut head).await?;
        let c = FrameHeader::parse(&head);
        if c.kind != TYPE_CONTINUATION || c.stream != h.stream {
            return Err(PumpError::Frame {
                stream: h.stream,
                reason: "header block interrupted by another frame",
            });
        }
        if block.len() + c.len > MAX_HEADER_BLOCK {
            return Err(too_large());
        }
        let at = block.len();
        block.resize(at + c.len, 0);
        rd.read_exact(&mut block[at..]).await?;
        flags = c.flags;
    }
    Ok(block)
}

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn decode(
    decoder: &mut loona_hpack::Decoder<'_>,
    block: &[u8],
    stream: u32,
) -> Result<Fields, PumpError> {
    let mut fields = Vec::new();
    let mut size = 0usize;
    let mut over = false;
    decoder
        .decode_with_cb(block, |name: Cow<'_, [u8]>, value: Cow<'_, [u8]>| {
            // Indexed fields can repeat a large table entry for one byte each: bound the output,
            // and keep decoding only to keep the table in step (the connection closes anyway).
            size += name.len() + value.len() + 32;
            if size > MAX_HEADER_LIST {
                over = true;
            } else {
                fields.push((name.into_owned(), value.into_owned()));
            }
        })
        .map_err(|e| PumpError::Hpack {
            stream,
            reason: e.to_string(),
        })?;
    if over {
        return Err(PumpError::ListTooLarge { stream });
    }
    Ok(fields)
}

/// True when h2 would accept this `:authority`.
fn authority_is_valid(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Encodes `fields` as literals without indexing (RFC 7541 section 6.2.2, new name), so the
/// server's dynamic table stays empty whatever the client's holds.
fn encode(fields: &Fields, authority: &Authority) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|(n, v)| n.len() + v.len() + 4).sum());
    for (name, value) in fields {
        let value: &[u8] = if name.as_slice() == b":authority" {
            match authority {
                Authority::RepairInvalid if !authority_is_valid(value) => {
                    tracing::trace!(
                        authority = %String::from_utf8_lossy(value),
                        "replacing an :authority h2 would refuse"
                    );
                    b"localhost"
                }
                Authority::RepairInvalid => value,
                Authority::Set(v) => v,
            }
        } else {
            value
        };
        out.push(0x00);
        encode_string(&mut out, name);
        encode_string(&mut out, value);
    }
    out
}

/// A string literal without Huffman coding: a 7-bit prefix length, then the bytes.
fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    encode_integer(out, s.len(), 7, 0x00);
    out.extend_from_slice(s);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 section 5.1); `first` holds the bits above
/// the prefix.
fn encode_integer(out: &mut Vec<u8>, mut value: usize, n: u8, first: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128 + 128) as u8);
        value /= 128;
    }
    out.push(value as u8);
}

async fn write_header_frames<W: AsyncWrite + Unpin>(
    wr: &mut W,
    block: &[u8],
    end_stream: u8,
    stream: u32,
) -> std::io::Result<()> {
    let mut chunks = block.chunks(MAX_OUT_FRAME).peekable();
    let mut first = true;
    if block.is_empty() {
        let head = frame_header(0, TYPE_HEADERS, end_stream | FLAG_END_HEADERS, stream);
        return wr.write_all(&head).await;
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let (kind, mut flags) = if first {
            (TYPE_HEADERS, end_stream)
        } else {
            (TYPE_CONTINUATION, 0)
        };
        if last {
            flags |= FLAG_END_HEADERS;
        }
        wr.write_all(&frame_header(chunk.len(), kind, flags, stream))
            .await?;
        wr.write_all(chunk).await?;
        first = false;
    }
    Ok(())
}

/// Copies the server's bytes to the client, noting the HPACK table size its SETTINGS allow.
async fn server_to_client<R, W>(rd: &mut R, wr: &mut W, table: &AtomicUsize) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut head = [0u8; FRAME_HEADER];
    loop {
        match rd.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let h = FrameHeader::parse(&head);
        wr.write_all(&head).await?;
        if h.kind == TYPE_SETTINGS && h.flags & FLAG_ACK == 0 && h.len <= MAX_OUT_FRAME {
            let mut payload = vec![0u8; h.len];
            rd.read_exact(&mut payload).await?;
            for setting in payload.chunks_exact(6) {
                if u16::from_be_bytes([setting[0], setting[1]]) == SETTINGS_HEADER_TABLE_SIZE {
                    let v = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
                    table.store(v as usize, Ordering::Relaxed);
                }
            }
            wr.write_all(&payload).await?;
        } else {
            let copied = tokio::io::copy(&mut (&mut *rd).take(h.len as u64), wr).await?;
            if copied < h.len as u64 {
                return Ok(());
            }
        }
        wr.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_encode_as_rfc7541_examples() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; C.1.3: 42, 8-bit.
        let mut out = Vec::new();
        encode_integer(&mut out, 10, 5, 0);
        assert_eq!(out, [0x0a]);
        out.clear();
        encode_integer(&mut out, 1337, 5, 0);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        out.clear();
        encode_integer(&mut out, 42, 8 - 1, 0);
        assert_eq!(out, [42]);
    }

    #[test]
    fn encoded_blocks_decode_to_the_same_fields_with_a_repaired_authority() {
        let fields: Fields = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (
                b":authority".to_vec(),
                b"%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fx-reg.sock".to_vec(),
            ),
            (b"user-agent".to_vec(), vec![b'a'; 300]),
        ];
        let block = encode(&fields, &Authority::RepairInvalid);
        let decoded = loona_hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(decoded[0], fields[0]);
        assert_eq!(decoded[1], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(decoded[2], fields[2]);
        // A valid authority is left alone.
        let ok: Fields = vec![(b":authority".to_vec(), b"localhost:1234".to_vec())];
        let decoded = loona_hpack::Decoder::new()
            .decode(&encode(&ok, &Authority::RepairInvalid))
            .unwrap();
        assert_eq!(decoded, ok);
    }

    #[test]
    fn the_kubelet_authority_is_what_h2_refuses() {
        assert!(!authority_is_valid(
            b"%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fdra.net-reg.sock"
        ));
        assert!(authority_is_valid(b"localhost"));
    }

    #[test]
    fn indexed_repetition_cannot_blow_up_the_header_list() {
        // One 4000-byte entry added to the table, then referenced (index 62) 200 times:
        // 800 KB of headers from a block of a few KB.
        let mut block = vec![0x40];
        encode_string(&mut block, b"x-big");
        encode_string(&mut block, &[b'v'; 4000]);
        block.extend(std::iter::repeat_n(0xbe, 200));
        let mut decoder = loona_hpack::Decoder::new();
        match decode(&mut decoder, &block, 1) {
            Err(PumpError::ListTooLarge { stream: 1 }) => {}
            other => panic!("expected ListTooLarge, got {other:?}"),
        }
    }
}
