//! The `mordant` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mordant::config::{Purpose, Settings};
use mordant::estimator::{FitOptions, ReflectanceScale, Saunderson, Transform};
use mordant::startup::{Application, shutdown_on_signal};
use mordant::store::Store;
use mordant::telemetry;
use mordant_lab::evaluate::{self, Dataset, EvaluateOptions, MODELS};
use mordant_lab::simulate::post::PostOptions;
use mordant_lab::simulate::{
    EvaluationOptions, ForgettingOptions, Grid, NoiseModel, Scenario, SimulationConfig, Simulator,
    World,
};
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
    /// Copy everything in one store (models, versions, batches, keys) into another, empty one:
    /// the embedded store into PostgreSQL, say. Stop the service first.
    Copy {
        /// The store to read: a PostgreSQL URL or sqlite://FILE.
        #[arg(long, value_name = "URL")]
        from: String,
        /// The empty store to write (created or migrated first): a PostgreSQL URL or
        /// sqlite://FILE.
        #[arg(long, value_name = "URL")]
        to: String,
    },
    /// Print the OpenAPI document (the committed openapi/openapi.json is this output).
    Openapi,
    /// Exit 0 when the service answers 200 at URL (the container's HEALTHCHECK).
    Healthcheck {
        /// An http:// URL, e.g. http://127.0.0.1:8080/healthz. Default: /healthz at the
        /// address `serve` listens on (`MORDANT_ADDR` or `server.addr`; a wildcard host is asked
        /// on loopback).
        #[arg(long)]
        url: Option<String>,
    },
    /// Reproduce the paper's experiment on a CSV file and print the table of scores.
    Evaluate(EvaluateArgs),
    /// Simulate a dye house (Kubelka–Munk): write lab dips as CSV, post them to a service,
    /// score predicted recipes in ΔE00 (--evaluate) or measure forgetting (--forgetting-study).
    Simulate(Box<SimulateArgs>),
}

