//! `exec::Run`: runs a command, guarded by `creates`, `unless` and `onlyif`.
//!
//! As the reference's `PosixRunHandler`: reading the "current state" evaluates the guards (the
//! command may run when `creates` does not exist, `unless` fails and `onlyif` succeeds); when
//! they allow it the resource is out of date (the reference's `purged` change) and deploying
//! runs the command, unless `reload_only`. A notified resource reloads: it runs `reload`, or
//! `command` when `reload` is empty, again only when the guards allow it. The command line is
//! split with shell-word rules and run without a shell; a non-empty `environment` is added to
//! the inherited environment (the reference's `current_env.update(env)`).
//!
//! The reference ignores the `path` field, and so does this handler.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value as Json};

use super::handler::{Context, Fields, Handler, ResourceError, existence_change};
use super::report::Change;
use super::shlex;

pub(super) struct RunHandler;

#[derive(Debug)]
pub(super) struct DesiredRun {
    command: String,
    creates: Option<PathBuf>,
    /// Where the command and its reload run.
    directory: Option<PathBuf>,
    /// Where the guard commands run: the reference gives them no working directory, so the
    /// process's own, or the apply root when that is not `/`.
    guard_directory: Option<PathBuf>,
    /// Variables added to the inherited environment.
    environment: Vec<(String, String)>,
    unless: Option<String>,
    onlyif: Option<String>,
    reload: Option<String>,
    reload_only: bool,
    returns: Vec<i64>,
    timeout: Option<u64>,
    skip_on_fail: bool,
}

/// What the guards say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The command may run.
    Run,
    /// A guard said no.
    DontRun,
    /// A dry run, where `creates` allowed it but the guard commands were not run.
    Undecided,
}

impl Handler for RunHandler {
    type Desired = DesiredRun;
    type Current = Verdict;
    const CAN_RELOAD: bool = true;

    fn desired(&self, fields: &Map<String, Json>, ctx: &Context) -> Result<DesiredRun, ResourceError> {
        let returns = match fields.get("returns") {
            None | Some(Json::Null) => vec![0],
            Some(Json::Array(codes)) => codes
                .iter()
                .map(|code| {
                    code.as_i64().ok_or(ResourceError::Field { field: "returns", problem: "holds a non-integer" })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ResourceError::Field { field: "returns", problem: "is not a list" }),
        };
        let environment = match fields.get("environment") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::Object(variables)) => variables
                .iter()
                .map(|(name, value)| match value {
                    Json::String(value) => Ok((name.clone(), value.clone())),
                    _ => Err(ResourceError::Field {
                        field: "environment",
                        problem: "holds a value that is not a string",
                    }),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ResourceError::Field { field: "environment", problem: "is not a dict" }),
        };
        let scratch_root = ctx.scratch_root().map(PathBuf::from);
        Ok(DesiredRun {
            command: fields.string("command")?.to_string(),
            creates: fields.optional_string("creates")?.map(|path| ctx.host_path(path)),
            directory: fields.optional_string("cwd")?.map(|path| ctx.host_path(path)).or_else(|| scratch_root.clone()),
            guard_directory: scratch_root,
            environment,
            unless: fields.optional_string("unless")?.map(str::to_string),
            onlyif: fields.optional_string("onlyif")?.map(str::to_string),
            reload: fields.optional_string("reload")?.map(str::to_string),
            reload_only: fields.flag("reload_only", false)?,
            returns,
            timeout: fields.optional_int("timeout")?.and_then(|seconds| u64::try_from(seconds).ok()).filter(|&s| s > 0),
            skip_on_fail: fields.flag("skip_on_fail", false)?,
        })
    }

    fn read_current(&self, desired: &DesiredRun, ctx: &mut Context) -> Result<Verdict, ResourceError> {
        let verdict = evaluate_guards(desired, ctx)?;
        if ctx.dry_run() && !desired.reload_only {
            match verdict {
                Verdict::Run => ctx.note("would run the command"),
                Verdict::Undecided => ctx.note("would run the command if its unless/onlyif guards allow it (guard commands do not run in a dry run)"),
                Verdict::DontRun => {}
            }
        }
        Ok(verdict)
    }

