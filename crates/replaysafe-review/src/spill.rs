//! Records kept on disk rather than in memory, so that reports and diffs hold memory
//! flat in the number of effects they list.
//!
//! A [`Spill`] appends records to an unnamed temporary file (in `$TMPDIR`, removed by the
//! operating system when the process ends, whatever way it ends) and reads any of them
//! back by the position `push` returned. [`Rows`] is a finished spill: a list read back
//! in order, as often as a renderer needs (once for the column widths, once to print).
//!
//! Each record is its JSON text after its length (4 bytes, little-endian); the file
//! costs about as much disk as the records would have taken as JSON.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Records appended to a temporary file and read back by position.
pub(crate) struct Spill<T> {
    file: Option<(Arc<File>, BufWriter<File>)>,
    /// Bytes written so far: the position of the next record.
    length: u64,
    count: u64,
    unflushed: bool,
    scratch: Vec<u8>,
    records: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Spill<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill")
            .field("count", &self.count)
            .field("bytes", &self.length)
            .finish()
    }
}

impl<T> Default for Spill<T> {
    fn default() -> Self {
        Spill {
            file: None,
            length: 0,
            count: 0,
            unflushed: false,
            scratch: Vec::new(),
            records: PhantomData,
        }
    }
}

fn invalid(error: serde_json::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, error)
}

impl<T: Serialize + DeserializeOwned> Spill<T> {
    /// An empty spill; its file is made with the first record.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends `record`; returns its position. Positions grow with each record.
    pub(crate) fn push(&mut self, record: &T) -> std::io::Result<u64> {
        if self.file.is_none() {
            let file = tempfile::tempfile()?;
            let writer = BufWriter::with_capacity(256 * 1024, file.try_clone()?);
            self.file = Some((Arc::new(file), writer));
        }
        let Some((_, writer)) = &mut self.file else {
            unreachable!("made above")
        };
        self.scratch.clear();
        serde_json::to_writer(&mut self.scratch, record).map_err(invalid)?;
        let size = u32::try_from(self.scratch.len())
            .map_err(|_| std::io::Error::other("a record over 4 GiB"))?;
        writer.write_all(&size.to_le_bytes())?;
        writer.write_all(&self.scratch)?;
        let position = self.length;
        self.length += 4 + u64::from(size);
        self.count += 1;
        self.unflushed = true;
        Ok(position)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.unflushed
            && let Some((_, writer)) = &mut self.file
        {
            writer.flush()?;
            self.unflushed = false;
        }
        Ok(())
    }

    /// The record at `position`, as `push` returned it.
    pub(crate) fn get(&mut self, position: u64) -> std::io::Result<T> {
        self.flush()?;
        let Some((file, _)) = &self.file else {
            return Err(std::io::Error::other("reading a record of an empty spill"));
        };
        let mut size = [0; 4];
        file.read_exact_at(&mut size, position)?;
        let mut bytes = vec![0; u32::from_le_bytes(size) as usize];
        file.read_exact_at(&mut bytes, position + 4)?;
        serde_json::from_slice(&bytes).map_err(invalid)
    }

    /// The records so far, as a list to read in order.
    pub(crate) fn into_rows(mut self) -> std::io::Result<Rows<T>> {
        self.flush()?;
        Ok(Rows {
            file: self.file.map(|(file, _)| file),
            count: self.count,
            records: PhantomData,
        })
    }
}

/// A list of records kept on disk, in an unnamed temporary file (in `$TMPDIR`, removed by
/// the operating system when the process ends, whatever way it ends), read back in order
/// as often as needed: the effects a report or a diff lists.
///
/// Clones share the file. It serialises as a sequence, each record read back and
/// written in turn.
pub struct Rows<T> {
    file: Option<Arc<File>>,
    count: u64,
    records: PhantomData<fn() -> T>,
}

impl<T> Clone for Rows<T> {
    fn clone(&self) -> Self {
        Rows {
            file: self.file.clone(),
            count: self.count,
            records: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Rows<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rows")
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned> Rows<T> {
    /// How many records.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The records, first to last, read from the file.
    pub fn iter(&self) -> impl Iterator<Item = std::io::Result<T>> + '_ {
        let mut reader = self
            .file
            .as_deref()
            .map(|file| BufReader::with_capacity(256 * 1024, At { file, position: 0 }));
        let mut scratch = Vec::new();
        (0..self.count).map(move |_| {
            let reader = reader
                .as_mut()
                .ok_or_else(|| std::io::Error::other("rows without a file"))?;
            let mut size = [0; 4];
            reader.read_exact(&mut size)?;
            scratch.resize(u32::from_le_bytes(size) as usize, 0);
            reader.read_exact(&mut scratch)?;
            serde_json::from_slice(&scratch).map_err(invalid)
        })
    }

    /// Every record, in memory: for small lists.
    pub fn to_vec(&self) -> std::io::Result<Vec<T>> {
        self.iter().collect()
    }
}

/// A list serialises as a sequence, each record read and written in turn.
impl<T: Serialize + DeserializeOwned> Serialize for Rows<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut sequence = serializer.serialize_seq(Some(self.len()))?;
        for record in self.iter() {
            let record = record
                .map_err(|e| S::Error::custom(format!("reading back a temporary file: {e}")))?;
            sequence.serialize_element(&record)?;
        }
        sequence.end()
    }
}

/// Reads a file from a position of its own (`pread`), whatever the file's offset.
struct At<'a> {
    file: &'a File,
    position: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.file.read_at(buffer, self.position)?;
        self.position += read as u64;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_by_position_and_in_order() {
        let mut spill = Spill::new();
        let texts = ["one", "", "three \u{202e} \n", "four"];
        let positions: Vec<u64> = texts
            .iter()
            .map(|text| spill.push(&text.to_string()).unwrap())
            .collect();
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(spill.get(positions[2]).unwrap(), texts[2]);
        spill.push(&"five".to_owned()).unwrap();
        assert_eq!(spill.get(positions[0]).unwrap(), "one");
        let rows = spill.into_rows().unwrap();
        assert_eq!(rows.len(), 5);
        for _ in 0..2 {
            assert_eq!(
                rows.to_vec().unwrap(),
                ["one", "", "three \u{202e} \n", "four", "five"]
            );
        }
        assert_eq!(
            serde_json::to_string(&rows).unwrap(),
            "[\"one\",\"\",\"three \u{202e} \\n\",\"four\",\"five\"]"
        );
        let empty: Rows<String> = Spill::new().into_rows().unwrap();
        assert!(empty.is_empty());
        assert_eq!(serde_json::to_string(&empty).unwrap(), "[]");
    }
}
