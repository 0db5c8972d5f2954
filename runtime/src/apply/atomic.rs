//! Crash-safe replacement of files and symlinks.
//!
//! A target is never written in place: the new content goes to a file nobody can see yet, which
//! gets its final mode and owner, and only then is it renamed over the target. `rename` within a directory is atomic, so a process killed at any
//! moment leaves either the old target or the complete new one, never a partial file.
//!
//! On Linux the invisible file is an `O_TMPFILE`: it has no name at all until it is complete,
//! so a crash leaves nothing behind while it is being written. It then gets a temporary name
//! with `linkat` through `/proc/self/fd` and is renamed over the target. Filesystems without
//! `O_TMPFILE` (and systems without `/proc`) use a hidden temporary name from the start,
//! `.<name>.weft-tmp`; a crash there can leave that file, but never touches the target, and the
//! next write of the target replaces it. Durability comes from one flush of the filesystem at
//! the end of an apply ([`flush_filesystem`]), not from a sync per file.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// What the new file gets before it becomes visible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileAttributes {
    /// The mode bits; `None` keeps what creation gave (0o666 minus the umask).
    pub mode: Option<u32>,
    /// The owner; `None` keeps the writing process's.
    pub uid: Option<u32>,
    /// The group; `None` keeps the writing process's.
    pub gid: Option<u32>,
}

/// Replaces (or creates) `target` with `content`, atomically.
pub(crate) fn write_file(target: &Path, content: &[u8], attributes: FileAttributes) -> io::Result<()> {
    let (directory, name) = split_target(target)?;
    match write_unnamed(directory, name, target, content, attributes) {
        Ok(()) => Ok(()),
        // Any failure of the unnamed route (no O_TMPFILE support, no /proc) is retried the
        // portable way; a problem both routes share (a missing directory, no permission) then
        // surfaces from the second attempt.
        Err(_) => write_named(directory, name, target, content, attributes),
    }
}

/// Replaces (or creates) the symlink `target` pointing to `source`, atomically.
pub(super) fn replace_symlink(source: &Path, target: &Path) -> io::Result<()> {
    let (directory, name) = split_target(target)?;
    let temporary = with_fresh_name(directory, name, |candidate| std::os::unix::fs::symlink(source, candidate))?;
    rename_into_place(&temporary, target)
}

/// The directory of `target` and its file name.
fn split_target(target: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file"))?;
    let directory = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Ok((directory, name))
}

/// The Linux route: write an `O_TMPFILE`, then link it under a temporary name and rename it.
fn write_unnamed(
    directory: &Path,
    name: &OsStr,
    target: &Path,
    content: &[u8],
    attributes: FileAttributes,
) -> io::Result<()> {
    let file =
        OpenOptions::new().write(true).custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC).mode(0o666).open(directory)?;
    fill(&file, content, attributes)?;
    let descriptor = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "descriptor path with a NUL byte"))?;
    let temporary = with_fresh_name(directory, name, |candidate| {
        let candidate = CString::new(candidate.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))?;
        // SAFETY: both paths are valid NUL-terminated strings that outlive the call; linkat
        // only reads them. AT_SYMLINK_FOLLOW makes it link the file the descriptor's magic
        // link points to (our unnamed file), which is allowed because it was opened without
        // O_EXCL.
        let linked = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                descriptor.as_ptr(),
                libc::AT_FDCWD,
                candidate.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if linked == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    })?;
    drop(file);
    rename_into_place(&temporary, target)
}

/// The portable route: write a hidden, uniquely named file, then rename it.
fn write_named(
    directory: &Path,
    name: &OsStr,
    target: &Path,
    content: &[u8],
    attributes: FileAttributes,
) -> io::Result<()> {
    let mut file = None;
    let temporary = with_fresh_name(directory, name, |candidate| {
        file = Some(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_CLOEXEC)
                .mode(0o666)
                .open(candidate)?,
        );
        Ok(())
    })?;
    let Some(file) = file else {
        return Err(io::Error::other("the temporary file was not opened"));
    };
    if let Err(error) = fill(&file, content, attributes) {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    drop(file);
    rename_into_place(&temporary, target)
}

