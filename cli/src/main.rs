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
