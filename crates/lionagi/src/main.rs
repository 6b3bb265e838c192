//! The `lionagi` command.

// It reads stdin, files and stores: nothing outside tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

fn main() {
    // With the `otel` feature, spans go to an OTLP collector when
    // OTEL_EXPORTER_OTLP_ENDPOINT is set; the guard flushes them before the
    // exit below (`process::exit` runs no destructors).
    #[cfg(feature = "otel")]
    let telemetry = match lionagi::telemetry::init_otlp() {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("lionagi: telemetry not exported: {e}");
            None
        }
    };
    let code = run();
    #[cfg(feature = "otel")]
    drop(telemetry);
    std::process::exit(code);
}

fn run() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("chat") {
        return lionagi::cli::chat::main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("mcp") {
        return lionagi::cli::mcp_serve::main(&args[1..]);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Err(e) = lionagi::cli::run(&args, &mut out) {
        // The reader stopped reading (`| head`): what it wanted it has.
        if e.is_closed_stdout() {
            return 0;
        }
        eprintln!("lionagi: {e}");
        return e.exit_code();
    }
    0
}
