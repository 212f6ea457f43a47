//! TFRecord framing, the container of an event file: each record is its length (u64, little
//! endian), the masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data.

/// TensorFlow's CRC mask: a CRC stored beside the data it covers is rotated and offset, so that
/// the CRC of a string holding CRCs is not itself trivially related to them.
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` framed as one record.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The records of `bytes` up to the first that is incomplete or fails its CRC (what a crash in
/// the middle of a write leaves), and the length of the intact prefix.
pub fn unframe(bytes: &[u8]) -> (Vec<&[u8]>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + 12) {
        let (len, crc) = header.split_at(8);
        if u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) != masked_crc(len) {
            break;
        }
        let mut n = [0u8; 8];
        n.copy_from_slice(len);
        let Ok(n) = usize::try_from(u64::from_le_bytes(n)) else {
            break;
        };
        let start = at + 12;
        let Some(end) = start.checked_add(n).filter(|&e| e + 4 <= bytes.len()) else {
            break;
        };
        let data = &bytes[start..end];
        let c = &bytes[end..end + 4];
        if u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != masked_crc(data) {
            break;
        }
        records.push(data);
        at = end + 4;
    }
    (records, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masked_crc_is_tensorflows() {
        // CRC-32C's published check value, and what TensorBoard's own writer
        // (`tensorboard.summary.writer.record_writer.masked_crc32c`) gives for the same bytes.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped() {
        let mut bytes = frame(b"one");
        bytes.extend(frame(b""));
        bytes.extend(frame(&[7u8; 300]));
        let whole = bytes.len();
        let (records, ok) = unframe(&bytes);
        assert_eq!(records, vec![&b"one"[..], &b""[..], &[7u8; 300][..]]);
        assert_eq!(ok, whole);
        for cut in [whole - 1, whole - 150, whole - 303] {
            let (records, ok) = unframe(&bytes[..cut]);
            assert_eq!(records.len(), 2, "cut at {cut}");
            assert_eq!(ok, whole - 316);
        }
        // A flipped bit in the data fails its CRC.
        bytes[14] ^= 1;
        assert_eq!(unframe(&bytes).0.len(), 0);
    }
}
