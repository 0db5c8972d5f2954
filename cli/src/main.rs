//! The `weft` command.
//!
//! Exit codes: 0 when the command succeeded (warnings allowed), 1 when the model has errors,
//! 2 for usage errors (bad flags, a project that cannot be read).

mod render;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::Diagnostic;

use crate::render::{ColorChoice, Emitter, ErrorFormat};

#[derive(Parser)]
#[command(name = "weft", version, about = "An ahead-of-time compiler and runtime for Inmanta models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load, parse and statically check a project, without evaluating it.
    Check(CheckArgs),
    /// Compile a project: check it, then evaluate the model. `std::print` output goes to
    /// stdout, diagnostics to stderr.
    Compile(CompileArgs),
}

#[derive(Args)]
struct CompileArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// Print an intermediate form instead of evaluating: `ir` is the lowered program (the
    /// project's namespaces; add `--emit-std` for std's too).
    #[arg(long, value_name = "FORM")]
    emit: Option<Emit>,
    /// With `--emit`, include the std namespaces.
    #[arg(long)]
    emit_std: bool,
    /// Print evaluation statistics on stderr.
    #[arg(long)]
    stats: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Emit {
    Ir,
}

/// Options shared by every command that reads a project.
#[derive(Args)]
struct ProjectArgs {
    /// The project directory: holds `main.cf` and usually `project.yml`.
    #[arg(default_value = ".")]
    project: PathBuf,
    /// A Python environment whose site-packages hold v2 modules; defaults to `$VIRTUAL_ENV`.
    #[arg(long, value_name = "PATH")]
    python_env: Option<PathBuf>,
    /// How diagnostics are printed.
    #[arg(long, value_enum, default_value_t = ErrorFormat::Human)]
    error_format: ErrorFormat,
    /// Whether to color human-readable diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

impl ProjectArgs {
    fn load_options(&self) -> LoadOptions {
        let python_env = self.python_env.clone().or_else(|| std::env::var_os("VIRTUAL_ENV").map(PathBuf::from));
        LoadOptions { python_env }
    }
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    project: ProjectArgs,
}

/// The stack for the thread doing the work: passes over syntax trees recurse, and the parser
/// bounds their depth, but a generous stack keeps a margin on any platform's defaults.
const WORKER_STACK: usize = 256 * 1024 * 1024;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let worker =
        std::thread::Builder::new().name("weft".into()).stack_size(WORKER_STACK).spawn(move || match cli.command {
            Command::Check(args) => check(&args),
            Command::Compile(args) => compile(&args),
        });
    let result = match worker.map(|w| w.join()) {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(e) => Err(anyhow::anyhow!("cannot start a worker thread: {e}")),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints diagnostics on stderr and a closing summary; returns whether there were errors.
fn report(args: &ProjectArgs, sources: &weft_ir::SourceMap, diagnostics: &[Diagnostic], what: &str) -> Result<bool> {
    let emitter = Emitter { format: args.error_format, color: args.color.for_stderr(), sources };
    let stderr = std::io::stderr();
    let mut out = stderr.lock();
    emitter.emit_all(diagnostics, &mut out)?;
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    if args.error_format == ErrorFormat::Human && (errors > 0 || warnings > 0) {
        use std::io::Write;
        let plural = |n: usize, word: &str| if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") };
        if errors > 0 {
            let tail = if warnings > 0 { format!("; {} emitted", plural(warnings, "warning")) } else { String::new() };
            writeln!(out, "error: could not {what} due to {}{tail}", plural(errors, "previous error"))?;
        } else {
            writeln!(out, "warning: {} emitted", plural(warnings, "warning"))?;
        }
    }
    Ok(errors > 0)
}

fn check(args: &CheckArgs) -> Result<ExitCode> {
    let project = &args.project;
    if !project.project.is_dir() {
        anyhow::bail!("{} is not a directory", project.project.display());
    }
    let arena = bumpalo::Bump::new();
    let (mut program, mut diagnostics) = load_project(&arena, &project.project, &project.load_options());
    // Semantic checks on a tree with syntax errors would mostly report their consequences.
    if !diagnostics.iter().any(Diagnostic::is_error) {
        let checked = weft_frontend::check::check(&mut program);
        diagnostics.extend(checked.diagnostics);
    }
    let failed = report(project, &program.sources, &diagnostics, "check the project")?;
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn compile(args: &CompileArgs) -> Result<ExitCode> {
    use std::io::Write;
    let project = &args.project;
    if !project.project.is_dir() {
        anyhow::bail!("{} is not a directory", project.project.display());
    }
    let started = std::time::Instant::now();
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &project.project, &project.load_options());
    let (program, mut diagnostics) = (compiled.project, compiled.diagnostics);
    if let Some(lowered) = compiled.lowered {
        let lowered = std::sync::Arc::new(lowered);
        let loaded = started.elapsed();
        if args.emit == Some(Emit::Ir) {
            report(project, &program.sources, &diagnostics, "compile the project")?;
            let with_std = args.emit_std;
            print!("{}", lowered.text(&|ns| with_std || !(ns == "std" || ns.starts_with("std::"))));
            return Ok(ExitCode::SUCCESS);
        }
        let options = weft_runtime::Options { module_dirs: program.module_dirs(), max_iterations: max_iterations() };
        let outcome = weft_runtime::evaluate(lowered, &options);
        {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            for line in &outcome.prints {
                writeln!(out, "{line}")?;
            }
            out.flush()?;
        }
        if args.stats {
            eprintln!(
                "weft: {} instances, {} iterations, {}; front end {:.3}s, total {:.3}s",
                outcome.instances,
                outcome.iterations,
                outcome.tables,
                loaded.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
        }
        // The reference reports one error: the most important one.
        diagnostics.extend(outcome.errors.into_iter().take(1));
    }
    let failed = report(project, &program.sources, &diagnostics, "compile the project")?;
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `INMANTA_MAX_ITERATIONS`, as the reference reads it.
fn max_iterations() -> Option<usize> {
    std::env::var("INMANTA_MAX_ITERATIONS").ok().and_then(|v| v.parse().ok())
}