#[derive(Args)]
struct SimulateArgs {
    /// Lab dips to write or post.
    #[arg(long, default_value_t = 1000)]
    rows: usize,
    /// Seed of the simulation: the same seed gives the same rows.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Drift scenario: none, instrument_swap, dye_lot or new_substrate.
    #[arg(long, default_value = "none")]
    scenario: Scenario,
    /// Index of the first row the scenario acts on [default: half of --rows].
    #[arg(long, value_name = "ROW")]
    drift_at: Option<usize>,
    /// First wavelength of the instrument's grid, nm.
    #[arg(long, default_value_t = 360.0)]
    start_nm: f64,
    /// Interval of the instrument's grid, nm.
    #[arg(long, default_value_t = 10.0)]
    interval_nm: f64,
    /// Number of bands of the instrument's grid.
    #[arg(long, default_value_t = 43)]
    count: usize,
    /// Noise: benchtop (a benchtop spectrophotometer as its spec sheet describes it: 0.02 pp
    /// per band; 3 % dye uptake), lab (a noisier instrument: photometric 0.05 pp + 0.5 %,
    /// 0.2 nm jitter, 3 % uptake), process_only (3 % uptake, a perfect instrument) or none.
    #[arg(long, default_value = "benchtop")]
    noise: NoiseModel,
    /// The physics dyed in: realistic (surface reflection by Saunderson's k1 = 0.04, k2 = 0.6;
    /// build-up saturating at 8 % owf; fabric lots differing 4 % in dye yield and 10 % in
    /// whiteness) or ideal (linear in K/S, the regression's own world).
    #[arg(long, default_value = "realistic")]
    world: World,
    /// --evaluate: the model's transform of the spectrum, kubelka_munk or saunderson (with
    /// k1 = 0.04, k2 = 0.6, as the service's "saunderson" model spec defaults) [default:
    /// saunderson in the realistic world, kubelka_munk in the ideal one].
    #[arg(long, value_parser = ["kubelka_munk", "saunderson"])]
    transform: Option<String>,
    /// The fabric lot --dye dyes on (lots differ in dye yield and whiteness in the realistic
    /// world; the same lot dyes the same).
    #[arg(long, default_value_t = 0, requires = "dye")]
    lot: u64,
    /// Dye this recipe once instead of drawing rows (`name=amount,…`, % owf; e.g.
    /// `red_1=1.02,yellow_1=0.12`) on --fabric, in the drifted regime of --scenario when one is
    /// named (dye_lot: a 15 % stronger lot of red_1), and write its lab dip as a row.
    #[arg(long, value_name = "RECIPE", conflicts_with_all = ["post", "evaluate", "forgetting_study", "transfer_study"])]
    dye: Option<String>,
    /// The fabric --dye dyes: bleached_cotton, greige_cotton, polyester_cotton or viscose.
    #[arg(long, default_value = "bleached_cotton", requires = "dye")]
    fabric: String,
    /// Write reflectance as a fraction (0–1) instead of percent.
    #[arg(long)]
    fraction: bool,
    /// Write the CSV here instead of to standard output.
    #[arg(long, value_name = "FILE.csv")]
    out: Option<PathBuf>,
    /// Post the rows to the mordant service at URL (e.g. http://127.0.0.1:8080).
    #[arg(long, value_name = "URL", requires = "model")]
    post: Option<String>,
    /// Name of the model to post to (created if it does not exist).
    #[arg(long)]
    model: Option<String>,
    /// Rows per batch [default: 100; 50 for --forgetting-study].
    #[arg(long)]
    batch_rows: Option<usize>,
    /// Bearer key for the service.
    #[arg(long, env = "MORDANT_ADMIN_KEY", hide_env_values = true)]
    key: Option<String>,
    /// First wavelength of the model's grid, nm.
    #[arg(long, default_value_t = 400.0)]
    model_start_nm: f64,
    /// Interval of the model's grid, nm.
    #[arg(long, default_value_t = 10.0)]
    model_interval_nm: f64,
    /// Number of bands of the model's grid.
    #[arg(long, default_value_t = 31)]
    model_count: usize,
    /// Train a model in process on simulated lab dips and score its predicted recipes in
    /// ΔE00 (D65, CIE 1964 10°) on held-out targets.
    #[arg(long, conflicts_with_all = ["post", "forgetting_study"])]
    evaluate: bool,
    /// Compare a model with a half-life and one without across an instrument swap (figures for
    /// both worlds in docs/simulate.md).
    #[arg(long, conflicts_with = "post")]
    forgetting_study: bool,
    /// Replace the instrument with an overlap: the old model answering for the new instrument
    /// through the transfer map learnt from rows read by both, beside the new instrument's own
    /// model and their combination (concentration RMSE and 95 % coverage; `bench/instrument_swap.py`).
    #[arg(long, conflicts_with_all = ["post", "evaluate", "forgetting_study"])]
    transfer_study: bool,
    /// --transfer-study: samples read by both instruments.
    #[arg(long, default_value_t = 30)]
    transfer_rows: usize,
    /// --transfer-study: rows the new instrument reads after the overlap and the test rows
    /// (scored by both paths, then learnt by its own model, in batches of 10).
    #[arg(long, default_value_t = 300)]
    stream_rows: usize,
    /// Print the --evaluate, --forgetting-study or --transfer-study report as JSON.
    #[arg(long)]
    json: bool,
    /// Lab dips learnt by --evaluate (by --transfer-study: read by the reference instrument).
    #[arg(long, default_value_t = 2000)]
    train_rows: usize,
    /// Held-out targets scored [default: 500 for --evaluate and --transfer-study, 200 for --forgetting-study].
    #[arg(long)]
    test_rows: Option<usize>,
    /// Rows of the first fit of --evaluate, --forgetting-study and --transfer-study.
    #[arg(long, default_value_t = 300)]
    first_fit_rows: usize,
    /// --forgetting-study: rows read by the reference instrument.
    #[arg(long, default_value_t = 2000)]
    pre_swap_rows: usize,
    /// --forgetting-study: rows read by the new instrument.
    #[arg(long, default_value_t = 3000)]
    post_swap_rows: usize,
    /// --forgetting-study: half-life of the forgetting model, rows.
    #[arg(long, default_value_t = 500.0)]
    half_life_rows: f64,
    /// --forgetting-study: recovered means a median ΔE00 at most this above the pre-swap level.
    #[arg(long, default_value_t = 0.5)]
    tolerance: f64,
    /// --forgetting-study: write the curves (one row per model and batch) to this CSV file.
    #[arg(long, value_name = "FILE.csv")]
    curves: Option<PathBuf>,
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
    /// Prior family of the Bayesian models: ard, ridge, smooth or auto (as a model's "prior").
    #[arg(long, default_value = "auto", value_parser = parse_prior)]
    prior: mordant::estimator::PriorFamily,
    /// Non-zero rows an output needs before it is fitted, dense or zero-inflated alike
    /// [default: the service's, 5 and 2].
    #[arg(long)]
    min_informative_rows: Option<f64>,
}

