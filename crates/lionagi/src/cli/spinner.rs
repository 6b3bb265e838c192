//! A spinner on stderr while a reply's first token is awaited.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

const FRAMES: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const TICK: Duration = Duration::from_millis(90);

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
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(b"\r\x1b[2K");
            let _ = err.flush();
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
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r{frame} {label}");
                    let _ = err.flush();
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