/// Writes the content, sets owner and mode, and flushes the file to disk.
fn fill(mut file: &File, content: &[u8], attributes: FileAttributes) -> io::Result<()> {
    file.write_all(content)?;
    // Ownership first: chown clears the set-user-id and set-group-id bits, so the mode must be
    // set after it to keep them.
    if attributes.uid.is_some() || attributes.gid.is_some() {
        std::os::unix::fs::fchown(file, attributes.uid, attributes.gid)?;
    }
    if let Some(mode) = attributes.mode {
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    // No sync here: see `flush_filesystem`.
    Ok(())
}

/// Renames `temporary` over `target`, removing `temporary` if the rename fails.
///
/// The directory is not flushed afterwards: a rename lost to a power failure leaves the old
/// target, complete, which is all the crash safety asked for, and a second fsync per file
/// would halve the throughput of large applies.
fn rename_into_place(temporary: &Path, target: &Path) -> io::Result<()> {
    std::fs::rename(temporary, target).inspect_err(|_| {
        let _ = std::fs::remove_file(temporary);
    })
}

/// Calls `create` with the target's temporary name and returns that name. The name is the same
/// for every write of a target, so a temporary file left by an interrupted apply (killed
/// between naming the file and renaming it) is found and replaced by the next write of that
/// target instead of accumulating.
fn with_fresh_name(
    directory: &Path,
    name: &OsStr,
    mut create: impl FnMut(&Path) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let candidate = directory.join(temporary_name(name));
    match create(&candidate) {
        Ok(()) => Ok(candidate),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&candidate)?;
            create(&candidate).map(|()| candidate)
        }
        Err(error) => Err(error),
    }
}

/// `.<name>.weft-tmp`: hidden and recognisably ours.
fn temporary_name(name: &OsStr) -> OsString {
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(".weft-tmp");
    temporary
}

/// Flushes the filesystem holding `root` to disk. Files are not synced one by one (a sync per
/// file makes a large apply several times slower); instead an apply that changed something
/// ends with this, so when it reports success everything it wrote is on disk. A power loss in
/// the middle of an apply can leave a new file empty, never a half-replaced old one, and the
/// next apply rewrites it.
pub(super) fn flush_filesystem(root: &Path) -> io::Result<()> {
    let directory = File::open(root)?;
    // SAFETY: the descriptor is open for the duration of the call; syncfs only flushes.
    if unsafe { libc::syncfs(directory.as_raw_fd()) } == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn entries(directory: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(directory)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Writes through one route, twice (create, then replace), and checks content, mode and
    /// that no temporary file remains.
    fn check(route: fn(&Path, &OsStr, &Path, &[u8], FileAttributes) -> io::Result<()>) {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("config");
        let (directory, name) = split_target(&target).unwrap();
        route(directory, name, &target, b"first", FileAttributes { mode: Some(0o640), ..Default::default() }).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"first");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o7777, 0o640);
        route(directory, name, &target, b"second, longer", FileAttributes { mode: Some(0o600), ..Default::default() })
            .unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second, longer");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(entries(scratch.path()), vec!["config".to_string()]);
    }

    #[test]
    fn unnamed_route_leaves_no_temporary_file() {
        let scratch = tempfile::tempdir().unwrap();
        let probe = OpenOptions::new().write(true).custom_flags(libc::O_TMPFILE).mode(0o600).open(scratch.path());
        if probe.is_err() {
            // The filesystem of the temporary directory has no O_TMPFILE; the named route's
            // test covers this machine.
            return;
        }
        check(write_unnamed);
    }

    #[test]
    fn named_route_leaves_no_temporary_file() {
        check(write_named);
    }

    #[test]
    fn public_writer_and_errors() {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("a");
        write_file(&target, b"x", FileAttributes::default()).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
        let missing = scratch.path().join("no-such-dir").join("a");
        let error = write_file(&missing, b"x", FileAttributes::default()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(entries(scratch.path()), vec!["a".to_string()]);
    }

    #[test]
    fn symlinks_are_replaced_atomically() {
        let scratch = tempfile::tempdir().unwrap();
        let link = scratch.path().join("link");
        std::os::unix::fs::symlink("/old", &link).unwrap();
        replace_symlink(Path::new("/new"), &link).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/new"));
        assert_eq!(entries(scratch.path()), vec!["link".to_string()]);
    }

    #[test]
    fn a_temporary_file_left_by_an_interrupted_write_is_replaced() {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("motd");
        assert_eq!(temporary_name(OsStr::new("motd")), OsString::from(".motd.weft-tmp"));
        std::fs::write(scratch.path().join(".motd.weft-tmp"), b"left by a killed apply").unwrap();
        write_file(&target, b"hello", FileAttributes::default()).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello");
        assert_eq!(entries(scratch.path()), vec!["motd".to_string()]);
    }
}
