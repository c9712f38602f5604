//! Length-prefixed records in a byte stream: the shape both layers of the NRI socket share. A mux
//! frame and a ttrpc message are each a fixed header holding a big-endian `u32` payload length,
//! then that many bytes; [`Decoder`] cuts either out of a stream pushed in arbitrary pieces.

use std::marker::PhantomData;

use crate::error::{Error, Result};

/// One framing: its header, where the header holds the payload length, the largest payload a
/// peer may announce, and what a record is.
pub trait Framing {
    /// Length of the header.
    const HEADER_LEN: usize;
    /// Offset in the header of the big-endian `u32` payload length.
    const LEN_AT: usize;
    /// Largest payload a peer may announce; more means a corrupt or foreign stream.
    const MAX_PAYLOAD: u32;
    /// What one record decodes to.
    type Record;
    /// The error for `header` announcing `len` bytes, more than [`Framing::MAX_PAYLOAD`].
    fn too_large(header: &[u8], len: u32) -> Error;
    /// The record made of `header` (exactly [`Framing::HEADER_LEN`] bytes) and its `payload`.
    fn record(header: &[u8], payload: Vec<u8>) -> Self::Record;
}

/// Incremental decoder of one framing: push bytes as they arrive, pop whole records.
///
/// Errors are final: after one, the stream has lost sync and the connection must be dropped.
pub struct Decoder<F> {
    buf: StreamBuf,
    largest: usize,
    framing: PhantomData<fn() -> F>,
}

impl<F> Default for Decoder<F> {
    fn default() -> Self {
        Self {
            buf: StreamBuf::default(),
            largest: 0,
            framing: PhantomData,
        }
    }
}

impl<F> std::fmt::Debug for Decoder<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("pending", &self.buf.avail().len())
            .field("largest", &self.largest)
            .finish()
    }
}

impl<F: Framing> Decoder<F> {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the next bytes of the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.push(bytes);
    }

    /// Bytes received but not yet returned as a record.
    pub fn pending(&self) -> usize {
        self.buf.avail().len()
    }

    /// The next complete record, `Ok(None)` if more bytes are needed, or the framing's error for
    /// a header announcing more than a peer may send.
    pub fn next_record(&mut self) -> Result<Option<F::Record>> {
        let avail = self.buf.avail();
        let Some(header) = avail.get(..F::HEADER_LEN) else {
            return Ok(None);
        };
        let len = be_u32(header, F::LEN_AT);
        if len > F::MAX_PAYLOAD {
            return Err(F::too_large(header, len));
        }
        let total = F::HEADER_LEN + len as usize;
        if avail.len() < total {
            return Ok(None);
        }
        let record = F::record(header, avail[F::HEADER_LEN..total].to_vec());
        self.buf.consume(total);
        self.largest = self.largest.max(total);
        Ok(Some(record))
    }

    /// Length (header included) of the largest record decoded so far.
    pub fn largest(&self) -> usize {
        self.largest
    }

    /// Call at end of stream: an error if a partial record is left over.
    pub fn finish(&self) -> Result<()> {
        match self.pending() {
            0 => Ok(()),
            n => Err(Error::Truncated(n)),
        }
    }
}

/// The big-endian `u32` at `at` of a header.
pub(crate) fn be_u32(header: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&header[at..at + 4]);
    u32::from_be_bytes(b)
}

/// A byte stream's unread bytes: appended at the end, consumed from the front, compacted so a
/// long-lived connection does not keep consumed bytes around.
#[derive(Debug, Default)]
struct StreamBuf {
    buf: Vec<u8>,
    start: usize,
}

impl StreamBuf {
    fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The bytes not consumed yet.
    fn avail(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Marks `n` bytes of [`StreamBuf::avail`] as consumed.
    fn consume(&mut self, n: usize) {
        self.start += n;
    }
}
