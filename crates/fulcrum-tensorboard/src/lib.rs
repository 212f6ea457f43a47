//! TensorBoard event files, written natively: scalars, text and histograms as `Event` protocol
//! buffers (`prost`, [`proto`]) in TFRecord framing with masked CRC-32C (`crc32c`, `record.rs`).
//!
//! Every event is written with one `write` as soon as it is given, so a crashed or killed run
//! keeps all it logged, a torn last record at most. A resumed run continues the same file:
//! [`EventWriter::resume`] cuts it back to the checkpoint's step (and drops a torn tail), so
//! TensorBoard shows one line per tag with no step twice.

pub mod proto;
mod record;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;

use proto::{
    Content, Event, HistogramProto, PluginData, Summary, SummaryMetadata, TensorProto,
    TensorShapeProto, Value, What, DT_STRING,
};

/// An event file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct TbError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TbError + '_ {
    move |source| TbError {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `name` is an event file's name (TensorBoard reads the files whose name holds
/// `tfevents`).
fn is_event_file(name: &str) -> bool {
    name.starts_with("events.out.tfevents.")
}

/// The event files in `dir`, by name.
fn event_files(dir: &Path) -> Result<Vec<PathBuf>, TbError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        if entry.file_name().to_str().is_some_and(is_event_file) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The events of the file at `path` up to a torn or corrupt record, and whether there was one.
pub fn read_events(path: &Path) -> Result<(Vec<Event>, bool), TbError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let (records, intact) = record::unframe(&bytes);
    let mut events = Vec::with_capacity(records.len());
    for r in records {
        match Event::decode(r) {
            Ok(e) => events.push(e),
            Err(_) => return Ok((events, true)),
        }
    }
    Ok((events, intact < bytes.len()))
}

/// One run's event file, open for appending.
pub struct EventWriter {
    path: PathBuf,
    file: File,
}

impl EventWriter {
    /// A new event file in `dir` (created), named as TensorFlow names them
    /// (`events.out.tfevents.<seconds>.<host>.<pid>`), starting with its version record.
    pub fn create(dir: &Path) -> Result<EventWriter, TbError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty() && !h.contains('/'))
            .unwrap_or_else(|| "localhost".into());
        let name = format!(
            "events.out.tfevents.{}.{host}.{}",
            now() as u64,
            std::process::id()
        );
        let path = dir.join(name);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut w = EventWriter { path, file };
        w.write(Event {
            wall_time: now(),
            step: 0,
            what: Some(What::FileVersion("brain.Event:2".into())),
        })?;
        Ok(w)
    }

    /// A new event file in `dir` for a run that starts again from step 0: the event files an
    /// earlier start of it left there are removed first.
    pub fn restart(dir: &Path) -> Result<EventWriter, TbError> {
        if dir.is_dir() {
            for path in event_files(dir)? {
                std::fs::remove_file(&path).map_err(io(&path))?;
            }
        }
        EventWriter::create(dir)
    }

    /// Continues the event file in `dir` of a run resumed after step `last`: every event of a
    /// later step (logged after the checkpoint it resumes from) and a torn tail are cut, so
    /// the stream goes on as if never interrupted. Without an event file there, a new one.
    pub fn resume(dir: &Path, last: u64) -> Result<EventWriter, TbError> {
        let files = if dir.is_dir() {
            event_files(dir)?
        } else {
            Vec::new()
        };
        let Some(newest) = files.last().cloned() else {
            return EventWriter::create(dir);
        };
        for path in &files {
            cut_after(path, last as i64)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&newest)
            .map_err(io(&newest))?;
        Ok(EventWriter { path: newest, file })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Scalars of one step, one event (tags as given: `/` groups them in TensorBoard).
    pub fn scalars(&mut self, step: u64, values: &[(&str, f64)]) -> Result<(), TbError> {
        let value = values
            .iter()
            .map(|&(tag, v)| Value {
                tag: tag.to_string(),
                metadata: None,
                value: Some(Content::SimpleValue(v as f32)),
            })
            .collect();
        self.summary(step, value)
    }

    /// A text (markdown) for TensorBoard's text plugin.
    pub fn text(&mut self, tag: &str, step: u64, text: &str) -> Result<(), TbError> {
        let value = Value {
            tag: tag.to_string(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: "text".into(),
                    content: Vec::new(),
                }),
            }),
            value: Some(Content::Tensor(TensorProto {
                dtype: DT_STRING,
                tensor_shape: Some(TensorShapeProto { dim: Vec::new() }),
                string_val: vec![text.as_bytes().to_vec()],
            })),
        };
        self.summary(step, vec![value])
    }

    /// A histogram of `values` (the non-finite ones left out) in `buckets` equal-width buckets;
    /// nothing when no value is finite.
    pub fn histogram(
        &mut self,
        tag: &str,
        step: u64,
        values: &[f64],
        buckets: usize,
    ) -> Result<(), TbError> {
        let Some(histo) = histogram(values, buckets) else {
            return Ok(());
        };
        let value = Value {
            tag: tag.to_string(),
            metadata: None,
            value: Some(Content::Histo(histo)),
        };
        self.summary(step, vec![value])
    }

    fn summary(&mut self, step: u64, value: Vec<Value>) -> Result<(), TbError> {
        self.write(Event {
            wall_time: now(),
            step: step as i64,
            what: Some(What::Summary(Summary { value })),
        })
    }

    /// One event, framed, in one write (no buffer between it and the file).
    fn write(&mut self, event: Event) -> Result<(), TbError> {
        let bytes = record::frame(&event.encode_to_vec());
        self.file.write_all(&bytes).map_err(io(&self.path))
    }
}

/// `values`' histogram in `buckets` equal-width buckets over `[min, max]` (one bucket when all
/// are equal), as TensorBoard's `HistogramProto` holds it.
pub fn histogram(values: &[f64], buckets: usize) -> Option<HistogramProto> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let min = finite.iter().copied().reduce(f64::min)?;
    let max = finite.iter().copied().reduce(f64::max)?;
    let n = if max > min { buckets.max(1) } else { 1 };
    let width = (max - min) / n as f64;
    let bucket_limit: Vec<f64> = (1..=n)
        .map(|i| if i == n { max } else { min + width * i as f64 })
        .collect();
    let mut bucket = vec![0.0; n];
    for &v in &finite {
        // The first limit at or above v: buckets are closed on the right.
        let i = bucket_limit.partition_point(|&l| l < v).min(n - 1);
        bucket[i] += 1.0;
    }
    Some(HistogramProto {
        min,
        max,
        num: finite.len() as f64,
        sum: finite.iter().sum(),
        sum_squares: finite.iter().map(|v| v * v).sum(),
        bucket_limit,
        bucket,
    })
}

/// Rewrites the event file at `path` without the events of steps after `last` and without a
/// torn tail (the file version record, at step 0, stays). A new file replaces it by rename, so
/// a crash here leaves the old file or the new one whole.
fn cut_after(path: &Path, last: i64) -> Result<(), TbError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let (records, intact) = record::unframe(&bytes);
    let mut kept = Vec::with_capacity(bytes.len());
    let mut cut = intact < bytes.len();
    for r in records {
        match Event::decode(r) {
            Ok(e) if e.step <= last => kept.extend(record::frame(r)),
            _ => cut = true,
        }
    }
    if !cut {
        return Ok(());
    }
    let tmp = path.with_extension("fulcrum-tmp");
    std::fs::write(&tmp, &kept).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests;
