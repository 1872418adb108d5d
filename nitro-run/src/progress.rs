//! Training progress: an indicatif bar when stderr is a terminal, plain
//! periodic lines otherwise (logs, CI), nothing when turned off.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::experiment::{Logger, Progress};

pub(crate) enum Display {
    Bar(ProgressBar),
    Lines { every: u64, total: u64 },
    Off,
}

impl Display {
    pub fn new(logger: &Logger, total: u64, done: u64) -> Display {
        let tty = std::io::stderr().is_terminal();
        match logger.progress {
            Progress::Off => Display::Off,
            Progress::Auto if tty => {
                let bar = ProgressBar::new(total).with_position(done);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{spinner} epoch {prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                Display::Bar(bar)
            }
            _ => Display::Lines {
                every: logger.every.max(1),
                total,
            },
        }
    }

    pub fn step(&self, step: u64, epoch: u64, loss: f64) {
        match self {
            Display::Bar(bar) => {
                bar.set_position(step);
                bar.set_prefix((epoch + 1).to_string());
                if step % 10 == 0 {
                    bar.set_message(format!("loss {loss:.4}"));
                }
            }
            Display::Lines { every, total } if step % every == 0 => {
                eprintln!("step {step}/{total}  epoch {}  loss {loss:.4}", epoch + 1)
            }
            _ => {}
        }
    }

    pub fn line(&self, text: &str) {
        match self {
            Display::Bar(bar) => bar.println(text),
            Display::Lines { .. } => eprintln!("{text}"),
            Display::Off => {}
        }
    }

    pub fn finish(&self) {
        if let Display::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
