//! Progress of a long live read on stderr (lists done, pages read), only when stderr is a
//! terminal: a pipe or a log file gets nothing, so scripts see exactly the command's output.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How often the line is redrawn.
const TICK: Duration = Duration::from_millis(200);

pub struct Progress {
    what: &'static str,
    lists: usize,
    done: AtomicUsize,
    pages: AtomicUsize,
}

/// Redraws the progress line until dropped, then clears it.
pub struct Shown {
    progress: Arc<Progress>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Progress over `lists` list requests; drawn only when stderr is a terminal.
    pub fn start(what: &'static str, lists: usize) -> Shown {
        let progress = Arc::new(Progress {
            what,
            lists,
            done: AtomicUsize::new(0),
            pages: AtomicUsize::new(0),
        });
        let ticker = std::io::stderr().is_terminal().then(|| {
            let progress = progress.clone();
            tokio::spawn(async move {
                loop {
                    progress.draw();
                    tokio::time::sleep(TICK).await;
                }
            })
        });
        Shown { progress, ticker }
    }

    pub fn page(&self) {
        self.pages.fetch_add(1, Ordering::Relaxed);
    }

    pub fn list_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    fn draw(&self) {
        let line = format!(
            "\r\x1b[K{}: {}/{} lists, {} pages",
            self.what,
            self.done.load(Ordering::Relaxed),
            self.lists,
            self.pages.load(Ordering::Relaxed)
        );
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line.as_bytes()).and_then(|()| err.flush());
    }
}

impl Shown {
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }
}

impl Drop for Shown {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
            let _ = std::io::stderr().write_all(b"\r\x1b[K");
        }
    }
}
