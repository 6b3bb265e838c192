//! A spinner on stderr while a reply's first token is awaited, and the
//! lines other parts write on stderr meanwhile (a tool's calls and
//! progress), which go above it rather than after its wheel.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

const FRAMES: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const TICK: Duration = Duration::from_millis(90);

/// Whether a spinner's line is on stderr now. Every write that shares
/// stderr with a spinner takes this lock.
static DRAWN: Mutex<bool> = Mutex::new(false);

/// The line that erases a spinner's.
const ERASE: &[u8] = b"\r\x1b[2K";

/// Writes `line` on stderr, on a line of its own: a spinner drawn there
/// is erased first, and draws itself again below at its next turn.
pub(crate) fn eprint_line(line: &str) {
    let mut drawn = DRAWN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut err = std::io::stderr().lock();
    let _ = line_above(&mut err, &mut drawn, line);
}

fn line_above(out: &mut impl Write, drawn: &mut bool, line: &str) -> std::io::Result<()> {
    if std::mem::take(drawn) {
        out.write_all(ERASE)?;
    }
    writeln!(out, "{line}")?;
    out.flush()
}

/// A running spinner; it stops (and erases itself) on [`Spinner::stop`]
/// or when dropped.
#[derive(Debug)]
pub(crate) struct Spinner {
    stopped: Arc<Mutex<bool>>,
    task: tokio::task::JoinHandle<()>,
}

/// Stops a spinner from elsewhere (the text callback).
#[derive(Debug, Clone)]
pub(crate) struct SpinnerStop(Arc<Mutex<bool>>);

impl SpinnerStop {
    /// Stops the spinner and erases its line; later calls do nothing.
    pub(crate) fn stop(&self) {
        // Drawing happens under the same lock, so nothing is drawn after
        // the line is erased.
        let mut stopped = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !*stopped {
            *stopped = true;
            let mut drawn = DRAWN.lock().unwrap_or_else(PoisonError::into_inner);
            if std::mem::take(&mut *drawn) {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(ERASE);
                let _ = err.flush();
            }
        }
    }
}

impl Spinner {
    /// Starts drawing `label` with a turning wheel (on the current tokio
    /// runtime).
    pub(crate) fn start(label: &str) -> Self {
        let stopped = Arc::new(Mutex::new(false));
        let flag = Arc::clone(&stopped);
        let label = label.to_owned();
        let task = tokio::spawn(async move {
            for frame in FRAMES.iter().cycle() {
                {
                    let stopped = flag.lock().unwrap_or_else(PoisonError::into_inner);
                    if *stopped {
                        return;
                    }
                    let mut drawn = DRAWN.lock().unwrap_or_else(PoisonError::into_inner);
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r{frame} {label}");
                    let _ = err.flush();
                    *drawn = true;
                }
                tokio::time::sleep(TICK).await;
            }
        });
        Self { stopped, task }
    }

    /// A handle that stops this spinner.
    pub(crate) fn stopper(&self) -> SpinnerStop {
        SpinnerStop(Arc::clone(&self.stopped))
    }

    /// Stops the spinner and erases its line.
    pub(crate) fn stop(&self) {
        self.stopper().stop();
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_goes_above_a_drawn_spinner() {
        let mut out = Vec::new();
        let mut drawn = true;
        line_above(&mut out, &mut drawn, "[tool] echo {}").unwrap();
        assert_eq!(out, b"\r\x1b[2K[tool] echo {}\n");
        assert!(!drawn, "the spinner draws itself again");
        let mut out = Vec::new();
        line_above(&mut out, &mut drawn, "[tool] echo -> hi").unwrap();
        assert_eq!(out, b"[tool] echo -> hi\n", "nothing to erase");
    }
}
