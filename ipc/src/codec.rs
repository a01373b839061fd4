//! Length-prefixed MessagePack frames: a 4-byte big-endian payload length, then the payload.
//!
//! Decoding yields `Ok(None)` while a frame is incomplete, and a typed error for a frame that is too long (checked
//! before any payload is buffered), a payload that does not decode, or a stream that ends inside a frame. It never
//! panics on any input.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

/// Largest payload either side accepts: 16 MiB.
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

const HEADER_LEN: usize = 4;

/// What a connection's read or write buffer keeps while it holds nothing (see [`shrink_idle`]).
pub const IDLE_BUFFER: usize = 512;

/// Replaces an empty buffer by one of [`IDLE_BUFFER`] bytes. tokio-util starts each read and write buffer at 8 KiB
/// and keeps whatever a large frame grew it to; with hundreds of idle sessions those buffers, on both ends of each
/// connection, were the largest use of memory of the supervisor and of each worker. Its capacity does not say what
/// it holds: a read buffer whose frames were split off keeps their whole allocation at a capacity of 0.
pub fn shrink_idle(buf: &mut BytesMut) {
    if buf.is_empty() && buf.capacity() != IDLE_BUFFER {
        *buf = BytesMut::with_capacity(IDLE_BUFFER);
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// A frame announced, or a message needed, more than the maximum length.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// Announced or encoded payload length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame: {have} of {need} bytes received")]
    Truncated {
        /// Bytes received for the frame, header included.
        have: usize,
        /// Bytes the frame needed, header included (4 when even the header is incomplete).
        need: usize,
    },
    /// The payload is not a valid MessagePack encoding of the expected message.
    #[error("malformed frame payload: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// The message could not be encoded.
    #[error("cannot encode frame: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// The underlying transport failed.
    #[error("transport error: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes `msg` as one complete frame.
pub fn encode_frame<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, CodecError> {
    let payload = rmp_serde::to_vec_named(msg)?;
    let len = checked_len(payload.len(), max)?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes the first frame of `buf`: `Ok(None)` when more bytes are needed, else the message and bytes consumed.
pub fn decode_frame<T: DeserializeOwned>(
    buf: &[u8],
    max: usize,
) -> Result<Option<(T, usize)>, CodecError> {
    let Some(len) = frame_len(buf, max)? else {
        return Ok(None);
    };
    let end = HEADER_LEN + len;
    if buf.len() < end {
        return Ok(None);
    }
    let msg = rmp_serde::from_slice(&buf[HEADER_LEN..end])?;
    Ok(Some((msg, end)))
}

/// The announced payload length, once the header is complete; errors when it exceeds `max`.
fn frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, CodecError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let mut bytes = [0u8; HEADER_LEN];
    bytes.copy_from_slice(header);
    let len = u32::from_be_bytes(bytes) as usize;
    if len > max {
        return Err(CodecError::FrameTooLarge { len, max });
    }
    Ok(Some(len))
}

fn checked_len(len: usize, max: usize) -> Result<u32, CodecError> {
    match u32::try_from(len) {
        Ok(n) if len <= max => Ok(n),
        _ => Err(CodecError::FrameTooLarge { len, max }),
    }
}

/// A `tokio_util` codec that reads `In` frames and writes `Out` frames.
pub struct FrameCodec<In, Out> {
    max: usize,
    _types: PhantomData<fn(Out) -> In>,
}

impl<In, Out> FrameCodec<In, Out> {
    /// A codec with the default maximum frame length.
    pub fn new() -> Self {
        Self::with_max(MAX_FRAME_LEN)
    }

    /// A codec with a custom maximum frame length.
    pub fn with_max(max: usize) -> Self {
        FrameCodec {
            max,
            _types: PhantomData,
        }
    }
}

// By hand: a derive would require `In` and `Out` to be `Clone`, and the codec holds neither.
impl<In, Out> Clone for FrameCodec<In, Out> {
    fn clone(&self) -> Self {
        Self::with_max(self.max)
    }
}

impl<In, Out> Default for FrameCodec<In, Out> {
    fn default() -> Self {
        Self::new()
    }
}

impl<In: DeserializeOwned, Out> Decoder for FrameCodec<In, Out> {
    type Item = In;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, CodecError> {
        let Some(len) = frame_len(src, self.max)? else {
            return Ok(None);
        };
        if src.len() < HEADER_LEN + len {
            // Reserve once for the whole frame so a large frame is not read in many small reallocations.
            src.reserve(HEADER_LEN + len - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        let payload = src.split_to(len);
        Ok(Some(rmp_serde::from_slice(&payload)?))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<In>, CodecError> {
        if let Some(msg) = self.decode(src)? {
            return Ok(Some(msg));
        }
        if src.is_empty() {
            return Ok(None);
        }
        let need = match frame_len(src, self.max)? {
            Some(len) => HEADER_LEN + len,
            None => HEADER_LEN,
        };
        Err(CodecError::Truncated {
            have: src.len(),
            need,
        })
    }
}

impl<In, Out: Serialize> Encoder<Out> for FrameCodec<In, Out> {
    type Error = CodecError;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> Result<(), CodecError> {
        let payload = rmp_serde::to_vec_named(&item)?;
        let len = checked_len(payload.len(), self.max)?;
        dst.reserve(HEADER_LEN + payload.len());
        dst.put_u32(len);
        dst.extend_from_slice(&payload);
        Ok(())
    }
}
