//! The `mordant` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mordant::config::Settings;
use mordant::estimator::FitOptions;
use mordant::evaluate::{self, Dataset, EvaluateOptions, MODELS};
use mordant::startup::{Application, shutdown_on_signal};
use mordant::store::Store;
use mordant::telemetry;
use tokio_util::sync::CancellationToken;

/// Incremental Bayesian linear regression for dye-concentration prediction.
#[derive(Parser)]
#[command(name = "mordant", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (configuration: config/, MORDANT_ENV, DATABASE_URL, MORDANT_ADDR).
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Print the OpenAPI document (the committed openapi/openapi.json is this output).
    Openapi,
    /// Exit 0 when the service answers 200 at URL (the container's HEALTHCHECK).
    Healthcheck {
        /// An http:// URL, e.g. http://127.0.0.1:8080/healthz.
        #[arg(long, default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
    /// Reproduce the paper's experiment on a CSV file and print the table of scores.
    Evaluate(EvaluateArgs),
}

#[derive(Args)]
struct EvaluateArgs {
    /// CSV file with a header row (for example the dyeing data set).
    #[arg(long, value_name = "FILE.csv")]
    data: PathBuf,
    /// Comma-separated column-name prefixes of the input features
    /// [default: the dyeing data's 小缸面料大类,小缸光谱,小缸配方组合].
    #[arg(long, value_delimiter = ',', value_name = "P1,P2,..")]
    features: Vec<String>,
    /// Comma-separated column-name prefixes of the outputs
    /// [default: the dyeing data's 大缸物料代码].
    #[arg(long, value_delimiter = ',', value_name = "P1,..")]
    outputs: Vec<String>,
    /// Number of random splits; each cell is the median over them.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Seed of the first split (trial t uses seed + t).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print JSON instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Run Algorithms 2 and 3 exactly as published, without mordant's safeguards for sparse
    /// outputs (no noise prior, every output fitted at once).
    #[arg(long)]
    plain: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve => run_async(serve),
        Command::Migrate => run_async(migrate),
        Command::Openapi => print_openapi(),
        Command::Healthcheck { url } => healthcheck(&url),
        Command::Evaluate(args) => run_evaluate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Hands the allocator's free memory back to the operating system once a second. glibc keeps
/// what it freed in its heaps: after a burst of large uploads (a 1,000-row batch is about 700 kB
/// of JSON and 280 kB of values) the peak would stay resident for good. `bench/memory`: a
/// million rows into one model grew the resident memory by 20 MB after the first 10,000 rows
/// without this. (Fixing glibc's mmap threshold instead returns each large buffer as it is
/// freed, but the page faults of mapping them anew cost batch predict 60 % of its rows/s.)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
async fn trim_allocator() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // SAFETY: `malloc_trim` only returns free pages to the operating system, under glibc's
        // own locks; no pointer is passed.
        let trim = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) });
        if trim.await.is_err() {
            return;
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
async fn trim_allocator() {}

fn run_async<F: Future<Output = anyhow::Result<()>>>(f: impl FnOnce() -> F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(f())
}

async fn serve() -> anyhow::Result<()> {
    let (environment, settings) = Settings::load()?;
    telemetry::init(&settings.log);
    tracing::info!(
        environment = environment.as_str(),
        "starting mordant {}",
        env!("CARGO_PKG_VERSION")
    );
    let app = Application::build(settings).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    tokio::spawn(trim_allocator());
    app.run_until_stopped(shutdown).await
}

async fn migrate() -> anyhow::Result<()> {
    let (_, settings) = Settings::load()?;
    telemetry::init(&settings.log);
    let store = Store::open(&settings.database).await?;
    store.migrate().await.context("migration failed")?;
    store.close().await;
    tracing::info!("migrations applied");
    Ok(())
}

/// A plain HTTP/1.0 GET with a 3 s timeout: the runtime image has no curl.
fn healthcheck(url: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    use std::time::Duration;
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?} is not an http:// URL"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let address = authority
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {authority}"))?
        .next()
        .with_context(|| format!("{authority} has no address"))?;
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&address, timeout)
        .with_context(|| format!("cannot connect to {authority}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n")?;
    let mut response = String::new();
    stream.take(64 * 1024).read_to_string(&mut response)?;
    let status = response.lines().next().unwrap_or("");
    anyhow::ensure!(
        status.split(' ').nth(1) == Some("200"),
        "unhealthy: {status:?}"
    );
    Ok(())
}

fn print_openapi() -> anyhow::Result<()> {
    println!("{}", mordant::http::openapi_json()?);
    Ok(())
}

fn run_evaluate(args: EvaluateArgs) -> anyhow::Result<()> {
    let or_default = |given: Vec<String>, default: &[&str]| {
        if given.is_empty() {
            default.iter().map(|s| s.to_string()).collect()
        } else {
            given
        }
    };
    let features = or_default(args.features, &evaluate::dataset::DYEING_FEATURE_PREFIXES);
    let outputs = or_default(args.outputs, &evaluate::dataset::DYEING_OUTPUT_PREFIXES);
    let data = Dataset::from_csv(&args.data, &features, &outputs)?;
    let options = EvaluateOptions {
        trials: args.trials,
        seed: args.seed,
        fit: if args.plain {
            FitOptions::plain()
        } else {
            FitOptions::default()
        },
        ..EvaluateOptions::default()
    };
    let bar = ProgressBar::new((args.trials * MODELS.len()) as u64).with_style(
        ProgressStyle::with_template("{spinner} trial {msg} [{bar:30}] {pos}/{len} {elapsed}")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    eprintln!(
        "{} rows, {} features, {} outputs, {} trials",
        data.rows(),
        data.feature_names.len(),
        data.output_names.len(),
        args.trials
    );
    let mut done = 0usize;
    let report = evaluate::run(&data, &options, |model| {
        bar.set_message(format!("{} ({model})", done / MODELS.len() + 1));
        done += 1;
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_markdown());
    }
    Ok(())
}
