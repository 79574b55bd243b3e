//! `informer-host`: run or check a host configuration.
//!
//! ```text
//! informer-host run   [--config host.toml] [--metrics-addr 127.0.0.1:9464] [--kubeconfig F] [--context C]
//! informer-host check [--config host.toml]
//! informer-host crds                  # the Plugin and TenantPolicy CRDs, as YAML
//! ```
//!
//! Logging: `--log-format text|json` (or `[host] log_format`), filtered by
//! `RUST_LOG` (default `info`), written to stderr.
//!
//! Signals while `run` runs: SIGINT/SIGTERM shut down in order; SIGHUP
//! re-reads the config file and applies the plugin changes (an invalid file
//! is logged and changes nothing).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use informer_host::app::{self, KubeOptions, RunOptions};
use informer_host::config::{Config, LogFormat};

/// Kubernetes shared informers whose handlers are sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "informer-host", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// The config file.
    #[arg(long, short, global = true, default_value = "host.toml", env = "INFORMER_HOST_CONFIG")]
    config: PathBuf,

    /// Log line format (default: `[host] log_format`, else text). RUST_LOG filters.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
}

#[derive(Subcommand)]
enum Command {
    /// Start every informer and plugin of the config; run until SIGINT/SIGTERM.
    /// SIGHUP re-reads the config and applies the plugin changes.
    Run {
        /// Serve /metrics, /healthz and /readyz here (overrides `[host] metrics_addr`;
        /// port 0 picks a free port, which is logged).
        #[arg(long)]
        metrics_addr: Option<SocketAddr>,
        /// Kubeconfig file for `kube` sources (default: KUBECONFIG, ~/.kube/config, in-cluster).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context for `kube` sources (default: the current context).
        #[arg(long)]
        context: Option<String>,
        /// How long in-flight plugin calls may take at shutdown (overrides `[host] shutdown_grace`).
        #[arg(long, value_parser = humantime::parse_duration)]
        shutdown_grace: Option<Duration>,
    },
    /// Validate the config, compile and type-check every plugin, and print a table.
    Check,
    /// Print the CustomResourceDefinitions of `Plugin` and `TenantPolicy` (YAML).
    Crds,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Crds = cli.command {
        print!("{}", informer_host::kube_plugins::crds_yaml());
        return Ok(ExitCode::SUCCESS);
    }
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    let log_format = cli.log_format.or(config.host.log_format).unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("informer-host")
        .build()
        .context("cannot start the tokio runtime")?;
    let code = match cli.command {
        Command::Check => {
            let report = rt.block_on(async {
                let config = config.clone();
                tokio::task::spawn_blocking(move || app::check(&config)).await
            })?;
            print!("{}", report.render(&config));
            if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Command::Crds => unreachable!("printed before the config is read"),
        Command::Run { metrics_addr, kubeconfig, context, shutdown_grace } => {
            app::init_logging(log_format);
            let opts = RunOptions { metrics_addr, kube: KubeOptions { kubeconfig, context }, shutdown_grace };
            rt.block_on(app::run(&config, &opts))?;
            ExitCode::SUCCESS
        }
    };
    // Calls still running past the grace period do not hold the exit.
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(code)
}
