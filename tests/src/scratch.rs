//! Scratch directories for the suites that run `weft` as a process.

use std::path::{Path, PathBuf};

/// A directory for one test, `weft-<suite>-<name>-<process id>` under the temporary
/// directory: emptied when made, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(suite: &str, name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("weft-{suite}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }

    /// A path inside the directory; an absolute path (`/etc/motd`, as a model names it when
    /// the directory is an apply root) is taken as relative to it.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.0.join(relative.trim_start_matches('/'))
    }

    /// Writes a file inside the directory, making its parents.
    pub fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create a directory");
        std::fs::write(path, text).expect("write a file");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the directory tree `from` to `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for entry in std::fs::read_dir(from).expect("read the source tree") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}
