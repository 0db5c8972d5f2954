//! The `weft` command.
//!
//! Exit codes: 0 when the command succeeded (warnings allowed), 1 when the model has errors,
//! 2 for usage errors (bad flags, a project that cannot be read).

mod progress;
mod render;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use weft_frontend::project::{LoadOptions, load_project};
use weft_ir::Diagnostic;
use weft_runtime::graph::ResourceGraph;

use crate::render::{ColorChoice, Emitter, ErrorFormat, Sources};

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
    /// Takes an artifact as well as a project.
    Apply(ApplyArgs),
    /// Compile a project into an artifact (`model.weft`): one file that `weft run`,
    /// `weft export` and `weft apply` evaluate on hosts without the sources or Python.
    Build(BuildArgs),
    /// Evaluate an artifact (or a project) with this host's inputs, as `weft compile` does.
    Run(CompileArgs),
    /// Describe an artifact: version, target, size, sections, provenance, and the inputs the
    /// model reads from its host.
    Inspect(InspectArgs),
}

#[derive(Args)]
struct BuildArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// Where to write the artifact. The file is replaced atomically.
    #[arg(short, long, value_name = "FILE", default_value = "model.weft")]
    output: PathBuf,
}

#[derive(Args)]
struct InspectArgs {
    /// The artifact.
    artifact: PathBuf,
    /// `human` or `json`.
    #[arg(long, value_enum, default_value_t = ReportFormat::Human)]
    format: ReportFormat,
}

#[derive(Args)]
struct ExportArgs {
    #[command(flatten)]
    project: ProjectArgs,
    #[command(flatten)]
    inputs: InputArgs,
    /// Where to write the resources; `-` for stdout. The file is replaced atomically.
    #[arg(short, long, value_name = "FILE", default_value = "resources.json")]
    output: PathBuf,
}

#[derive(Args)]
struct ApplyArgs {
    #[command(flatten)]
    project: ProjectArgs,
    #[command(flatten)]
    inputs: InputArgs,
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
    /// Worker threads for the deployment alone; defaults to `--jobs`.
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
    #[command(flatten)]
    inputs: InputArgs,
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
    /// The project directory (holds `main.cf` and usually `project.yml`), or for the
    /// commands that evaluate, an artifact built by `weft build`.
    #[arg(default_value = ".")]
    project: PathBuf,
    /// A Python environment whose site-packages hold v2 modules, and whose `bin/python3` runs
    /// the modules' Python plugins; defaults to `$VIRTUAL_ENV`.
    #[arg(long, value_name = "PATH")]
    python_env: Option<PathBuf>,
    /// How diagnostics are printed.
    #[arg(long, value_enum, default_value_t = ErrorFormat::Human)]
    error_format: ErrorFormat,
    /// Whether to color human-readable diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// How many threads parse, evaluate, export and deploy; defaults to the number of cores
    /// (or `RAYON_NUM_THREADS`). The results are the same whatever the number.
    #[arg(short = 'j', long, value_name = "N", value_parser = parse_jobs)]
    jobs: Option<NonZeroUsize>,
}

/// Parses `--jobs`: a positive number of threads.
fn parse_jobs(text: &str) -> Result<NonZeroUsize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) => NonZeroUsize::new(n).ok_or_else(|| "the number of threads must be at least 1".to_string()),
        Err(_) => Err("expected a number of threads (a positive integer)".to_string()),
    }
}

impl ProjectArgs {
    fn load_options(&self) -> LoadOptions {
        LoadOptions { python_env: self.python_env() }
    }

    fn python_env(&self) -> Option<PathBuf> {
        self.python_env.clone().or_else(|| std::env::var_os("VIRTUAL_ENV").map(PathBuf::from))
    }

