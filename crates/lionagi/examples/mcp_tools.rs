//! Connects to the MCP servers of a configuration file, lists their tools
//! as a branch registers them, and optionally calls one.
//!
//! ```sh
//! cargo run -p lionagi --example mcp_tools -- mcp.json [TOOL [ARGUMENTS-JSON]]
//! ```
//!
//! The file is trusted as a whole (its commands run, bare names are looked
//! up on the PATH, loopback HTTP servers are allowed), as `lionagi chat
//! --mcp FILE --mcp-path --mcp-local` trusts it.

use lionagi::core::Branch;
use lionagi::mcp::{McpConfig, McpPolicy, McpServers};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(file) = args.first() else {
        eprintln!("usage: mcp_tools CONFIG.json [TOOL [ARGUMENTS-JSON]]");
        std::process::exit(2);
    };
    let config = McpConfig::from_file(file.as_ref())?;
    let mut policy = McpPolicy::new()
        .allow_configured_commands()
        .allow_local_network(true);
    if let Some(path) = std::env::var_os("PATH") {
        policy = policy.search_path(path);
    }
    let servers = McpServers::connect(&config, &policy).await?;
    let mut branch = Branch::builder().build()?;
    let result = async {
        for s in servers.servers() {
            println!(
                "{} ({}, protocol {})",
                s.name(),
                s.transport(),
                s.protocol_version().unwrap_or_default()
            );
        }
        for t in servers.register(&mut branch).await? {
            println!("  {}  {}", t.name, t.description.unwrap_or_default());
        }
        if let Some(tool) = args.get(1) {
            let arguments: Value = match args.get(2) {
                Some(a) => serde_json::from_str(a)?,
                None => Value::Object(Default::default()),
            };
            let registered = branch
                .acts()
                .get(tool)
                .ok_or_else(|| format!("no tool `{tool}`"))?;
            match registered.tool().call(arguments).await {
                Ok(v) => println!("{v}"),
                Err(e) => println!("failed: {e}"),
            }
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    servers.shutdown().await;
    result
}
