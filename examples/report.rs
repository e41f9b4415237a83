//! How every example starts and ends: it prints the library's logs that `RUST_LOG` asks for,
//! and an error is printed for a person to read, with its causes, and the program exits 1
//! (returning the error from `main` would print its `Debug` form instead).

use std::error::Error;
use std::process::ExitCode;

/// Prints the library's logs and spans on stdout as `RUST_LOG` asks
/// (`RUST_LOG=redis_ratelimit=debug`: each decision's `rate_limit` span; errors only without
/// it). The library logs through `tracing`, which prints nothing without a subscriber.
pub(crate) fn logs() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
}

/// Exits 0 on `Ok`; on an error prints `error: <message>` and a `caused by: <cause>` line for
/// each cause that the line above does not already quote, on stderr, and exits 1.
pub(crate) fn exit(result: Result<(), Box<dyn Error>>) -> ExitCode {
    let Err(err) = result else {
        return ExitCode::SUCCESS;
    };
    let mut above = err.to_string();
    eprintln!("error: {above}");
    for cause in std::iter::successors(err.source(), |&e| e.source()) {
        let text = cause.to_string();
        if !above.contains(&text) {
            eprintln!("caused by: {text}");
        }
        above = text;
    }
    ExitCode::FAILURE
}
