//! The stream of training prompts: deterministic chunks of a task's train split, with a
//! position that a checkpoint records, so a resumed run draws exactly the prompts it would have.

use fulcrum_core::rng::mix;
use fulcrum_tasks::{Example, Split, Task};
use serde::{Deserialize, Serialize};

use crate::error::TrainError;

/// Prompts per chunk requested from the task.
const CHUNK: usize = 256;

/// Where the stream is: chunk `k` is `task.examples(Train, mix(seed, k), CHUNK)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPosition {
    pub chunk: u64,
    pub offset: usize,
}

/// A deterministic, resumable stream of training examples.
pub struct DataStream {
    seed: u64,
    pos: DataPosition,
    current: Vec<Example>,
}

impl DataStream {
    pub fn new(seed: u64, pos: DataPosition) -> Self {
        Self {
            seed,
            pos,
            current: Vec::new(),
        }
    }

    pub fn position(&self) -> DataPosition {
        self.pos
    }

    /// The next `n` examples.
    pub fn take(&mut self, task: &dyn Task, n: usize) -> Result<Vec<Example>, TrainError> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if self.current.is_empty() {
                self.current =
                    task.examples(Split::Train, mix(self.seed, self.pos.chunk), CHUNK)?;
                if self.current.is_empty() {
                    return Err(TrainError::NoExamples {
                        task: task.name().to_string(),
                        split: "training",
                    });
                }
            }
            out.push(self.current[self.pos.offset].clone());
            self.pos.offset += 1;
            if self.pos.offset >= self.current.len() {
                self.pos = DataPosition {
                    chunk: self.pos.chunk + 1,
                    offset: 0,
                };
                self.current.clear();
            }
        }
        Ok(out)
    }
}
