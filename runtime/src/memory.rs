//! A ceiling on the memory an evaluation may take.
//!
//! A model can grow without end: an implementation that constructs an instance of its own
//! entity builds a chain that never stops, and the reference compiler runs until the system
//! kills it. On a host, that means the out-of-memory killer picks a process (maybe not this
//! one) and the operator learns nothing about the model. The scheduler therefore looks at the
//! process's resident memory every [`CHECK_EVERY`] tasks and, past the limit, stops the
//! evaluation with an error that says which entity grew and where its instances come from.
//!
//! The check costs one decrement per task and one read of `/proc/self/statm` every 65,536
//! tasks (about every 50 ms). Without `/proc` (not Linux), there is no default limit and the
//! check does nothing.

use std::fmt;

/// How many tasks run between two looks at the resident memory.
pub(crate) const CHECK_EVERY: u32 = 1 << 16;

/// The share of the machine's (or the control group's) memory the default limit allows: the
/// rest leaves room for the kernel, the page cache and the process's own last allocations
/// before the next check.
const DEFAULT_SHARE_PERCENT: u64 = 90;

/// A limit on the resident memory of the evaluating process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    /// Where the limit comes from, for the error message: "`--max-memory 64M`", "90% of this
    /// machine's 23.4 GiB".
    pub origin: String,
}

impl MemoryLimit {
    /// The default: 90% of the memory this process can have, which is the machine's physical
    /// memory or, in a container, the control group's limit when that is lower. `None` when
    /// neither can be read.
    pub fn default_for_this_machine() -> Option<MemoryLimit> {
        let machine = physical_memory();
        let group = cgroup_limit();
        let (total, what) = match (machine, group) {
            (Some(m), Some(g)) if g < m => (g, "this control group's"),
            (Some(m), _) => (m, "this machine's"),
            (None, Some(g)) => (g, "this control group's"),
            (None, None) => return None,
        };
        Some(MemoryLimit {
            bytes: total / 100 * DEFAULT_SHARE_PERCENT,
            origin: format!("{DEFAULT_SHARE_PERCENT}% of {what} {}", Bytes(total)),
        })
    }
}

/// Parses a size as `--max-memory` takes it: a number of bytes, or a number with a binary unit
/// (`K`, `M`, `G`, `T`, optionally followed by `iB` or `B`, in any case), such as `512M` or
/// `1.5G`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("expected a size such as 512M or 8G, found `{text}`"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown unit `{other}` (expected K, M, G or T)")),
    };
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("the size `{text}` is out of range"));
    }
    Ok(bytes as u64)
}

/// The resident memory of this process, in bytes.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: `sysconf` reads a system constant and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// `MemTotal` of `/proc/meminfo`.
fn physical_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The memory limit of this process's control group, version 2 or version 1; `None` when
/// there is none (`max`, or v1's "unlimited", a number near `i64::MAX`).
fn cgroup_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
    read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .filter(|&bytes| bytes < 1 << 60)
}

/// A number of bytes, printed with a binary unit (`23.4 GiB`).
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 { write!(f, "{} B", self.0) } else { write!(f, "{value:.1} {}", UNITS[unit]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<u64, &str>) {
        assert_eq!(parse_size(text), expected.map_err(str::to_string), "{text}");
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        check("4096", Ok(4096));
        check("512M", Ok(512 << 20));
        check("512mib", Ok(512 << 20));
        check("8G", Ok(8 << 30));
        check("1.5GB", Ok(3 << 29));
        check(" 2 T ", Ok(2 << 40));
        check("64k", Ok(64 << 10));
        check("8X", Err("unknown unit `x` (expected K, M, G or T)"));
        check("G", Err("expected a size such as 512M or 8G, found `G`"));
        check("0", Err("the size `0` is out of range"));
        check("99999999999T", Err("the size `99999999999T` is out of range"));
    }

    #[test]
    fn bytes_display_with_binary_units() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(3 << 29).to_string(), "1.5 GiB");
        assert_eq!(Bytes(64 << 20).to_string(), "64.0 MiB");
    }

    #[test]
    fn this_process_has_resident_memory() {
        if std::path::Path::new("/proc/self/statm").exists() {
            assert!(resident_bytes().unwrap() > 0);
            assert!(MemoryLimit::default_for_this_machine().unwrap().bytes > 0);
        }
    }
}