    /// The Python environment's interpreter, which runs the modules' own Python plugins so
    /// that they import what the environment holds; `None` (`python3` from `PATH`) without an
    /// environment or when it has no `bin/python3`.
    fn python_interpreter(&self) -> Option<PathBuf> {
        let interpreter = self.python_env()?.join("bin").join("python3");
        // Absolute: the plugins run in the project's directory, not necessarily this one.
        interpreter.is_file().then(|| std::path::absolute(&interpreter).unwrap_or(interpreter))
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

/// The stack of each thread of rayon's pool. Passes over syntax trees grow their stack on
/// demand (`stacker`), but a stack well above the platform's default keeps the same margin for
/// the rest of the work; it is address space, committed only as far as it is used, and is
/// smaller than [`WORKER_STACK`] because there is one per core.
const POOL_STACK: usize = 64 * 1024 * 1024;

/// The evaluator allocates and frees millions of small objects (values, task bodies, scope
/// tables); mimalloc's thread-local free lists serve that pattern far better than glibc's
/// malloc, whose consolidation of freed chunks showed up as a tenth of the profile.
#[global_allocator]
static GLOBAL: WordAlignedFirst = WordAlignedFirst;

/// mimalloc, asked through its plain entry points whenever the alignment allows. The
/// `mimalloc` crate's allocator calls `mi_malloc_aligned` for every allocation, whose fast path
/// costs about twice `mi_malloc`'s (the allocator's 102k calls were 1.9% of the instructions
/// of the 9k-instance benchmark). Every mimalloc block is a whole number of machine words in a
/// word-aligned page, so `mi_malloc` serves any alignment up to a word; only larger ones take
/// the aligned entry points.
struct WordAlignedFirst;

/// The alignment every block of `mi_malloc` has (`MI_INTPTR_SIZE`).
const MI_WORD: usize = std::mem::size_of::<usize>();

// SAFETY: every method hands the request to mimalloc, which returns memory of at least the
// requested size aligned as requested or null: the plain entry points are used only for
// alignments of at most a word, which all of mimalloc's blocks have, and the others get the
// aligned entry points. Memory from either kind is freed by `mi_free` and resized by
// `mi_realloc`/`mi_realloc_aligned`, which accept blocks of both kinds.
unsafe impl std::alloc::GlobalAlloc for WordAlignedFirst {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= MI_WORD {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= MI_WORD {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc (see the impl).
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        // SAFETY: `ptr` came from this allocator with `layout`'s alignment (see the impl).
        unsafe {
            if layout.align() <= MI_WORD {
                mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
            }
        }
    }
}

/// mimalloc's `mi_option_purge_delay` (15 in the headers of both mimalloc 2 and 3; the sys
/// crate does not export it as a constant).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc's `mi_option_arena_reserve` (23 in the headers of mimalloc 2, which the sys crate
/// builds by default; not exported as a constant either).
#[cfg(target_os = "linux")]
const MI_OPTION_ARENA_RESERVE: libmimalloc_sys::mi_option_t = 23;

/// No arena reservation: mimalloc takes its segments from the system one by one instead of
/// carving them out of one reserved gigabyte. On the 93k-instance benchmark the peak resident
/// memory is 12 MB lower for `weft compile` (133 MB against 121 MB) and 6 MB lower for
/// `weft run` (126 MB against 120 MB), in the same time. mimalloc reads the option when it
/// reserves its first arena, at the first allocation, which the Rust runtime makes before
/// `main` (setting it there changed nothing, measured); so the option is set from the
/// executable's constructors, which run before (mimalloc allocates nothing of its own before
/// it is first called). Elsewhere than Linux mimalloc keeps its arena.
#[cfg(target_os = "linux")]
extern "C" fn configure_arenas() {
    // SAFETY: `mi_option_set` only stores an option value; 0 is a valid size for this option.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_RESERVE, 0) };
}

#[cfg(target_os = "linux")]
#[used]
// SAFETY: `.init_array` holds pointers to functions the C runtime calls, without arguments,
// before `main`; `configure_arenas` is such a function, and it only stores an option value.
#[unsafe(link_section = ".init_array")]
static CONFIGURE_ARENAS: extern "C" fn() = configure_arenas;

/// Configures mimalloc for the evaluator's pattern: many small objects, a peak that is the
/// working set, a short process.
///
/// * No purging of freed memory. By default mimalloc gives freed pages back to the kernel
///   after 10 ms, and the evaluator, which frees and allocates task bodies all the time, then
///   takes a page fault to get each page back zeroed: about half of `weft compile`'s time on
///   the 93k-instance benchmark went to the kernel zeroing pages. Keeping freed pages costs
///   no memory that matters, since the peak is the working set.
/// * No transparent huge pages. mimalloc asks for them on its arenas, and with them touching
///   one byte of a 2 MB region makes all of it resident: 341 MB instead of 288 MB at the peak
///   of the 93k-instance benchmark, and 44 MB instead of 22 MB for a small project, for no
///   measurable gain in time. mimalloc's own option is read when it starts, before `main`,
///   so the process turns them off itself; the kernel checks the flag at each page fault,
///   so it holds for the arenas mimalloc already reserved.
fn configure_allocator() {
    // SAFETY: `mi_option_set` only stores an option value; any value is valid for this option,
    // and it is called before any other thread exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    #[cfg(target_os = "linux")]
    // SAFETY: `PR_SET_THP_DISABLE` with these arguments only sets a flag of the process; it
    // touches no memory of ours. A kernel without it returns an error, which changes nothing.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Has every thread of rayon's pool give the kernel back the memory its mimalloc heap holds
/// free. The pool's threads parse files in parallel, and their heaps keep the pages of what
/// they allocated (trees, interners) once the front end is done with it; mimalloc looks at a
/// thread's freed pages only when that thread allocates again, and the pool's threads idle
/// through the evaluation, where the process's memory peaks (0.4 MB of `weft compile`'s peak
/// on the 93k-instance benchmark with two threads). Purging is turned on for that moment
/// only (see [`configure_allocator`]); the evaluating thread keeps its own free pages, which
/// it reuses at once.
fn return_pool_memory() {
    // SAFETY: `mi_option_set` only stores an option value, and any value is valid for the
    // purge delay.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    rayon::broadcast(|_| {
        // SAFETY: `mi_collect` runs on each pool thread for that thread's own heap, which is
        // what it is for; it frees no block in use.
        unsafe { libmimalloc_sys::mi_collect(true) }
    });
    // SAFETY: as the first call.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

/// The CPU time and page faults of the calling thread, for `--stats`: the evaluation runs on
/// one thread, and the kernel's share of its time (zeroing fresh pages) is a large part of
/// the time of big models.
fn thread_usage() -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `getrusage` writes one `rusage` into the pointer it is given, which points
        // to enough space for one; it reads nothing else of ours.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: `getrusage` returned 0, so it initialised the structure.
        let usage = unsafe { usage.assume_init() };
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Some(format!(
            "user {:.3}s, system {:.3}s, {} page faults",
            seconds(usage.ru_utime),
            seconds(usage.ru_stime),
            usage.ru_minflt + usage.ru_majflt
        ))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

fn main() -> ExitCode {
    configure_allocator();
    let cli = Cli::parse();
    if let Some(project) = cli.command.project()
        && let Err(e) = configure_threads(project.jobs)
    {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    let worker =
        std::thread::Builder::new().name("weft".into()).stack_size(WORKER_STACK).spawn(move || match cli.command {
            Command::Check(args) => check(&args),
            Command::Compile(args) => compile(&args),
            Command::Export(args) => export(&args),
            Command::Apply(args) => apply(&args),
            Command::Build(args) => build(&args),
            Command::Run(args) => compile(&args),
            Command::Inspect(args) => inspect(&args),
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

impl Command {
    /// The project options of the commands that read a project (all but `inspect`).
    fn project(&self) -> Option<&ProjectArgs> {
        match self {
            Command::Check(args) => Some(&args.project),
            Command::Compile(args) | Command::Run(args) => Some(&args.project),
            Command::Export(args) => Some(&args.project),
            Command::Apply(args) => Some(&args.project),
            Command::Build(args) => Some(&args.project),
            Command::Inspect(_) => None,
        }
    }
}

/// Configures rayon's global pool, which every parallel stage uses (parsing, evaluation,
/// export, deployment), once, before any of them runs: `jobs` threads, or rayon's default.
fn configure_threads(jobs: Option<NonZeroUsize>) -> Result<()> {
    let mut builder = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("weft-{i}")).stack_size(POOL_STACK);
    if let Some(jobs) = jobs {
        builder = builder.num_threads(jobs.get());
    }
    builder.build_global().map_err(|e| anyhow::anyhow!("cannot start the worker threads: {e}"))
}

/// Prints diagnostics on stderr and a closing summary; returns whether there were errors.
fn report(args: &ProjectArgs, sources: Sources<'_>, diagnostics: &[Diagnostic], what: &str) -> Result<bool> {
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
    let failed = report(project, Sources::Text(&program.sources), &diagnostics, "check the project")?;
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn compile(args: &CompileArgs) -> Result<ExitCode> {
    let project = &args.project;
    if args.emit == Some(Emit::Ir) {
        if !project.project.is_dir() {
            anyhow::bail!("{} is not a project directory (`--emit=ir` needs the sources)", project.project.display());
        }
        let arena = bumpalo::Bump::new();
        let compiled = weft_frontend::compile(&arena, &project.project, &project.load_options());
        let failed =
            report(project, Sources::Text(&compiled.project.sources), &compiled.diagnostics, "compile the project")?;
        if let (Some(lowered), false) = (compiled.lowered, failed) {
            let with_std = args.emit_std;
            print!("{}", lowered.text(&|ns| with_std || !(ns == "std" || ns.starts_with("std::"))));
            return Ok(ExitCode::SUCCESS);
        }
        return Ok(ExitCode::from(1));
    }
    let started = std::time::Instant::now();
    let mut evaluated = evaluate(project, &args.inputs, false)?;
    if let (true, Some(outcome)) = (args.stats, &evaluated.outcome) {
        eprintln!(
            "weft: {} instances, {} iterations, {}; loaded in {:.3}s, total {:.3}s",
            outcome.instances,
            outcome.iterations,
            outcome.tables,
            evaluated.loaded.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        if let Some(usage) = thread_usage() {
            eprintln!("weft: this thread: {usage}");
        }
    }
    let failed = evaluated.report(project, "compile the project")?;
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// What an evaluation takes from the command line: what the model reads from its host, and
/// how much memory it may use.
#[derive(Args, Clone, Default)]
struct InputArgs {
    /// Facts for `std::getfact`, standing in for the orchestrator: a JSON object mapping
    /// resource ids (`std::testing::NullResource[agent,name=a]`) to objects of facts.
    #[arg(long, value_name = "FILE")]
    facts: Option<PathBuf>,
    /// Sets a parameter that `project.yml` declares (`weft: parameters:`), replacing the
    /// default its assignment in `main.cf` gives. Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Stops the evaluation with an error, naming the entity that grew, once weft's resident
    /// memory exceeds SIZE (`512M`, `8G`; `none` for no limit). A model that constructs
    /// instances without end otherwise runs until the system kills a process. Defaults to 90%
    /// of this machine's memory, or of its control group's limit.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_limit)]
    max_memory: Option<MemoryLimitArg>,
}

/// `--max-memory`: a limit, or `none`.
#[derive(Clone, Debug)]
enum MemoryLimitArg {
    Limit(weft_runtime::memory::MemoryLimit),
    None,
}

fn parse_memory_limit(text: &str) -> Result<MemoryLimitArg, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(MemoryLimitArg::None);
    }
    let bytes = weft_runtime::memory::parse_size(text)?;
    Ok(MemoryLimitArg::Limit(weft_runtime::memory::MemoryLimit {
        bytes,
        origin: format!("`--max-memory {}`", text.trim()),
    }))
}

impl InputArgs {
    fn memory_limit(&self) -> Option<weft_runtime::memory::MemoryLimit> {
        match &self.max_memory {
            Some(MemoryLimitArg::Limit(limit)) => Some(limit.clone()),
            Some(MemoryLimitArg::None) => None,
            None => weft_runtime::memory::MemoryLimit::default_for_this_machine(),
        }
    }
}

/// Where diagnostics of an evaluation point: the project's sources, or an artifact's line
/// tables.
enum OwnedSources {
    Text(weft_ir::SourceMap),
    Lines(Vec<weft_ir::program::FileInfo>),
    /// The project's sources without the texts of the files read from disk, which nothing
    /// reads while the model is evaluated (766 KB of the 93k-instance benchmark's peak
    /// memory), and the program's line tables for when a file changed since it was read.
    Released {
        map: weft_ir::SourceMap,
        lines: Vec<weft_ir::program::FileInfo>,
    },
}

impl OwnedSources {
    /// A project's sources, without their texts for the evaluation of `executable` (see
    /// `Released`).
    fn released(mut map: weft_ir::SourceMap, executable: &weft_vm::Executable) -> OwnedSources {
        map.files_mut().for_each(weft_ir::SourceFile::release_text);
        OwnedSources::Released { map, lines: executable.program.files.clone() }
    }

    /// Reads the released texts again, for excerpts in diagnostics: every file's text if all
    /// are unchanged, else the line tables (the diagnostics then show file, line and column,
    /// as for an artifact).
    fn restore(&mut self) {
        if let OwnedSources::Released { map, lines } = self {
            *self = if weft_frontend::project::restore_sources(map) {
                OwnedSources::Text(std::mem::take(map))
            } else {
                OwnedSources::Lines(std::mem::take(lines))
            };
        }
    }

    fn borrow(&self) -> Sources<'_> {
        match self {
            OwnedSources::Text(map) => Sources::Text(map),
            OwnedSources::Lines(files) | OwnedSources::Released { lines: files, .. } => Sources::Lines(files),
        }
    }
}

/// A project or an artifact, evaluated.
struct Evaluated {
    sources: OwnedSources,
    /// Static diagnostics, then the evaluation's one reported error.
    diagnostics: Vec<Diagnostic>,
    /// `None` when the model did not get as far as evaluation.
    outcome: Option<weft_runtime::Outcome>,
    /// The evaluated model, for the export (when asked for and the evaluation succeeded).
    model: Option<weft_runtime::export::Model>,
    modules: weft_runtime::modules::Modules,
    /// Time to load the sources or the artifact, up to the start of evaluation.
    loaded: std::time::Duration,
}

impl Evaluated {
    fn report(&mut self, project: &ProjectArgs, what: &str) -> Result<bool> {
        if !self.diagnostics.is_empty() {
            self.sources.restore();
        }
        report(project, self.sources.borrow(), &self.diagnostics, what)
    }
}

/// Whether a path names an artifact rather than a project directory.
fn is_artifact(path: &std::path::Path) -> bool {
    !path.is_dir() && path.exists()
}

/// Evaluates a project's sources or an artifact with the inputs of the command line. The
/// `std::print` lines go to stdout as soon as the evaluation ends.
fn evaluate(project: &ProjectArgs, inputs: &InputArgs, keep_model: bool) -> Result<Evaluated> {
    let started = std::time::Instant::now();
    let facts = match &inputs.facts {
        Some(path) => Some(weft_runtime::plugins::Facts::load(path)?),
        None => None,
    };
    let (mut executable, sources, mut diagnostics, modules) = if is_artifact(&project.project) {
        let loaded = weft_runtime::artifact::load(&project.project)?;
        let files = loaded.executable.program.files.clone();
        let modules = weft_runtime::modules::Modules::from_embedded(loaded.files);
        (Some(loaded.executable), OwnedSources::Lines(files), Vec::new(), modules)
    } else {
        if !project.project.is_dir() {
            anyhow::bail!("{} is neither a project directory nor an artifact", project.project.display());
        }
        let arena = bumpalo::Bump::new();
        let compiled = weft_frontend::compile(&arena, &project.project, &project.load_options());
        let modules = weft_runtime::modules::Modules::for_project(
            compiled.project.module_dirs(),
            compiled.project.path_plugin_packages.clone(),
        );
        let executable = match compiled.lowered {
            Some(lowered) => Some(weft_vm::Executable::for_evaluation(lowered)?),
            None => None,
        };
        return_pool_memory();
        let sources = match &executable {
            Some(executable) => OwnedSources::released(compiled.project.sources, executable),
            None => OwnedSources::Text(compiled.project.sources),
        };
        (executable, sources, compiled.diagnostics, modules)
    };
    let mut evaluated =
        Evaluated { sources, diagnostics: Vec::new(), outcome: None, model: None, modules, loaded: started.elapsed() };
    if let Some(executable) = executable.as_mut() {
        set_parameters(executable, &inputs.set)?;
        let options = weft_runtime::Options {
            modules: evaluated.modules.clone(),
            max_iterations: max_iterations(),
            memory_limit: inputs.memory_limit(),
            facts,
            // Plugin data (std's passwords) lives in the project's `data/`, where the
            // reference keeps it when it compiles in the project; an artifact has no
            // project, so its runs use `data/` in the working directory.
            data_dir: (!is_artifact(&project.project)).then(|| project.project.join("data")),
            python: project.python_interpreter(),
            plugin_dir: (!is_artifact(&project.project)).then(|| project.project.clone()),
        };
        evaluated.loaded = started.elapsed();
        let (outcome, model) = weft_runtime::run(executable, &options);
        // What plugins wrote to their error stream comes before the diagnostics, which come
        // once the evaluation ended.
        print_plugin_output(&outcome.prints, &outcome.plugin_messages)?;
        // A runtime error ends the evaluation alone. The end-of-compile checks report every
        // error they found, the most important first, as the reference's MultiException does
        // ("Reported N errors"): a model with several incomplete instances shows them all.
        diagnostics.extend(outcome.errors.iter().cloned());
        match model {
            Some(model) if keep_model => evaluated.model = Some(model),
            Some(model) => discard(model),
            None => {}
        }
        evaluated.outcome = Some(outcome);
    } else if !inputs.set.is_empty() && !diagnostics.iter().any(Diagnostic::is_error) {
        anyhow::bail!("--set needs a model that compiles");
    }
    evaluated.diagnostics = diagnostics;
    Ok(evaluated)
}

/// Lets go of an evaluated model without freeing its tables: a command is done with its
/// model well before the process exits, and freeing millions of small allocations one by one
/// (a tenth of a second on the 93k-instance benchmark, seconds on a million instances) only
/// delays the exit, which releases them at once.
fn discard(model: weft_runtime::export::Model) {
    model.release_without_freeing();
}

/// Applies `--set NAME=VALUE` to the declared parameters.
fn set_parameters(executable: &mut weft_vm::Executable, assignments: &[String]) -> Result<()> {
    let program = executable.program.clone();
    // By name, the first of a name as a scan finds it: a model may declare tens of thousands of
    // parameters, and a run set as many.
    let mut by_name: std::collections::HashMap<&str, &weft_ir::program::Parameter> =
        std::collections::HashMap::with_capacity(program.parameters.len());
    for parameter in &program.parameters {
        by_name.entry(parameter.name.as_str()).or_insert(parameter);
    }
    for assignment in assignments {
        let Some((name, text)) = assignment.split_once('=') else {
            anyhow::bail!("--set {assignment}: expected NAME=VALUE");
        };
        let Some(&parameter) = by_name.get(name) else {
            let declared: Vec<&str> = program.parameters.iter().map(|p| p.name.as_str()).collect();
            if declared.is_empty() {
                anyhow::bail!("--set {name}: the model declares no parameters (project.yml `weft: parameters:`)");
            }
            anyhow::bail!("--set {name}: no such parameter; the model declares {}", declared.join(", "));
        };
        let default = match executable.code.expr(parameter.value).kind {
            weft_vm::bytecode::Op::Const(value) => value.clone(),
            _ => anyhow::bail!("--set {name}: the parameter's default is not a constant"),
        };
        let value = weft_ir::inputs::parse_parameter_value(name, &default, text)
            .map_err(|e| anyhow::anyhow!("--set {name}: {e}"))?;
        executable.set_const(parameter.value, value)?;
    }
    Ok(())
}

/// Compiles or loads, evaluates and exports; `std::print` lines go to stdout as they do for
/// `compile`. The graph is there when everything succeeded.
fn evaluate_and_export(project: &ProjectArgs, inputs: &InputArgs) -> Result<(Evaluated, Option<ResourceGraph>)> {
    let mut evaluated = evaluate(project, inputs, true)?;
    let mut graph = None;
    if let Some(model) = evaluated.model.take() {
        let exported = weft_runtime::export::export(&model, &evaluated.modules);
        // What the modules' resource classes printed, after the evaluation's prints, as the
        // reference's export prints it.
        let (prints, messages) = match &exported {
            Ok(export) => (&export.prints, &export.plugin_messages),
            Err(failure) => (&failure.prints, &failure.plugin_messages),
        };
        print_plugin_output(prints, messages)?;
        match exported {
            Ok(export) => {
                evaluated.diagnostics.extend(export.warnings);
                graph = Some(export.graph);
            }
            Err(failure) => evaluated.diagnostics.extend(failure.diagnostics),
        }
        discard(model);
    }
    Ok((evaluated, graph))
}

fn export(args: &ExportArgs) -> Result<ExitCode> {
    let (mut evaluated, graph) = evaluate_and_export(&args.project, &args.inputs)?;
    let failed = evaluated.report(&args.project, "export the project")?;
    let Some(graph) = graph.filter(|_| !failed) else { return Ok(ExitCode::from(1)) };
    let write = |out: &mut dyn std::io::Write| -> std::io::Result<()> {
        use std::io::Write;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        graph.write_json(&mut out)?;
        out.write_all(b"\n")?;
        out.flush()
    };
    if args.output.as_os_str() == "-" {
        write(&mut std::io::stdout().lock()).map_err(|e| anyhow::anyhow!("cannot write the export: {e}"))?;
    } else {
        write_atomically_with(&args.output, write)?;
    }
    // As with the model (`discard`): freeing every field of every resource one by one only
    // delays the exit, which releases them at once (80M instructions for 46k resources).
    std::mem::forget(graph);
    Ok(ExitCode::SUCCESS)
}

fn build(args: &BuildArgs) -> Result<ExitCode> {
    let project = &args.project;
    if !project.project.is_dir() {
        anyhow::bail!("{} is not a project directory", project.project.display());
    }
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &project.project, &project.load_options());
    let failed = report(project, Sources::Text(&compiled.project.sources), &compiled.diagnostics, "build the project")?;
    let Some(lowered) = compiled.lowered.as_ref().filter(|_| !failed) else { return Ok(ExitCode::from(1)) };
    let executable = weft_vm::Executable::from_program(std::sync::Arc::new(lowered.clone()))?;
    let modules = weft_runtime::modules::Modules::for_project(
        compiled.project.module_dirs(),
        compiled.project.path_plugin_packages.clone(),
    );
    let files = modules.embed()?;
    let provenance = weft_runtime::artifact::Provenance {
        project: compiled.project.config.name.clone(),
        source_digest: compiled.source_digest(),
    };
    let bytes = weft_runtime::artifact::build(&weft_runtime::artifact::BuildInput {
        executable: &executable,
        provenance,
        inputs: weft_ir::inputs::inputs(lowered),
        files: &files,
    });
    write_atomically(&args.output, &bytes)?;
    eprintln!("weft: built {} ({} bytes, {} instructions)", args.output.display(), bytes.len(), executable.code.len());
    Ok(ExitCode::SUCCESS)
}

fn inspect(args: &InspectArgs) -> Result<ExitCode> {
    let loaded = weft_runtime::artifact::load(&args.artifact)?;
    let view = weft_runtime::artifact::describe(&loaded);
    match args.format {
        ReportFormat::Human => print!("{}", view.render_text()),
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&view)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a file through a temporary file in the same directory and a rename, so a reader
/// (or a crash) never sees half of it.
///
/// An output that exists and is not a regular file (`-o /dev/null`, `-o /dev/stdout`, a
/// named pipe) is written to directly: renaming over it would replace the device or the pipe
/// with a file. A symbolic link is followed, so the file it points to is replaced and the link
/// stays.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    write_atomically_with(path, |out: &mut dyn std::io::Write| out.write_all(bytes))
}

/// [`write_atomically`], with the content written by `content`.
fn write_atomically_with(
    path: &std::path::Path,
    content: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    use anyhow::Context;
    let cannot_write = |e: std::io::Error| anyhow::anyhow!("cannot write {}: {e}", path.display());
    if let Ok(metadata) = std::fs::metadata(path)
        && !metadata.is_file()
    {
        if metadata.is_dir() {
            anyhow::bail!("cannot write {}: it is a directory", path.display());
        }
        let mut out = std::fs::OpenOptions::new().write(true).open(path).map_err(cannot_write)?;
        return content(&mut out).map_err(cannot_write);
    }
    // Through a link, the file it points to is the one to replace.
    let resolved = std::fs::canonicalize(path).ok();
    let path = resolved.as_deref().unwrap_or(path);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let name = path.file_name().context("the output path names no file")?.to_string_lossy();
    let temp = dir.join(format!(".{name}.weft-tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let file = std::fs::File::create(&temp)?;
        content(&mut EarlyWriteback::new(&file))?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        cannot_write(e)
    })
}

/// A file being written that the kernel starts writing to disk every few megabytes, without
/// waiting: the `sync_all` that makes it durable at the end then has only the last stretch to
/// wait for (a 40 MB export waited 23 ms for its `fsync` before).
struct EarlyWriteback<'f> {
    file: &'f std::fs::File,
    /// Where the stretch not yet handed to the kernel's writeback starts.
    started: u64,
    written: u64,
}

impl<'f> EarlyWriteback<'f> {
    const STRETCH: u64 = 4 << 20;

    fn new(file: &'f std::fs::File) -> Self {
        EarlyWriteback { file, started: 0, written: 0 }
    }
}

impl std::io::Write for EarlyWriteback<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = (&mut &*self.file).write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= Self::STRETCH {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                // SAFETY: the descriptor is the open file this writer borrows; the call only
                // reads its arguments. Its result is a hint's: a failure leaves everything to
                // the `sync_all` at the end, which reports errors.
                unsafe {
                    libc::sync_file_range(
                        self.file.as_raw_fd(),
                        self.started as libc::off64_t,
                        (self.written - self.started) as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
            }
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn apply(args: &ApplyArgs) -> Result<ExitCode> {
    let (mut evaluated, graph) = evaluate_and_export(&args.project, &args.inputs)?;
    let failed = evaluated.report(&args.project, "export the project")?;
    let Some(graph) = graph.filter(|_| !failed) else { return Ok(ExitCode::from(1)) };
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
/// What the model and its plugins printed, on stdout, then what plugins wrote to their error
/// stream, on stderr, as the reference shows both.
fn print_plugin_output(prints: &[String], messages: &[String]) -> Result<()> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for line in prints {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    for line in messages {
        eprintln!("{line}");
    }
    Ok(())
}

/// `INMANTA_MAX_ITERATIONS`, as the reference reads it.
fn max_iterations() -> Option<usize> {
    std::env::var("INMANTA_MAX_ITERATIONS").ok().and_then(|v| v.parse().ok())
}
