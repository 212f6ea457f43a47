//! Draws requested ahead of the trainer (`rollout.max_staleness = k`): the first draw of each of
//! the next `k` steps is queued on the engines while the trainer updates, and taken when its step
//! comes. A step's draw queued ahead samples on the weights the engines hold when it runs, at
//! most `k` versions behind the policy that trains on it.
//!
//! Every rank of a job keeps this queue, so that their prompt streams stay the same: the rank
//! that drives the engines holds each draw's ticket, the others only its prompts. A checkpoint
//! resumes the stream before the oldest queued draw's prompts, which a resumed run draws again.

use std::collections::VecDeque;

use fulcrum_tasks::Example;

use crate::data::DataPosition;

/// The first draw of step `step`, requested ahead.
pub(super) struct Ahead {
    pub step: u64,
    pub examples: Vec<Example>,
    pub prompts: Vec<Vec<i64>>,
    /// The prompt stream before these examples were taken.
    pub resume_at: DataPosition,
    /// The engines' ticket, on the rank that drives them.
    pub ticket: Option<u64>,
}

/// The draws requested ahead, oldest first.
#[derive(Default)]
pub struct AheadQueue {
    queue: VecDeque<Ahead>,
}

impl AheadQueue {
    pub(super) fn push(&mut self, a: Ahead) {
        self.queue.push_back(a);
    }

    /// The draw requested for `step`, if the oldest one is for it.
    pub(super) fn take(&mut self, step: u64) -> Option<Ahead> {
        if self.queue.front().is_some_and(|a| a.step == step) {
            self.queue.pop_front()
        } else {
            None
        }
    }

    /// The last step a draw was requested for.
    pub(super) fn last_step(&self) -> Option<u64> {
        self.queue.back().map(|a| a.step)
    }

    /// Where a checkpoint written now resumes the prompt stream: before the oldest draw not
    /// yet trained on.
    pub(super) fn resume_position(&self) -> Option<DataPosition> {
        self.queue.front().map(|a| a.resume_at)
    }
}