fn parse_prior(value: &str) -> Result<mordant::estimator::PriorFamily, String> {
    mordant::estimator::PriorFamily::parse(value)
        .ok_or_else(|| format!("expected ard, ridge, smooth or auto, found {value:?}"))
}

/// `print!` that says when standard output cannot be written (a full disk) instead of
/// panicking, and stops the command with [`OutputClosed`] when its reader has closed the pipe;
/// flushed, so that no error waits for the exit, which would drop it.
macro_rules! emit {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        write!(out, $($arg)*)
            .and_then(|()| out.flush())
            .map_err(|e| stdout_error(e, "cannot write to standard output"))?
    }};
}

/// The error of a write to standard output, said as `what`: [`OutputClosed`] where the write
/// met a pipe its reader has closed.
fn stdout_error(error: impl Into<anyhow::Error>, what: &'static str) -> anyhow::Error {
    let error = error.into();
    let broken = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
    // csv's error holds its I/O error without giving it as its source.
    let closed = error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(broken)
            || cause
                .downcast_ref::<csv::Error>()
                .is_some_and(|e| matches!(e.kind(), csv::ErrorKind::Io(io) if broken(io)))
    });
    if closed {
        anyhow::Error::new(OutputClosed)
    } else {
        error.context(what)
    }
}

/// Standard output's reader closed the pipe (`mordant openapi | head`): it has what it wanted,
/// and the command stops quietly and successfully, as a filter does.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed by its reader")]
struct OutputClosed;

/// `println!` that says when standard output cannot be written, as [`emit!`].
macro_rules! emitln {
    ($($arg:tt)*) => {
        emit!("{}\n", format_args!($($arg)*))
    };
}

