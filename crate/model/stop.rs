//! Stop strings over a token stream: generated items are held back while their text might
//! begin a stop string, released once it cannot, and cut where a stop string starts.
//!
//! ```
//! use ggweb::model::stop::StopHold;
//! let mut h: StopHold<u32> = StopHold::new(vec!["END".into()]);
//! assert!(!h.push(1, "a E".into()));
//! assert_eq!(h.pop(), None);                                     // "E" may begin "END": held
//! assert!(h.push(2, "ND!".into()));                              // "a END!": stop found
//! assert_eq!(h.pop(), Some((1, "a ".into())));                   // text before the stop
//! assert_eq!(h.pop(), None);                                     // the stop is not yielded
//! ```

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

/// Items (`T`, their text) in generation order. An item is released whole, with its text;
/// at a stop, the item where the stop string begins keeps the text before it, and every
/// later item is dropped. Without stop strings every item is released at once.
pub struct StopHold<T> {
    stops: Vec<String>,
    held: VecDeque<(T, String)>,
    ready: VecDeque<(T, String)>,
    stopped: bool,
}

impl<T> StopHold<T> {
    /// Empty stop strings are ignored (they would match everywhere).
    pub fn new(stops: Vec<String>) -> StopHold<T> {
        StopHold {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: VecDeque::new(),
            ready: VecDeque::new(),
            stopped: false,
        }
    }

    /// Adds the next item; true when the text now contains a stop string (the run ends).
    pub fn push(&mut self, item: T, text: String) -> bool {
        if self.stopped {
            return true;
        }
        self.held.push_back((item, text));
        let held: String = self.held.iter().map(|(_, t)| t.as_str()).collect();
        let first = self.stops.iter().filter_map(|s| held.find(s.as_str())).min();
        if let Some(cut) = first {
            let mut start = 0;
            while let Some((item, mut text)) = self.held.pop_front() {
                if start >= cut {
                    break;
                }
                let end = start + text.len();
                if end > cut {
                    text.truncate(cut - start);
                }
                self.ready.push_back((item, text));
                start = end;
            }
            self.held.clear();
            self.stopped = true;
            return true;
        }
        // The longest tail of the held text that begins some stop string stays held.
        let keep = (1..=held.len())
            .rev()
            .filter(|&k| held.is_char_boundary(held.len() - k))
            .find(|&k| self.stops.iter().any(|s| s.starts_with(&held[held.len() - k..])))
            .unwrap_or(0);
        let free = held.len() - keep;
        let mut end = 0;
        while let Some((_, t)) = self.held.front() {
            if end + t.len() > free {
                break;
            }
            end += t.len();
            let it = self.held.pop_front().expect("front exists");
            self.ready.push_back(it);
        }
        false
    }

    /// The run ended without a stop string: release everything held.
    pub fn flush(&mut self) {
        self.ready.extend(self.held.drain(..));
    }

    /// The next released item.
    pub fn pop(&mut self) -> Option<(T, String)> {
        self.ready.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<(usize, String)>, bool) {
        let mut h = StopHold::new(stops.iter().map(|s| String::from(*s)).collect());
        let mut out = Vec::new();
        let mut stopped = false;
        for (i, p) in pieces.iter().enumerate() {
            stopped = h.push(i, String::from(*p));
            while let Some(x) = h.pop() {
                out.push(x);
            }
            if stopped {
                break;
            }
        }
        if !stopped {
            h.flush();
            while let Some(x) = h.pop() {
                out.push(x);
            }
        }
        (out, stopped)
    }

    #[test]
    fn stop_split_across_three_tokens() {
        let (out, stopped) = run(&["\n\nQ:"], &["Hi", ".\n", "\nQ", ":", " more"]);
        assert!(stopped);
        assert_eq!(out, vec![(0, "Hi".into()), (1, ".".into())]);
    }

    #[test]
    fn false_start_is_released() {
        let (out, stopped) = run(&["END"], &["E", "N", "x", "y"]);
        assert!(!stopped);
        let text: String = out.iter().map(|x| x.1.as_str()).collect();
        assert_eq!(text, "ENxy");
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let (out, _) = run(&["cd", "b"], &["abcd"]);
        assert_eq!(out, vec![(0, "a".into())]);
    }

    #[test]
    fn stop_at_the_very_start_yields_nothing() {
        let (out, stopped) = run(&["x"], &["xyz"]);
        assert!(stopped);
        assert!(out.is_empty());
    }
}
