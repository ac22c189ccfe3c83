//! The bytes of an encoded image, as zune's decoders read them.
//!
//! With their `std` feature on (their runtime SIMD detection needs it), zune's decoders read
//! through `std::io::Read`, and `zune_core`'s `ZCursor` copies each read with a length known
//! only at run time: a `memcpy` call every time the JPEG Huffman decoder refills its four
//! bytes, 3% of w5's profile. [`SliceReader`] moves those four bytes without one.

use std::io::{self, BufRead, Read, Seek, SeekFrom};

/// A reader over a byte slice (`std::io::Cursor<&[u8]>`'s behaviour, a faster read).
#[derive(Debug, Clone)]
pub struct SliceReader<'a> {
    bytes: &'a [u8],
    /// The next byte to read; may lie past the end, as a `Cursor`'s may.
    position: usize,
}

impl<'a> SliceReader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        SliceReader { bytes, position: 0 }
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.position..).unwrap_or(&[])
    }
}

impl Read for SliceReader<'_> {
    #[inline(always)]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = self.rest();
        let n = match rest.get(..buf.len()) {
            // The Huffman decoder's refill reads 4 bytes at a time, through a loop that
            // hides the constant length from the copy.
            Some(&[a, b, c, d]) if buf.len() == 4 => {
                buf.copy_from_slice(&[a, b, c, d]);
                4
            }
            Some(whole) => {
                buf.copy_from_slice(whole);
                buf.len()
            }
            None => {
                buf[..rest.len()].copy_from_slice(rest);
                rest.len()
            }
        };
        self.position += n;
        Ok(n)
    }
}

impl BufRead for SliceReader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        Ok(self.rest())
    }

    fn consume(&mut self, amount: usize) {
        self.position += amount.min(self.rest().len());
    }
}

impl Seek for SliceReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, offset) = match to {
            SeekFrom::Start(at) => (0, i64::try_from(at).unwrap_or(i64::MAX)),
            SeekFrom::End(offset) => (self.bytes.len(), offset),
            SeekFrom::Current(offset) => (self.position, offset),
        };
        let target = i64::try_from(base).ok().and_then(|b| b.checked_add(offset)).filter(|t| *t >= 0);
        let target = target.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.position = usize::try_from(target).unwrap_or(usize::MAX);
        Ok(target as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_peeks_and_seeks_like_a_cursor() {
        let bytes: Vec<u8> = (0..10).collect();
        let (mut ours, mut theirs) = (SliceReader::new(&bytes), io::Cursor::new(&bytes[..]));
        let steps: [&Step; 7] = [
            &|r| read(r, 3),
            &|r| r.seek(SeekFrom::Current(-2)).map(|p| vec![p as u8]),
            &|r| read(r, 4),
            &|r| r.seek(SeekFrom::End(-1)).map(|p| vec![p as u8]),
            &|r| read(r, 4),
            &|r| r.seek(SeekFrom::Start(20)).and_then(|_| read(r, 2)),
            &|r| r.seek(SeekFrom::Current(-30)).map(|p| vec![p as u8]),
        ];
        for (i, step) in steps.iter().enumerate() {
            let (a, b) = (step(&mut ours), step(&mut theirs));
            assert_eq!(a.as_ref().ok(), b.as_ref().ok(), "step {i}");
            assert_eq!(a.is_err(), b.is_err(), "step {i}");
        }
        ours.seek(SeekFrom::Start(8)).unwrap();
        assert_eq!(ours.fill_buf().unwrap(), &[8, 9]);
        ours.consume(5);
        assert_eq!(ours.fill_buf().unwrap(), &[] as &[u8]);
    }

    /// One step of the comparison: what it read, or where it sought to.
    type Step = dyn Fn(&mut dyn ReadSeek) -> io::Result<Vec<u8>>;

    trait ReadSeek: Read + Seek {}
    impl<T: Read + Seek> ReadSeek for T {}

    fn read(r: &mut dyn ReadSeek, n: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; n];
        let got = r.read(&mut buf)?;
        buf.truncate(got);
        Ok(buf)
    }
}
