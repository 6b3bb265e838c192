//! The `lionagi` command.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("chat") {
        std::process::exit(lionagi::cli::chat::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("mcp") {
        std::process::exit(lionagi::cli::mcp_serve::main(&args[1..]));
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Err(e) = lionagi::cli::run(&args, &mut out) {
        eprintln!("lionagi: {e}");
        std::process::exit(e.exit_code());
    }
}
