//! Text files read line by line, as field `line` (string).

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::sync::Arc;

use arrow::array::{ArrayBuilder, StringBuilder};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, FileFormat, Location, Result};
use serde::{Deserialize, Serialize};

use crate::position::{check_len, cut_error, decode, encode, file_len};
use crate::reader::{ChunkReader, ReaderPosition};

/// Reads a text file as one element per line, without the terminator (`\n` or `\r\n`).
///
/// A last line without a terminator is a line; an empty file has no lines.
pub struct TextLineReader {
    reader: BufReader<File>,
    path: String,
    schema: SchemaRef,
    chunk_rows: usize,
    /// The length of the file when it was opened.
    len: u64,
    /// The bytes read so far: the offset of the next line.
    offset: u64,
    /// Lines read so far.
    lines: usize,
    buf: Vec<u8>,
    /// The error of a bad line, returned after the lines before it, with the offset where the
    /// line starts (a position there reads the line again, and fails again).
    pending: Option<(Error, u64)>,
    done: bool,
}

/// Where a [`TextLineReader`] is: the byte offset of the next line and its number (1-based),
/// in a file of `len` bytes.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TextPosition {
    len: u64,
    offset: u64,
    line: usize,
}

impl TextLineReader {
    /// Opens `path` to read its lines in chunks of at most `chunk_rows` rows.
    ///
    /// Invalid UTF-8 is an [`Error::Data`] at `line N` (1-based) of the file, returned after
    /// the lines before it; reading goes on with the next line. A read error, or the file
    /// ending before the length it had when opened (it was cut), ends the reader after the
    /// lines before.
    pub fn open(path: &str, chunk_rows: usize) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(TextLineReader {
            len: file_len(&file, path)?,
            reader: BufReader::new(file),
            path: path.to_string(),
            schema: FileFormat::TextLines.output_spec()?.arrow_schema(),
            chunk_rows: chunk_rows.max(1),
            offset: 0,
            lines: 0,
            buf: Vec::new(),
            pending: None,
            done: false,
        })
    }
}

