//! The `weft` command.
//!
//! Exit codes: 0 when the command succeeded (warnings allowed), 1 when the model has errors,
//! 2 for usage errors (bad flags, a project that cannot be read).

mod progress;
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
    /// Compile a project and write its resources, as `inmanta export -j FILE` does: a JSON
    /// array with one object per resource (its fields, `requires` and `id`).
    Export(ExportArgs),
    /// Compile a project and deploy its resources on this host: in dependency order, in
    /// parallel, changing only what differs. A second apply of the same model changes nothing.
    Apply(ApplyArgs),
}

#[derive(Args)]
struct ExportArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// Where to write the resources; `-` for stdout. The file is replaced atomically.
    #[arg(short, long, value_name = "FILE", default_value = "resources.json")]
    output: PathBuf,
}

#[derive(Args)]
struct ApplyArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// Print what would change, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Apply under this directory instead of `/`: every absolute path of a resource is taken
    /// relative to it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Deploy only the resources of this agent; what they require from other agents is taken
    /// as deployed by those agents.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// How the apply report is printed on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Human)]
    report_format: ReportFormat,
    /// Worker threads for the deployment; defaults to the number of cores.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReportFormat {
    Human,
    Json,
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
            Command::Export(args) => export(&args),
            Command::Apply(args) => apply(&args),
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
        print_lines(&outcome.prints)?;
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

/// A project compiled and exported: its sources (for diagnostics), the diagnostics so far,
/// and the graph when everything succeeded.
struct Exported {
    sources: weft_ir::SourceMap,
    diagnostics: Vec<Diagnostic>,
    graph: Option<weft_runtime::graph::ResourceGraph>,
}

/// Compiles and exports a project; `std::print` lines go to stdout as they do for `compile`.
fn compile_and_export(project: &ProjectArgs) -> Result<Exported> {
    if !project.project.is_dir() {
        anyhow::bail!("{} is not a directory", project.project.display());
    }
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &project.project, &project.load_options());
    let (program, mut diagnostics) = (compiled.project, compiled.diagnostics);
    let mut graph = None;
    if let Some(lowered) = compiled.lowered {
        let module_dirs = program.module_dirs();
        let options = weft_runtime::Options { module_dirs: module_dirs.clone(), max_iterations: max_iterations() };
        let (outcome, model) = weft_runtime::evaluate_model(std::sync::Arc::new(lowered), &options);
        print_lines(&outcome.prints)?;
        diagnostics.extend(outcome.errors.into_iter().take(1));
        if let Some(model) = model {
            match weft_runtime::export::export(&model, &module_dirs) {
                Ok(export) => {
                    diagnostics.extend(export.warnings);
                    graph = Some(export.graph);
                }
                Err(failure) => diagnostics.extend(failure.diagnostics),
            }
        }
    }
    Ok(Exported { sources: program.sources, diagnostics, graph })
}

fn export(args: &ExportArgs) -> Result<ExitCode> {
    let exported = compile_and_export(&args.project)?;
    let failed = report(&args.project, &exported.sources, &exported.diagnostics, "export the project")?;
    let Some(graph) = exported.graph.filter(|_| !failed) else { return Ok(ExitCode::from(1)) };
    let mut text = serde_json::to_string(&graph.to_json())?;
    text.push('\n');
    if args.output.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().lock().write_all(text.as_bytes())?;
    } else {
        write_atomically(&args.output, text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a file through a temporary file in the same directory and a rename, so a reader
/// (or a crash) never sees half of it.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let name = path.file_name().context("the output path names no file")?.to_string_lossy();
    let temp = dir.join(format!(".{name}.weft-tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        anyhow::anyhow!("cannot write {}: {e}", path.display())
    })
}

fn apply(args: &ApplyArgs) -> Result<ExitCode> {
    let exported = compile_and_export(&args.project)?;
    let failed = report(&args.project, &exported.sources, &exported.diagnostics, "export the project")?;
    let Some(graph) = exported.graph.filter(|_| !failed) else { return Ok(ExitCode::from(1)) };
    if !args.root.is_dir() {
        anyhow::bail!("--root {} is not a directory", args.root.display());
    }
    let progress = progress::Bar::for_stderr(graph.resources.len());
    let options = weft_runtime::apply::ApplyOptions {
        root: args.root.clone(),
        dry_run: args.dry_run,
        agent: args.agent.clone(),
        threads: args.threads,
        progress: progress.as_ref().map(|bar| bar.callback()),
        ..weft_runtime::apply::ApplyOptions::default()
    };
    let applied = weft_runtime::apply::apply(&graph, &options);
    if let Some(bar) = progress {
        bar.finish();
    }
    match args.report_format {
        ReportFormat::Human => print!("{}", applied.render_text()),
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&applied.to_json())?),
    }
    Ok(if applied.summary().failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Writes the lines `std::print` produced to stdout.
fn print_lines(lines: &[String]) -> Result<()> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for line in lines {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// `INMANTA_MAX_ITERATIONS`, as the reference reads it.
fn max_iterations() -> Option<usize> {
    std::env::var("INMANTA_MAX_ITERATIONS").ok().and_then(|v| v.parse().ok())
}
