//! Reading the files a project is made of, safely.
//!
//! A project directory is input like any other: a `.cf` file, a `project.yml` or a module's
//! template may turn out to be a named pipe, a device or a symbolic link to one. Reading such a
//! file with `std::fs::read` blocks forever (a pipe nobody writes) or never ends (`/dev/zero`).
//! Every stage that reads a file found in a project goes through [`read`], which accepts
//! regular files only and refuses the rest with an error that says what the file is.
//!
//! This is the one exception to the crate's rule of doing no I/O: the frontend and the runtime
//! both read project files, and the check must be the same for both.

use std::io::{self, Read};
use std::path::Path;

/// The largest file weft reads from a project: source positions are 32-bit byte offsets.
pub const MAX_FILE_LEN: u64 = u32::MAX as u64;

/// Reads a regular file (following symbolic links) into memory.
///
/// Anything else fails with [`io::ErrorKind::InvalidInput`] and a message naming what the path
/// is ("a named pipe", "a character device", ...); a file longer than [`MAX_FILE_LEN`] fails
/// with [`io::ErrorKind::FileTooLarge`].
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let file = open_without_blocking(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file but {}", describe(&metadata)),
        ));
    }
    if metadata.len() > MAX_FILE_LEN {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // The length can change while reading (a file being written); the cap still holds.
    file.take(MAX_FILE_LEN + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_LEN {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads a file the user named on the command line, which may be a pipe (`--facts <(...)`):
/// anything but a directory, waiting for a pipe's writer as any reader does, and at most
/// `max_len` bytes, so that a device that never ends (`/dev/zero`) fails instead of filling
/// the memory.
pub fn read_named(path: &Path, max_len: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file but a directory"));
    }
    read_bounded(file, max_len)
}

/// Reads a stream to its end, failing with [`io::ErrorKind::FileTooLarge`] past `max_len`
/// bytes.
pub fn read_bounded(stream: impl Read, max_len: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    stream.take(max_len + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_len {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("the input is longer than {max_len} bytes, the most weft reads from it"),
        ));
    }
    Ok(bytes)
}

/// Reads a regular file as UTF-8 text, as [`read`] does; invalid UTF-8 is an
/// [`io::ErrorKind::InvalidData`] error, as with `std::fs::read_to_string`.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    utf8(read(path)?)
}

/// A file's bytes as text; invalid UTF-8 is the error `std::fs::read_to_string` gives.
pub fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

fn too_large(len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("the file is {len} bytes long; weft reads files of up to {MAX_FILE_LEN} bytes"),
    )
}

/// Opens for reading without waiting for a writer: opening a named pipe for reading otherwise
/// blocks until some process opens it for writing.
#[cfg(unix)]
fn open_without_blocking(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
}

#[cfg(not(unix))]
fn open_without_blocking(path: &Path) -> io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// What a file that is not a regular file is, for messages: "a directory", "a named pipe", ...
pub fn describe(metadata: &std::fs::Metadata) -> &'static str {
    let file_type = metadata.file_type();
    if file_type.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a named pipe";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What reading a path gives: its bytes, or the error's kind and message.
    fn outcome(path: &Path) -> Result<Vec<u8>, (io::ErrorKind, String)> {
        read(path).map_err(|e| (e.kind(), e.to_string()))
    }

    #[test]
    fn regular_files_and_links_to_them_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("main.cf");
        std::fs::write(&file, "x = 1\n").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link.cf")).unwrap();
        assert_eq!(outcome(&file), Ok(b"x = 1\n".to_vec()));
        assert_eq!(outcome(&dir.path().join("link.cf")), Ok(b"x = 1\n".to_vec()));
        assert_eq!(read_to_string(&file).unwrap(), "x = 1\n");
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("main.cf");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(status.success());
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.cf")).unwrap();
        let refused = |what: &str| Err((io::ErrorKind::InvalidInput, format!("not a regular file but {what}")));
        assert_eq!(outcome(&fifo), refused("a named pipe"));
        assert_eq!(outcome(&dir.path().join("zero.cf")), refused("a character device"));
        assert_eq!(outcome(dir.path()), refused("a directory"));
    }

    #[test]
    fn named_inputs_may_be_devices_but_are_bounded() {
        let zero = read_named(Path::new("/dev/zero"), 1000).unwrap_err();
        assert_eq!(zero.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(read_named(Path::new("/dev/null"), 1000).unwrap(), Vec::<u8>::new());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_named(dir.path(), 1000).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn invalid_utf8_is_invalid_data() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.cf");
        std::fs::write(&file, b"x = \xff\n").unwrap();
        assert_eq!(read_to_string(&file).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
