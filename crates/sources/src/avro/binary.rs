//! Avro's binary encoding: zig-zag variable-length `int`/`long`, little-endian `float` and
//! `double`, length-prefixed `bytes` and `string`. Every length is checked against the bytes
//! that remain before anything is sliced or allocated, so a corrupt length is an error, never
//! an abort.

/// Bad bytes at a position of the buffer being decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Bad {
    /// The byte offset, within the decoded buffer, where the bad value starts.
    pub at: usize,
    /// What was wrong.
    pub what: String,
}

/// A cursor over Avro-encoded bytes.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, at: 0 }
    }

    /// The offset of the next byte.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.at
    }

    fn bad(&self, at: usize, what: impl Into<String>) -> Bad {
        Bad { at, what: what.into() }
    }

    /// A zig-zag varint `long` (at most ten bytes).
    #[inline]
    pub fn long(&mut self) -> Result<i64, Bad> {
        let start = self.at;
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&byte) = self.data.get(self.at) else {
                return Err(self.bad(start, "a variable-length integer runs past the end"));
            };
            self.at += 1;
            if shift == 63 && byte > 1 {
                return Err(self.bad(start, "a variable-length integer overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(self.bad(start, "a variable-length integer is longer than ten bytes"))
    }

    /// Walks over `n` varints (`long`s or `int`s) without decoding them: each ends at a byte
    /// below 0x80.
    pub fn skip_varints(&mut self, n: usize) -> Result<(), Bad> {
        if n == 0 {
            return Ok(());
        }
        let mut seen = 0;
        for (i, byte) in self.data[self.at..].iter().enumerate() {
            seen += usize::from(*byte < 0x80);
            if seen == n {
                self.at += i + 1;
                return Ok(());
            }
        }
        Err(self.bad(self.at, format!("{n} variable-length integers run past the end")))
    }

    /// A zig-zag varint `int`: a `long` within 32 bits.
    pub fn int(&mut self) -> Result<i32, Bad> {
        let start = self.at;
        let value = self.long()?;
        i32::try_from(value).map_err(|_| self.bad(start, format!("int {value} is outside 32 bits")))
    }

    /// A non-negative length of bytes that must follow: no more than what is left after it.
    pub fn length(&mut self, what: &str) -> Result<usize, Bad> {
        let start = self.at;
        let n = self.count(what)?;
        match n <= self.remaining() {
            true => Ok(n),
            false => Err(self.bad(start, format!("{what} {n} is more than the {} bytes left", self.remaining()))),
        }
    }

    /// A non-negative count.
    pub fn count(&mut self, what: &str) -> Result<usize, Bad> {
        let start = self.at;
        let n = self.long()?;
        usize::try_from(n).map_err(|_| self.bad(start, format!("{what} {n} is negative")))
    }

    /// `n` raw bytes.
    pub fn fixed(&mut self, n: usize) -> Result<&'a [u8], Bad> {
        if n > self.remaining() {
            return Err(self.bad(self.at, format!("{n} bytes wanted, {} left", self.remaining())));
        }
        let out = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    /// Length-prefixed `bytes` (or a `string`'s UTF-8).
    pub fn bytes(&mut self) -> Result<&'a [u8], Bad> {
        let n = self.length("a length of")?;
        self.fixed(n)
    }

    /// A `string`, checked to be UTF-8.
    pub fn string(&mut self) -> Result<&'a str, Bad> {
        let start = self.at;
        let raw = self.bytes()?;
        std::str::from_utf8(raw).map_err(|_| self.bad(start, "a string is not UTF-8"))
    }

    /// A `boolean`: one byte, 0 or 1.
    pub fn boolean(&mut self) -> Result<bool, Bad> {
        match self.fixed(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.bad(self.at - 1, format!("boolean byte {b}"))),
        }
    }

    /// A `float`.
    pub fn float(&mut self) -> Result<f32, Bad> {
        Ok(f32::from_le_bytes(self.fixed(4)?.try_into().expect("four bytes")))
    }

    /// A `double`.
    pub fn double(&mut self) -> Result<f64, Bad> {
        Ok(f64::from_le_bytes(self.fixed(8)?.try_into().expect("eight bytes")))
    }
}

/// Appends `value` as a zig-zag varint.
pub fn put_long(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends length-prefixed `bytes`.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_round_trip_at_the_edges() {
        for v in [0, 1, -1, 63, -64, 64, i32::MAX as i64, i32::MIN as i64, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_long(&mut out, v);
            assert_eq!(Input::new(&out).long(), Ok(v), "{v}");
        }
        // The spec's examples: 1 -> 02, -1 -> 01, 64 -> 80 01.
        let mut out = Vec::new();
        put_long(&mut out, 64);
        assert_eq!(out, [0x80, 0x01]);
    }

    #[test]
    fn bad_varints_and_lengths_are_errors() {
        assert!(Input::new(&[0x80]).long().unwrap_err().what.contains("past the end"));
        assert!(Input::new(&[0xff; 11]).long().is_err());
        let mut huge = Vec::new();
        put_long(&mut huge, 1 << 40);
        huge.extend_from_slice(b"abc");
        assert!(Input::new(&huge).bytes().unwrap_err().what.contains("more than the 3 bytes left"));
        let mut negative = Vec::new();
        put_long(&mut negative, -5);
        assert!(Input::new(&negative).bytes().unwrap_err().what.contains("negative"));
        assert!(Input::new(&[2]).boolean().is_err());
        let mut big = Vec::new();
        put_long(&mut big, 1 << 40);
        assert!(Input::new(&big).int().unwrap_err().what.contains("outside 32 bits"));
    }
}