/// An error and its causes on one line, each said once: sqlx's errors, among others, end their
/// own message with their source's, which `{:#}` would then print again.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve => {
            limit_allocator_arenas();
            run_async(serve)
        }
        Command::Migrate => run_async(migrate),
        Command::Copy { from, to } => run_async(|| copy(from, to)),
        Command::Openapi => print_openapi(),
        Command::Healthcheck { url } => url
            .map_or_else(own_health_url, Ok)
            .and_then(|url| healthcheck(&url)),
        Command::Evaluate(args) => run_evaluate(args),
        Command::Simulate(args) => run_simulate(*args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.is::<OutputClosed>() => ExitCode::SUCCESS,
        Err(err) => {
            // eprintln! would panic on a closed standard error; the exit code says it anyway.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// Caps glibc's malloc arenas at one per core, before the runtime starts its threads. glibc
/// gives contending threads up to eight arenas per core, and `malloc_trim` never hands back the
/// free memory at the top of an arena other than the main one: resident memory would climb with
/// each arena the threads come to use (`bench/memory`; BENCHMARKS.md has what this bought). An
/// operator's `MALLOC_ARENA_MAX`, or the `glibc.malloc.arena_max` tunable, is left to decide.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_allocator_arenas() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() || tunables.contains("arena_max") {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` only sets one of glibc's allocator parameters; no pointer is passed.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_allocator_arenas() {}

/// Hands the allocator's free memory back to the operating system once a second. glibc keeps
/// what it freed in its heaps: after a burst of large uploads (batch bodies of hundreds of
/// kilobytes) the peak would stay resident for good (`bench/memory`; BENCHMARKS.md has what
/// this bought). Fixing glibc's mmap threshold instead returns each large buffer as it is
/// freed, but faulting them in anew costs batch predict most of its throughput.
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(f());
    // A fold abandoned at shutdown may still be computing on a blocking thread: its result has
    // nowhere to go, and the exit does not wait for it (dropping the runtime would).
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}

async fn serve() -> anyhow::Result<()> {
    let (environment, settings) = Settings::load()?;
    telemetry::init(&settings.log);
    tracing::info!(
        environment = environment.as_str(),
        "starting mordant {}",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(overlay) = Settings::missing_overlay(environment) {
        tracing::warn!(
            overlay = %overlay.display(),
            "no configuration overlay for this environment: running on the compiled-in \
             defaults and MORDANT__ variables (MORDANT_CONFIG_DIR names the directory)"
        );
    }
    let app = Application::build(settings).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    tokio::spawn(trim_allocator());
    app.run_until_stopped(shutdown).await
}

async fn migrate() -> anyhow::Result<()> {
    let (_, settings) = Settings::load_for(Purpose::Maintain)?;
    telemetry::init(&settings.log);
    let store = Store::open(&settings.database).await?;
    if let Err(e) = store.migrate().await {
        let meaning = mordant::store::lasting_migration_error(&e);
        return Err(e).context(meaning.unwrap_or_else(|| "migration failed".to_owned()));
    }
    store.close().await;
    tracing::info!("migrations applied");
    Ok(())
}

/// `mordant copy`: the source, which must exist at this release's schema, is read; the
/// target, brought to this release's schema and empty, gets everything in one transaction.
async fn copy(from: String, to: String) -> anyhow::Result<()> {
    anyhow::ensure!(from != to, "--from and --to name the same store");
    let location = |url: &str, flag: &str| {
        mordant::store::Location::of_url(
            url,
            flag,
            &format!(
                "{flag} must be a PostgreSQL URL (postgres://…) or the embedded store's file as \
                 sqlite://FILE"
            ),
        )
    };
    let from_location = location(&from, "--from")?;
    let to_location = location(&to, "--to")?;
    let settings = |url: String| mordant::config::DatabaseSettings {
        url,
        path: String::new(),
        max_connections: 4,
        acquire_timeout_secs: 30,
        startup_timeout_secs: 30,
        full_state_every: mordant::store::DEFAULT_FULL_STATE_EVERY,
    };
    // The source is read as it is: never created (a mistyped file would copy nothing) nor
    // migrated (an older release would then refuse it).
    match &from_location {
        mordant::store::Location::Sqlite(path) => anyhow::ensure!(
            path.is_file(),
            "the source store {} does not exist",
            path.display()
        ),
        mordant::store::Location::Postgres(url) => {
            reach_postgres(url, false)
                .await
                .context("cannot open the source store")?;
        }
    }
    let source = Store::open(&settings(from))
        .await
        .context("cannot open the source store")?;
    source.check_schema().await.map_err(|reason| {
        anyhow::anyhow!("the source store is not at this release's schema: {reason}")
    })?;
    let created = match &to_location {
        mordant::store::Location::Postgres(url) => reach_postgres(url, true)
            .await
            .context("cannot open the target store")?,
        mordant::store::Location::Sqlite(_) => false,
    };
    // The copy is one transaction; the schema is migrated before it.
    let left = if created {
        "; the target database created for it holds the schema and no data"
    } else {
        "; nothing was copied into the target (its schema may have been created or migrated)"
    };
    let target = Store::open(&settings(to))
        .await
        .context("cannot open the target store")?;
    if let Err(e) = target.migrate().await {
        let meaning = mordant::store::lasting_migration_error(&e)
            .map_or_else(String::new, |m| format!(": {m}"));
        let left = if created { left } else { "" };
        return Err(e).context(format!("cannot migrate the target store{meaning}{left}"));
    }
    let copied = mordant::store::copy::copy(&source, &target)
        .await
        .with_context(|| format!("copy failed{left}"))?;
    if created {
        emitln!("created the target database");
    }
    source.close().await;
    target.close().await;
    emitln!(
        "copied {} models, {} versions, {} batches and {} API keys",
        copied.models,
        copied.versions,
        copied.batches,
        copied.keys
    );
    Ok(())
}

/// Connects once to the PostgreSQL database `url` names, so that a server that is down says so
/// at once rather than after a pool's wait; where the server has no such database, creates it
/// when `create` is set (as the embedded store's file is created). Whether it created it.
async fn reach_postgres(url: &str, create: bool) -> anyhow::Result<bool> {
    use sqlx::Connection as _;
    use sqlx::migrate::MigrateDatabase as _;
    // What the pools that follow would wait for a connection.
    let wait = std::time::Duration::from_secs(30);
    let connected = tokio::time::timeout(wait, sqlx::PgConnection::connect(url))
        .await
        .map_err(|_| anyhow::anyhow!("the server did not answer within {wait:?}"))?;
    match connected {
        Ok(connection) => {
            connection.close().await?;
            Ok(false)
        }
        // invalid_catalog_name: the server answered, and has no database of that name.
        Err(sqlx::Error::Database(e)) if create && e.code().as_deref() == Some("3D000") => {
            sqlx::Postgres::create_database(url)
                .await
                .context("the database does not exist, and could not be created")?;
            Ok(true)
        }
        Err(e) => Err(e.into()),
    }
}

/// A plain HTTP/1.0 GET with a 3 s timeout: the runtime image has no curl.
/// `/healthz` at the address `serve` would listen on with the same environment and files.
fn own_health_url() -> anyhow::Result<String> {
    let (_, settings) = Settings::load_for(Purpose::Maintain)?;
    let addr = &settings.server.addr;
    let authority = match addr.parse::<std::net::SocketAddr>() {
        // A service bound to every interface answers on loopback.
        Ok(mut socket) if socket.ip().is_unspecified() => {
            socket.set_ip(match socket {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
            socket.to_string()
        }
        // An IP address as given, or a host name (`localhost:8080`) as `serve` resolves it.
        _ => addr.clone(),
    };
    Ok(format!("http://{authority}/healthz"))
}

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
    // A timeout surfaces as the system's "Resource temporarily unavailable": say what it means.
    let failed = |error: std::io::Error| {
        let what = match error.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("no answer from {url} within {} s", timeout.as_secs())
            }
            _ => format!("asking {url}"),
        };
        anyhow::Error::new(error).context(what)
    };
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").map_err(failed)?;
    let mut response = String::new();
    stream
        .take(64 * 1024)
        .read_to_string(&mut response)
        .map_err(failed)?;
    let status = response.lines().next().unwrap_or("");
    anyhow::ensure!(
        status.split(' ').nth(1) == Some("200"),
        "unhealthy: {status:?}"
    );
    Ok(())
}

fn print_openapi() -> anyhow::Result<()> {
    emitln!("{}", mordant::http::openapi_json()?);
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
        fit: {
            let mut fit = if args.plain {
                FitOptions::plain()
            } else {
                FitOptions::default()
            };
            if let Some(rows) = args.min_informative_rows {
                fit.min_informative_rows = rows;
                fit.min_zero_inflated_rows = rows;
            }
            fit
        },
        prior: if args.plain {
            mordant::estimator::PriorFamily::Ard
        } else {
            args.prior
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
        emitln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        emit!("{}", report.to_markdown());
    }
    Ok(())
}

fn run_simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let instrument = Grid::new(args.start_nm, args.interval_nm, args.count)
        .map_err(anyhow::Error::msg)
        .context("instrument grid (--start-nm, --interval-nm, --count)")?;
    let model = Grid::new(
        args.model_start_nm,
        args.model_interval_nm,
        args.model_count,
    )
    .map_err(anyhow::Error::msg)
    .context("model grid (--model-start-nm, --model-interval-nm, --model-count)")?;
    if args.evaluate {
        let options = EvaluationOptions {
            seed: args.seed,
            train_rows: args.train_rows,
            test_rows: args.test_rows.unwrap_or(500),
            first_fit_rows: args.first_fit_rows,
            batch_rows: args.batch_rows.unwrap_or(100),
            noise: args.noise,
            world: args.world,
            transform: match args.transform.as_deref() {
                Some("kubelka_munk") => Transform::KubelkaMunk,
                Some(_) => Transform::Saunderson(Saunderson::TEXTILE),
                None => args.world.transform(),
            },
            ..EvaluationOptions::default()
        };
        let report = mordant_lab::simulate::evaluate(&options, model).context("evaluation")?;
        if args.json {
            emitln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            emit!("{}", report.to_table());
        }
        return Ok(());
    }
    if args.transfer_study {
        let options = mordant_lab::simulate::transfer::TransferOptions {
            seed: args.seed,
            calibration_rows: args.train_rows,
            first_fit_rows: args.first_fit_rows,
            batch_rows: args.batch_rows.unwrap_or(100),
            transfer_rows: args.transfer_rows,
            test_rows: args.test_rows.unwrap_or(500),
            stream_rows: args.stream_rows,
            noise: args.noise,
            world: args.world,
            ..Default::default()
        };
        let report = mordant_lab::simulate::transfer::transfer_study(&options, model)
            .context("transfer study")?;
        if args.json {
            emitln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            emit!("{}", report.to_table());
        }
        return Ok(());
    }
    if args.forgetting_study {
        let options = ForgettingOptions {
            seed: args.seed,
            pre_swap_rows: args.pre_swap_rows,
            post_swap_rows: args.post_swap_rows,
            first_fit_rows: args.first_fit_rows,
            batch_rows: args.batch_rows.unwrap_or(50),
            half_life_rows: args.half_life_rows,
            test_rows: args.test_rows.unwrap_or(200),
            tolerance_de00: args.tolerance,
            noise: args.noise,
            world: args.world,
            ..ForgettingOptions::default()
        };
        let report =
            mordant_lab::simulate::forgetting_study(&options, model).context("forgetting study")?;
        if let Some(path) = &args.curves {
            std::fs::write(path, report.curves_csv())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("curves written to {}", path.display());
        }
        if args.json {
            emitln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            emit!("{}", report.to_table());
        }
        return Ok(());
    }
    let sim = Simulator::new(SimulationConfig {
        scenario: args.scenario,
        drift_at: args.drift_at.unwrap_or(args.rows / 2),
        grid: instrument,
        noise: args.noise,
        world: args.world,
        ..SimulationConfig::new(args.seed)
    });
    if let Some(url) = args.post {
        let options = PostOptions {
            url,
            model: args.model.context("--post needs --model")?,
            key: args.key,
            rows: args.rows,
            batch_rows: args.batch_rows.unwrap_or(100),
            model_grid: model,
            attempts: 5,
        };
        run_async(|| async {
            let summary = mordant_lab::simulate::post::post(&sim, &options).await?;
            let seconds = summary.elapsed.as_secs_f64();
            emitln!(
                "posted {} rows in {} batches to model {:?} ({}) in {:.2} s ({:.0} rows/s, {} retries)",
                summary.rows,
                summary.batches,
                options.model,
                if summary.created {
                    "created"
                } else {
                    "existing"
                },
                seconds,
                summary.rows as f64 / seconds.max(1e-9),
                summary.retries
            );
            Ok(())
        })?;
        return Ok(());
    }
    let scale = if args.fraction {
        ReflectanceScale::Fraction
    } else {
        ReflectanceScale::Percent
    };
    let dyed = match &args.dye {
        Some(recipe) => {
            let recipe = mordant_lab::simulate::parse_recipe(&sim, recipe).context("--dye")?;
            let fabric =
                mordant_lab::simulate::fabric_code(&sim, &args.fabric).context("--fabric")?;
            let drifted = args.scenario != Scenario::None;
            Some(sim.dye(fabric, args.lot, &recipe, 0, drifted))
        }
        None => None,
    };
    let write = |out: &mut dyn std::io::Write| match &dyed {
        Some(dip) => {
            mordant_lab::simulate::write_dips(&sim, std::iter::once(dip.clone()), scale, out)
        }
        None => mordant_lab::simulate::write_csv(&sim, args.rows, scale, out),
    };
    match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            write(&mut std::io::BufWriter::new(file))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        None => {
            let stdout = std::io::stdout();
            write(&mut stdout.lock())
                .map_err(|e| stdout_error(e, "writing CSV to standard output"))?;
        }
    }
    Ok(())
}
