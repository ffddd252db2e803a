//! The capture's timeline. A timestamp that jumps by years (a clock set at boot, a corrupt
//! record) would make a connection last 1.8e13 s and every rate near zero; each such jump is
//! a fact naming its frame, and the times handed on keep one sane timeline: a jump's frame
//! takes the time of the frame before it, the frames after continue from there, and a frame
//! back on the timeline before the jump (a lone bad record) takes its own time again.
//!
//! Steps back under BACKWARD_S are real: `tcpdump -i any` merges interfaces whose packets
//! reach it out of order, NTP steps a clock back by seconds or minutes. They are counted,
//! never moved (a connection's bins are revisited, its spans stay sane); a step of
//! microseconds (under JITTER_S, CPUs stamping packets of one interface) is not even counted.

use serde::Serialize;

/// A step back beyond this is a corrupt record or a clock set at boot, not packets merged out
/// of order nor a clock adjusted: no capture's times are moved for less.
pub const BACKWARD_S: f64 = 86_400.0;
/// A step back within this is the jitter of CPUs stamping one interface's packets (seen on
/// the shipped loopback and bridge captures: up to 6 us).
pub const JITTER_S: f64 = 0.001;
/// A step forward beyond this is a jump: a year without a packet is not a capture's pause.
pub const FORWARD_S: f64 = 365.25 * 86_400.0;
/// Jumps kept one by one.
pub const MAX_JUMPS: usize = 20;

/// A record whose time does not follow the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TimeJump {
    pub frame: u64,
    /// Its timestamp less the previous record's (seconds, signed).
    pub step_s: f64,
    /// It comes back to the timeline a previous jump left: its own time is kept.
    pub returns: bool,
}

/// What the timeline showed, for the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timeline {
    /// The first MAX_JUMPS jumps.
    pub jumps: Vec<TimeJump>,
    pub jumps_total: u64,
    /// Small steps back (packets merged out of order), the largest, and where the first was.
    pub backward_steps: u64,
    pub backward_max_s: f64,
    pub backward_first_frame: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct Clock {
    /// The previous record's raw and handed-on times.
    prev: Option<(f64, f64)>,
    /// Added to raw times since the last jump.
    offset: f64,
    /// The timeline the last jump left: the raw time before it and its offset.
    before: Option<(f64, f64)>,
    pub timeline: Timeline,
}

fn sane(step: f64) -> bool {
    (-BACKWARD_S..=FORWARD_S).contains(&step)
}

impl Clock {
    /// The time to hand on for record `frame` stamped `raw`; `valid`: a clock can give that
    /// stamp (a pcap's microseconds above a million cannot: a corrupt record's).
    pub fn time(&mut self, raw: f64, frame: u64, valid: bool) -> f64 {
        let Some((prev_raw, prev)) = self.prev else {
            self.prev = Some((raw, raw));
            return raw;
        };
        let step = raw - prev_raw;
        // back on the timeline the last jump left, first: after a lone bad record the next
        // step may look sane from it too (a stamp 40 minutes off)
        let back = self.before.filter(|&(b, _)| valid && sane(raw - b));
        let t = if let Some((_, before_offset)) = back {
            self.note(frame, step, true);
            self.offset = before_offset;
            self.before = None;
            raw + self.offset
        } else if sane(step) && valid {
            if step < -JITTER_S {
                let tl = &mut self.timeline;
                tl.backward_steps += 1;
                tl.backward_max_s = tl.backward_max_s.max(-step);
                tl.backward_first_frame.get_or_insert(frame);
            }
            raw + self.offset
        } else {
            self.note(frame, step, false);
            self.before = Some((prev_raw, self.offset));
            self.offset = prev - raw;
            prev
        };
        self.prev = Some((raw, t));
        t
    }

    /// The raw time of the last record (what a Simple Packet Block, which has none, takes).
    pub fn last_raw(&self) -> Option<f64> {
        self.prev.map(|(raw, _)| raw)
    }

    fn note(&mut self, frame: u64, step_s: f64, returns: bool) {
        let tl = &mut self.timeline;
        tl.jumps_total += 1;
        if tl.jumps.len() < MAX_JUMPS {
            tl.jumps.push(TimeJump {
                frame,
                step_s,
                returns,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(raws: &[f64]) -> (Vec<f64>, Clock) {
        let mut c = Clock::default();
        let out = raws
            .iter()
            .enumerate()
            .map(|(i, &r)| c.time(r, i as u64 + 1, true))
            .collect();
        (out, c)
    }

    #[test]
    fn a_lone_bad_record_takes_the_time_before_it() {
        // the fuzzed capture's frames 3-5: 30 years early, then back
        let t = 1_795_366_297.0;
        let (out, c) = run(&[t, t + 0.001, 855_842_201.0, t + 0.002, t + 0.003]);
        assert_eq!(out, [t, t + 0.001, t + 0.001, t + 0.002, t + 0.003]);
        let j = &c.timeline.jumps;
        assert_eq!(
            (j.len(), j[0].frame, j[0].returns, j[1].frame, j[1].returns),
            (2, 3, false, 4, true)
        );
        assert!(j[0].step_s < -9e8);
    }

    #[test]
    fn a_stamp_no_clock_gives_is_a_jump() {
        // microseconds 2,566,914,091: 42 minutes ahead, as the fuzzed capture's frame 8
        let mut c = Clock::default();
        let t = 1_795_366_297.0;
        assert_eq!(c.time(t, 1, true), t);
        assert_eq!(c.time(t + 2566.9, 2, false), t);
        assert_eq!(c.time(t + 0.001, 3, true), t + 0.001);
        let j = &c.timeline.jumps;
        assert_eq!(
            (j[0].frame, j[0].returns, j[1].frame, j[1].returns),
            (2, false, 3, true)
        );
    }

    #[test]
    fn a_clock_set_forward_for_good_continues_the_timeline() {
        let t = 1_000_000.0;
        let year = 366.0 * 86_400.0;
        let (out, c) = run(&[t, t + 1.0, t + 2.0 + 30.0 * year, t + 3.0 + 30.0 * year]);
        assert_eq!(out[2], t + 1.0);
        assert!((out[3] - (t + 2.0)).abs() < 1e-6);
        assert_eq!(c.timeline.jumps_total, 1);
    }

    #[test]
    fn small_steps_back_are_counted_not_moved() {
        let (out, c) = run(&[10.0, 10.004, 10.0025, 10.003, 10.002_995, 9.5]);
        assert_eq!(out, [10.0, 10.004, 10.0025, 10.003, 10.002_995, 9.5]);
        let tl = &c.timeline;
        // 1.5 ms back counts, 5 us back is jitter
        assert_eq!(
            (tl.backward_steps, tl.backward_first_frame, tl.jumps_total),
            (2, Some(3), 0)
        );
        assert!((tl.backward_max_s - 0.502_995).abs() < 1e-9);
        // a clock stepped back 90 s (NTP): counted, kept
        let (out, c) = run(&[1000.0, 1001.0, 911.0, 912.0]);
        assert_eq!(out, [1000.0, 1001.0, 911.0, 912.0]);
        assert_eq!((c.timeline.backward_steps, c.timeline.jumps_total), (1, 0));
        // a day of silence is a pause, not a jump
        assert_eq!(run(&[0.0, 86_400.0 * 3.0]).1.timeline.jumps_total, 0);
    }
}