impl ChunkReader for TextLineReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some((e, _)) = self.pending.take() {
            return Err(e);
        }
        let mut builder = StringBuilder::new();
        while !self.done && builder.len() < self.chunk_rows {
            self.buf.clear();
            let read = self.reader.read_until(b'\n', &mut self.buf);
            let ended = matches!(read, Ok(n) if n == 0 || self.buf.last() != Some(&b'\n'));
            let n = match read {
                Err(e) => Err(Error::io(self.path.as_str(), e)),
                // A file shorter than when it was opened was cut while being read: its last
                // line is not a line.
                Ok(n) if ended && self.offset + (n as u64) < self.len => {
                    Err(cut_error(&self.path, self.offset + n as u64, self.len))
                }
                Ok(n) => Ok(n),
            };
            let n = match n {
                Ok(n) => n,
                Err(error) => {
                    self.done = true;
                    if builder.is_empty() {
                        return Err(error);
                    }
                    self.pending = Some((error, self.offset));
                    break;
                }
            };
            if n == 0 {
                self.done = true;
                break;
            }
            let start = self.offset;
            self.offset += n as u64;
            self.lines += 1;
            let mut line = self.buf.as_slice();
            if let Some(rest) = line.strip_suffix(b"\n") {
                line = rest.strip_suffix(b"\r").unwrap_or(rest);
            }
            match std::str::from_utf8(line) {
                Ok(text) => builder.append_value(text),
                Err(e) => {
                    let error = Error::data(
                        Location::new(self.path.as_str(), format!("line {}", self.lines)),
                        format!("invalid UTF-8 at byte {} of the line", e.valid_up_to()),
                    );
                    if builder.is_empty() {
                        return Err(error);
                    }
                    self.pending = Some((error, start));
                    break;
                }
            }
        }
        if builder.is_empty() {
            return Ok(None);
        }
        Ok(Some(RecordBatch::try_new(self.schema.clone(), vec![Arc::new(builder.finish())])?))
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (offset, line) = match &self.pending {
            // The bad line is read again after a seek.
            Some((_, start)) => (*start, self.lines),
            // After a read error too the reader has ended: nothing is left to read.
            None if self.done => (self.len, self.lines + 1),
            None => (self.offset, self.lines + 1),
        };
        encode("text", &TextPosition { len: self.len, offset, line })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: TextPosition = decode("text", position)?;
        check_len(&self.path, at.len, self.len)?;
        if at.offset > self.len || at.line == 0 {
            return Err(Error::execution(
                "seek",
                format!("{position} is not a position in {}, a file of {} bytes", self.path, self.len),
            ));
        }
        self.reader.seek(SeekFrom::Start(at.offset)).map_err(|e| Error::io(self.path.as_str(), e))?;
        self.offset = at.offset;
        self.lines = at.line - 1;
        self.pending = None;
        self.done = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use arrow::array::AsArray;

    use super::*;
    use crate::reader::testing::{check_resume, seek_error, Outcome};
    use crate::reader::BoxReader;

    fn lines(bytes: &[u8], chunk_rows: usize) -> Result<(Vec<String>, Vec<usize>)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        fs::write(&path, bytes).unwrap();
        let mut reader = TextLineReader::open(path.to_str().unwrap(), chunk_rows)?;
        let (mut out, mut sizes) = (vec![], vec![]);
        while let Some(chunk) = reader.next_chunk()? {
            assert_eq!(chunk.schema(), reader.schema);
            assert_eq!(chunk.schema().field(0).name(), "line");
            sizes.push(chunk.num_rows());
            out.extend(chunk.column(0).as_string::<i32>().iter().map(|s| s.unwrap().to_string()));
        }
        Ok((out, sizes))
    }

    #[test]
    fn strips_lf_and_crlf_and_keeps_a_last_line_without_newline() {
        let (out, sizes) = lines(b"one\r\ntwo\n\nthree\r\n\r\nfour", 2).unwrap();
        assert_eq!(out, vec!["one", "two", "", "three", "", "four"]);
        assert_eq!(sizes, vec![2, 2, 2]);
        assert_eq!(lines(b"a\nb\n", 10).unwrap().0, vec!["a", "b"]);
        assert_eq!(lines(b"a\rb\r", 10).unwrap().0, vec!["a\rb\r"]);
        assert_eq!(lines("é\n".as_bytes(), 10).unwrap().0, vec!["é"]);
    }

    #[test]
    fn empty_file_has_no_lines() {
        assert_eq!(lines(b"", 10).unwrap(), (vec![], vec![]));
        assert_eq!(lines(b"\n", 10).unwrap().0, vec![""]);
    }

    #[test]
    fn invalid_utf8_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.txt");
        fs::write(&path, b"ok\nfine\r\nbad \xc3\x28 here\nlater\n").unwrap();
        let path = path.to_str().unwrap();
        let mut reader = TextLineReader::open(path, 2).unwrap();
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 2);
        let err = reader.next_chunk().unwrap_err();
        assert!(
            matches!(&err, Error::Data { location, .. } if location.source == path && location.position.as_deref() == Some("line 3")),
            "{err}"
        );
        // Reading goes on with the next line.
        let rest = reader.next_chunk().unwrap().unwrap();
        assert_eq!(rest.column(0).as_string::<i32>().value(0), "later");
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn a_file_cut_while_read_is_an_error_after_its_complete_lines() {
        // A cut file's last partial line came out as a line ("line 1" of "line 1500").
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.txt");
        let body: String = (0..3000).map(|i| format!("line {i:04}\n")).collect();
        fs::write(&path, &body).unwrap();
        let path = path.to_str().unwrap();
        let mut reader = TextLineReader::open(path, 100).unwrap();
        let mut count = reader.next_chunk().unwrap().unwrap().num_rows();
        fs::File::options().write(true).open(path).unwrap().set_len(15_006).unwrap();
        let err = loop {
            match reader.next_chunk() {
                Ok(Some(chunk)) => count += chunk.num_rows(),
                Ok(None) => panic!("no error after {count} lines"),
                Err(e) => break e,
            }
        };
        assert_eq!(count, 1500, "every complete line");
        assert!(
            matches!(&err, Error::Data { location, .. } if location.source == path && location.position.as_deref() == Some("byte 15006")),
            "{err}"
        );
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn lines_before_a_bad_line_come_first_and_pulling_again_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.txt");
        fs::write(&path, b"a\n\xff\nb\n\xfe").unwrap();
        let mut reader = TextLineReader::open(path.to_str().unwrap(), 10).unwrap();
        let mut out = vec![];
        for _ in 0..10 {
            match reader.next_chunk() {
                Ok(None) => break,
                Ok(Some(c)) => out.extend(c.column(0).as_string::<i32>().iter().map(|s| Ok(s.unwrap().to_string()))),
                Err(e) => out.push(Err(e.to_string().contains("line ").then_some(()))),
            }
        }
        let expected = vec![Ok("a".to_string()), Err(Some(())), Ok("b".to_string()), Err(Some(()))];
        assert_eq!(out, expected);
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        // Bad lines after good ones, first in a chunk, adjacent, and last without a newline.
        fs::write(&path, b"one\r\ntwo\n\xff\n\nfive\n\xfe\n\xfd\r\neight\n\xfc").unwrap();
        let path = path.to_str().unwrap();
        let outcomes = check_resume(2, |rows| Box::new(TextLineReader::open(path, rows).unwrap()));
        let errors = outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count();
        assert_eq!(errors, 4, "{outcomes:?}");
        for empty in [&b""[..], b"\n", b"no newline"] {
            fs::write(path, empty).unwrap();
            check_resume(1, |rows| Box::new(TextLineReader::open(path, rows).unwrap()));
        }
    }

    #[test]
    fn a_position_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        fs::write(&path, "a\nb\nc\n").unwrap();
        let path = path.to_str().unwrap();
        let open = || Box::new(TextLineReader::open(path, 1).unwrap()) as BoxReader;
        let mut reader = open();
        reader.next_chunk().unwrap();
        let position = reader.position().unwrap();
        assert_eq!(position, serde_json::json!({"reader": "text", "len": 6, "offset": 2, "line": 2}));
        let past = serde_json::json!({"reader": "text", "len": 6, "offset": 7, "line": 2});
        assert!(seek_error(open, past).contains("is not a position in"));
        let csv = serde_json::json!({"reader": "csv", "len": 6, "offset": 2, "line": 2});
        assert!(seek_error(open, csv).contains("not a position of a text reader"));
        let missing = serde_json::json!({"reader": "text", "len": 6, "offset": 2});
        assert!(seek_error(open, missing).contains("missing field `line`"));
        fs::write(path, "a\nb\nc\nd\n").unwrap();
        let err = seek_error(open, position);
        assert!(err.contains("the position was taken when the file had 6 bytes, it now has 8"), "{err}");
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.txt").to_str().unwrap().to_string();
        assert!(matches!(TextLineReader::open(&path, 1), Err(Error::Io { path: p, .. }) if p == path));
    }
}