    fn diff(&self, desired: &DesiredRun, verdict: &Verdict, _ctx: &Context) -> Vec<Change> {
        if *verdict == Verdict::DontRun || desired.reload_only { Vec::new() } else { vec![existence_change(true)] }
    }

    fn apply_changes(
        &self,
        desired: &DesiredRun,
        _verdict: &Verdict,
        _changes: &[Change],
        ctx: &mut Context,
    ) -> Result<(), ResourceError> {
        run_checked(&desired.command, desired)?;
        ctx.note("ran the command");
        Ok(())
    }

    fn reload(&self, desired: &DesiredRun, verdict: &Verdict, ctx: &mut Context) -> Result<bool, ResourceError> {
        let (line, which) = match &desired.reload {
            Some(reload) => (reload.as_str(), "the reload command"),
            None => (desired.command.as_str(), "the command"),
        };
        match verdict {
            Verdict::DontRun => Ok(false),
            _ if ctx.dry_run() => {
                ctx.note(format!("would reload: run {which}"));
                Ok(true)
            }
            _ => {
                run_checked(line, desired)?;
                ctx.note(format!("reloaded: ran {which}"));
                Ok(true)
            }
        }
    }
}

/// Evaluates `creates`, `unless` and `onlyif`, stopping at the first that says no.
fn evaluate_guards(desired: &DesiredRun, ctx: &Context) -> Result<Verdict, ResourceError> {
    if let Some(creates) = &desired.creates
        && std::fs::symlink_metadata(creates).is_ok()
    {
        return Ok(Verdict::DontRun);
    }
    if desired.unless.is_none() && desired.onlyif.is_none() {
        return Ok(Verdict::Run);
    }
    if ctx.dry_run() {
        return Ok(Verdict::Undecided);
    }
    let guard = |line: &str| execute(line, &desired.environment, desired.guard_directory.as_ref(), desired.timeout);
    if let Some(unless) = &desired.unless
        && guard(unless)?.return_code == 0
    {
        return Ok(Verdict::DontRun);
    }
    if let Some(onlyif) = &desired.onlyif
        && guard(onlyif)?.return_code != 0
    {
        return Ok(Verdict::DontRun);
    }
    Ok(Verdict::Run)
}

/// Runs a command line of the resource and checks its return code against `returns`.
fn run_checked(line: &str, desired: &DesiredRun) -> Result<(), ResourceError> {
    let finished = execute(line, &desired.environment, desired.directory.as_ref(), desired.timeout)?;
    if desired.returns.contains(&finished.return_code) {
        return Ok(());
    }
    let status = match finished.signal {
        Some(signal) => format!("killed by signal {signal}"),
        None => format!("exit code {}", finished.return_code),
    };
    let error = ResourceError::CommandFailed { status, stderr: finished.stderr };
    Err(if desired.skip_on_fail { ResourceError::Skip(Box::new(error)) } else { error })
}

/// A finished command.
#[derive(Debug)]
struct Finished {
    /// The exit code, or minus the signal number when a signal ended it (as Python reports it).
    return_code: i64,
    signal: Option<i32>,
    /// Standard error, decoded leniently and trimmed, as the reference's proxy returns it.
    stderr: String,
}

/// Splits and runs a command line, without a shell, with standard input closed.
fn execute(
    line: &str,
    environment: &[(String, String)],
    directory: Option<&PathBuf>,
    timeout: Option<u64>,
) -> Result<Finished, ResourceError> {
    let words = shlex::split(line)?;
    let (program, arguments) = words.split_first().ok_or(ResourceError::EmptyCommand)?;
    let mut command = Command::new(program);
    command.args(arguments).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.envs(environment.iter().map(|(name, value)| (name, value)));
    if let Some(directory) = directory {
        command.current_dir(directory);
    }
    // A process group of its own, so a timeout kills the command and everything it started
    // (which would otherwise keep its output pipes open).
    command.process_group(0);
    let child = command.spawn().map_err(|source| ResourceError::Spawn { program: program.clone(), source })?;
    let (status, stderr) = wait(child, timeout.map(Duration::from_secs))?;
    let signal = status.signal();
    let return_code = match (status.code(), signal) {
        (Some(code), _) => i64::from(code),
        (None, Some(signal)) => -i64::from(signal),
        (None, None) => -1,
    };
    Ok(Finished { return_code, signal, stderr: String::from_utf8_lossy(&stderr).trim().to_string() })
}

/// What the helper threads of [`wait`] report.
enum Event {
    Exited,
    /// Standard output is drained (so the command never blocks on a full pipe) but not kept:
    /// only standard error goes into reports.
    OutputClosed,
    ErrorClosed(Vec<u8>),
}

/// Waits for the child to exit and its output pipes to close, killing its process group when
/// that takes longer than `timeout`. Returns the exit status and standard error.
fn wait(mut child: Child, timeout: Option<Duration>) -> Result<(ExitStatus, Vec<u8>), ResourceError> {
    let pid = child.id();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let deadline = timeout.map(|limit| Instant::now() + limit);
    let mut error_output = Vec::new();
    let mut timed_out = false;
    std::thread::scope(|scope| {
        let (sender, events) = mpsc::channel();
        let output_sender = sender.clone();
        scope.spawn(move || {
            if let Some(mut pipe) = stdout {
                // A read error ends the draining early; the exit status still decides.
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            }
            let _ = output_sender.send(Event::OutputClosed);
        });
        let error_sender = sender.clone();
        scope.spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = stderr {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = error_sender.send(Event::ErrorClosed(bytes));
        });
        scope.spawn(move || {
            wait_without_reaping(pid);
            let _ = sender.send(Event::Exited);
        });
        let mut pending = 3;
        while pending > 0 {
            let event = match deadline.filter(|_| !timed_out) {
                Some(deadline) => match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(event) => event,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        timed_out = true;
                        kill_group(pid);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match events.recv() {
                    Ok(event) => event,
                    Err(_) => break,
                },
            };
            pending -= 1;
            if let Event::ErrorClosed(bytes) = event {
                error_output = bytes;
            }
        }
    });
    // The child is reaped only now, after any kill: until then its pid cannot be reused, so
    // the kill above can never hit an unrelated process.
    let status = child.wait().map_err(|source| ResourceError::Spawn { program: format!("process {pid}"), source })?;
    match timeout {
        Some(limit) if timed_out => Err(ResourceError::Timeout(limit.as_secs())),
        _ => Ok((status, error_output)),
    }
}

/// Blocks until the child exits, leaving it unreaped (a zombie) so its pid stays ours.
fn wait_without_reaping(pid: u32) {
    loop {
        // SAFETY: siginfo_t is plain data for which all zero bytes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a live, writable siginfo_t; WNOWAIT leaves the child waitable, so
        // the later `Child::wait` still reaps it.
        let result = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if result == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Kills the process group the child leads.
fn kill_group(pid: u32) {
    let Ok(group) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill has no memory-safety preconditions; the group is the child's own (it was
    // started with process_group(0)) and the child is not reaped yet, so the id is still ours.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str, timeout: Option<u64>) -> Result<Finished, String> {
        execute(line, &[("WEFT_TEST_VARIABLE".to_string(), "set".to_string())], None, timeout)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn commands_run_without_a_shell() {
        let finished = run("sh -c 'echo \"$WEFT_TEST_VARIABLE\" >&2; exit 3'", None).unwrap();
        assert_eq!(finished.return_code, 3);
        assert_eq!(finished.stderr, "set");
        // Without a shell, `;` is an argument of echo rather than a separator.
        assert_eq!(run("echo a ; exit 4", None).unwrap().return_code, 0);
        assert_eq!(run("", None).unwrap_err(), "the command is empty");
        assert_eq!(run("echo 'open", None).unwrap_err(), "cannot parse the command: No closing quotation");
        assert!(run("/no/such/program", None).unwrap_err().starts_with("cannot run /no/such/program: "));
    }

    #[test]
    fn timeouts_kill_the_whole_group() {
        let started = Instant::now();
        // The background sleep holds the output pipes open; only killing the group ends it.
        let error = run("sh -c 'sleep 30 & sleep 30'", Some(1)).unwrap_err();
        assert_eq!(error, "the command did not finish within 1 seconds and was killed");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
