//! The files of the loaded modules: in their directories on disk, or embedded in an artifact.
//!
//! Plugins read module files while the model is evaluated (`std::template`, `std::source`,
//! `std::file`, `std::list_files`), and the export reads the modules' Python sources to learn
//! which entity types are resources. Where the project is compiled these come from the modules'
//! directories ([`Modules::from_dirs`]). A compiled artifact runs on hosts that have neither the
//! sources, so it carries what those readers need ([`EmbeddedModules`], made by
//! [`Modules::embed`]): every file under each module's `templates/` and `files/`, the
//! resource registrations read from the Python sources when the artifact was built, and the
//! `.py` files of the module's plugin package, for its plugins that weft has no native
//! implementation of, and the plugin packages of modules on the module path that the model
//! does not load but whose names that Python code mentions (plugin code may import them).
//! Those run through the Python bridge ([`crate::python`]), so they still need `python3` on
//! the host that runs the artifact; their files are written to a private temporary directory
//! the first time one of them is called ([`Modules::python_dir`]).
//!
//! Inside a module, paths are relative to its root and separated by `/`: `templates/motd.j2`,
//! `files/sub/a.txt`. Nothing embedded names a path of the machine that built the artifact.
//!
//! Known divergences of embedded modules from the same modules on disk, all because an artifact
//! must behave the same on every host and must not reveal the build machine's paths:
//!
//! * `std::file` returns `imp-module-source:file:///weft/modules/<module>/files/<path>`
//!   ([`EMBEDDED_ROOT`]), a path that exists on no host, where the reference returns the
//!   absolute path of the file on the compiling machine; messages name embedded files by the
//!   same path, and the export's message about an unsupported resource type names the Python
//!   file relative to its module.
//! * Paths are resolved lexically (`a/../b` is `b` even when `a` does not exist), and a path
//!   that leaves the module (`..` past its root, or an absolute path) names no file, where the
//!   reference would read whatever the host has there.
//! * A symbolic link that leads outside its module is not embedded, and a link that leads to
//!   one of its own parent directories is not followed.
//! * Of a module's Python code only the `.py` files of its plugin package are embedded
//!   (`plugins/` of a v1 module, the package directory of a v2 one), without `__pycache__`,
//!   `tests`, `docs` and hidden directories (and, for a v2 module, its `model/`, `templates/`
//!   and `files/`), so a plugin that reads other files next to its code, or imports from such
//!   a directory, behaves differently from an artifact.
//!
//! Empty directories are embedded too, so listing one gives an empty list in both forms.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::export::{self, Registration};

/// The directory embedded modules appear to live in, in `std::file`'s results and in messages.
pub const EMBEDDED_ROOT: &str = "/weft/modules";

/// The directories of a module whose files plugins read.
const EMBEDDED_KINDS: [&str; 2] = ["templates", "files"];

/// Directories of a plugin package whose Python files are not embedded, at any depth (as the
/// export's scan of the Python sources skips them), besides hidden ones.
const SKIPPED_PYTHON_DIRS: [&str; 3] = ["__pycache__", "tests", "docs"];

/// How deep below the package root Python files are embedded (as deep as the export scans).
const PYTHON_DEPTH: usize = 6;

/// The modules of a compile, each one a directory or an embedded file set, by module name.
///
/// Cloning is cheap (the modules are shared), and clones share the registrations once they
/// have been read.
#[derive(Clone, Debug, Default)]
pub struct Modules {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    modules: BTreeMap<String, Backing>,
    /// The plugin packages of v1 modules on the module path that the model does not load:
    /// importable from plugin code, as in the reference, but no module of the model (no
    /// files, templates or resource registrations of theirs are seen).
    path_packages: BTreeMap<String, PathPackage>,
    /// Every module's resource registrations, read on first use (see [`Modules::registrations`]).
    registrations: OnceLock<Vec<Registration>>,
    /// For each embedded module that carries Python code, and each embedded path package, its
    /// plugin package written out to a directory, on first use (see [`Modules::python_dir`]).
    python_dirs: BTreeMap<String, OnceLock<Result<Materialized, String>>>,
    /// Where the Python bridge imports the modules' packages from; removed with the modules.
    sandboxes: crate::python::Sandboxes,
}

enum Backing {
    /// The module's root directory (holding `model/`, `templates/`, `files/` and its Python code).
    Directory(PathBuf),
    Embedded(EmbeddedModule),
}

/// Where the plugin package of a module the model does not load comes from.
#[derive(Debug)]
enum PathPackage {
    /// The package's directory (`<module path>/<name>/plugins`).
    Directory(PathBuf),
    Embedded(EmbeddedPackage),
}

impl fmt::Debug for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backing::Directory(dir) => f.debug_tuple("Directory").field(dir).finish(),
            Backing::Embedded(module) => module.fmt(f),
        }
    }
}

/// The embedded form of a set of modules, as an artifact stores it (with serde; maps are
/// sorted, so the same modules always serialize to the same bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddedModules {
    pub modules: BTreeMap<String, EmbeddedModule>,
    /// The plugin packages of modules on the module path that the model does not load but
    /// whose names the embedded Python code mentions (see [`Modules::embed`]).
    pub path_packages: BTreeMap<String, EmbeddedPackage>,
}

impl EmbeddedModules {
    /// Each module's name and how many files it carries, in name order.
    pub fn summary(&self) -> Vec<(String, usize)> {
        self.modules.iter().map(|(name, module)| (name.clone(), module.files.len())).collect()
    }

    /// Each embedded path package's name and how many Python files it carries, in name order.
    pub fn path_package_summary(&self) -> Vec<(String, usize)> {
        self.path_packages.iter().map(|(name, package)| (name.clone(), package.python.len())).collect()
    }
}

/// The plugin package of a module the model does not load, embedded: its `.py` files, by
/// their path relative to the package's root, collected as a loaded module's are.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddedPackage {
    #[serde(with = "byte_map")]
    pub python: BTreeMap<String, Vec<u8>>,
}

impl fmt::Debug for EmbeddedPackage {
    /// File names and sizes only, as for a module.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes: BTreeMap<&str, usize> = self.python.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
        f.debug_struct("EmbeddedPackage").field("python", &sizes).finish()
    }
}

/// One embedded module.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddedModule {
    /// The content of every regular file under `templates/` and `files/`, by its path
    /// relative to the module's root (`templates/motd.j2`).
    #[serde(with = "byte_map")]
    pub files: BTreeMap<String, Vec<u8>>,
    /// Every directory under `templates/` and `files/`, the two themselves included when they
    /// exist, relative to the module's root: listing a directory must tell an empty one from
    /// a missing one.
    pub directories: BTreeSet<String>,
    /// The `@resource` registrations of the module's Python code, in the order the export
    /// reads them (see [`crate::export::registrations`]).
    pub registrations: Vec<Registration>,
    /// The content of every `.py` file of the module's plugin package (`plugins/` of a v1
    /// module, the package directory of a v2 one), by its path relative to the package's root
    /// (`__init__.py`, `sub/mod.py`); empty when the module has no Python code.
    #[serde(default, with = "byte_map")]
    pub python: BTreeMap<String, Vec<u8>>,
}

impl fmt::Debug for EmbeddedModule {
    /// File names and sizes only: the contents can be large.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes = |files: &'_ BTreeMap<String, Vec<u8>>| -> BTreeMap<String, usize> {
            files.iter().map(|(k, v)| (k.clone(), v.len())).collect()
        };
        f.debug_struct("EmbeddedModule")
            .field("files", &sizes(&self.files))
            .field("directories", &self.directories)
            .field("registrations", &self.registrations)
            .field("python", &sizes(&self.python))
            .finish()
    }
}

/// Why a module could not be embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("cannot embed module {module}: cannot read {}: {source}", path.display())]
    Io {
        module: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot embed module {module}: the path {} is not valid UTF-8, and an artifact names files by UTF-8 paths",
        path.display()
    )]
    NonUtf8Path { module: String, path: PathBuf },
}

impl Modules {
    /// Modules read from their directories (the roots holding `templates/` and `files/`).
    pub fn from_dirs(dirs: HashMap<String, PathBuf>) -> Modules {
        Modules::for_project(dirs, Vec::new())
    }

    /// The modules of a project compiled from its sources: the loaded modules' directories
    /// (the roots holding `templates/` and `files/`), and the plugin packages of the v1 modules
    /// on the module path that the model does not load (`<dir>/<name>/plugins`), which plugin
    /// code may import.
    pub fn for_project(dirs: HashMap<String, PathBuf>, path_packages: Vec<(String, PathBuf)>) -> Modules {
        let modules: BTreeMap<String, Backing> =
            dirs.into_iter().map(|(name, dir)| (name, Backing::Directory(dir))).collect();
        let path_packages = path_packages
            .into_iter()
            .filter(|(name, _)| !modules.contains_key(name))
            .map(|(name, package)| (name, PathPackage::Directory(package)))
            .collect();
        Modules::from_backings(modules, path_packages)
    }

    /// Modules embedded in an artifact.
    pub fn from_embedded(embedded: EmbeddedModules) -> Modules {
        let modules: BTreeMap<String, Backing> =
            embedded.modules.into_iter().map(|(name, module)| (name, Backing::Embedded(module))).collect();
        // An artifact names each package once; one that is also a module (a crafted file) is
        // the module.
        let path_packages = embedded
            .path_packages
            .into_iter()
            .filter(|(name, _)| !modules.contains_key(name))
            .map(|(name, package)| (name, PathPackage::Embedded(package)))
            .collect();
        Modules::from_backings(modules, path_packages)
    }

    fn from_backings(modules: BTreeMap<String, Backing>, path_packages: BTreeMap<String, PathPackage>) -> Modules {
        let embedded_modules = modules
            .iter()
            .filter(|(_, backing)| matches!(backing, Backing::Embedded(module) if !module.python.is_empty()))
            .map(|(name, _)| name);
        let embedded_packages = path_packages
            .iter()
            .filter(|(_, package)| matches!(package, PathPackage::Embedded(p) if !p.python.is_empty()))
            .map(|(name, _)| name);
        let python_dirs =
            embedded_modules.chain(embedded_packages).map(|name| (name.clone(), OnceLock::new())).collect();
        Modules {
            inner: Arc::new(Inner {
                modules,
                path_packages,
                registrations: OnceLock::new(),
                python_dirs,
                sandboxes: Default::default(),
            }),
        }
    }

    /// The embedded form of every module: the files of a module's `templates/` and `files/`
    /// directories, recursively, its resource registrations, read now from its Python
    /// sources, and the `.py` files of its plugin package. Modules that are already embedded
    /// are copied.
    ///
    /// A symbolic link is followed when it leads to a place inside its module and skipped
    /// otherwise, as is anything that is neither a file nor a directory.
    ///
    /// Of the plugin packages of modules the model does not load, those whose name the
    /// embedded Python code mentions are embedded: the name as a whole word in a file that
    /// also mentions `inmanta_plugins`, in the loaded modules' code or, in turn, in a package
    /// embedded so. What Python would import cannot be known without running it; this finds
    /// every plain `import inmanta_plugins.x` and `from inmanta_plugins import x`, and at worst
    /// embeds a package no plugin imports.
    pub fn embed(&self) -> Result<EmbeddedModules, EmbedError> {
        let mut out = EmbeddedModules::default();
        for (name, backing) in &self.inner.modules {
            let module = match backing {
                Backing::Embedded(module) => module.clone(),
                Backing::Directory(dir) => embed_dir(name, dir)?,
            };
            out.modules.insert(name.clone(), module);
        }
        let mut texts: Vec<Vec<u8>> = out.modules.values().flat_map(|m| m.python.values().cloned()).collect();
        let mut scanned = 0;
        while scanned < texts.len() {
            let new = &texts[scanned..];
            let mentioned: Vec<String> = self
                .inner
                .path_packages
                .keys()
                .filter(|name| !out.path_packages.contains_key(*name))
                .filter(|name| new.iter().any(|text| mentions_plugin_package(text, name)))
                .cloned()
                .collect();
            scanned = texts.len();
            for name in mentioned {
                let package = match &self.inner.path_packages[&name] {
                    PathPackage::Embedded(package) => package.clone(),
                    PathPackage::Directory(dir) => embed_package(&name, dir)?,
                };
                texts.extend(package.python.values().cloned());
                out.path_packages.insert(name, package);
            }
        }
        Ok(out)
    }

    /// The names of the modules, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.inner.modules.keys().map(String::as_str)
    }

    /// The directory of a module read from disk; `None` for an embedded or unknown module.
    pub fn dir(&self, module: &str) -> Option<&Path> {
        match self.inner.modules.get(module)? {
            Backing::Directory(dir) => Some(dir),
            Backing::Embedded(_) => None,
        }
    }

    /// The directory of a module's plugin package (`inmanta_plugins.<module>`), for the Python
    /// bridge; otherwise why its plugins cannot run here, as the end of an `Exception in
    /// plugin` message.
    ///
    /// For a module read from its directory this is `plugins/` (v1) or the directory itself
    /// (v2). An embedded module's Python files are written, the first time this is asked, to
    /// a new directory under the temporary directory that only this user can enter
    /// (`weft-plugins-<process id>-<module>-<n>`); later calls, from any clone of these
    /// modules, reuse it, and it is removed when the last clone is dropped.
    pub fn python_dir(&self, module: &str) -> Result<PathBuf, String> {
        match self.inner.modules.get(module) {
            Some(Backing::Directory(dir)) => Ok(package_dir(dir)),
            Some(Backing::Embedded(embedded)) => self.materialized(module, &embedded.python).ok_or_else(|| {
                format!(
                    "the plugin is implemented in Python and this artifact does not carry Python code; run it where \
                     the module {module} is installed"
                )
            })?,
            None => Err(format!("the module {module} has no Python code on disk")),
        }
    }

    /// The directory an embedded package is written out to (see [`Modules::python_dir`]), or
    /// why it could not be written; `None` when it has no Python code.
    fn materialized(&self, name: &str, files: &BTreeMap<String, Vec<u8>>) -> Option<Result<PathBuf, String>> {
        let cell = self.inner.python_dirs.get(name)?;
        Some(match cell.get_or_init(|| Materialized::write(name, files)) {
            Ok(materialized) => Ok(materialized.dir.clone()),
            Err(reason) => Err(reason.clone()),
        })
    }

    /// The plugin package of every module that has Python code, by module name, in name
    /// order (see [`Modules::python_dir`]): what the Python bridge links into its sandbox, so
    /// that a plugin can import another module's plugins, as in the reference, where every
    /// module's package is importable, the packages of modules on the module path that the
    /// model does not load included. A module read from disk counts when its package has an
    /// `__init__.py`; an embedded package that cannot be written out is left out (a call of its
    /// own plugins reports why).
    pub fn python_packages(&self) -> Vec<(String, PathBuf)> {
        let modules = self.inner.modules.iter().filter_map(|(name, backing)| match backing {
            Backing::Directory(dir) => {
                let package = package_dir(dir);
                package.join("__init__.py").is_file().then(|| (name.clone(), package))
            }
            Backing::Embedded(_) => self.python_dir(name).ok().map(|package| (name.clone(), package)),
        });
        let path_packages = self.inner.path_packages.iter().filter_map(|(name, package)| match package {
            PathPackage::Directory(dir) => dir.join("__init__.py").is_file().then(|| (name.clone(), dir.clone())),
            PathPackage::Embedded(embedded) => {
                self.materialized(name, &embedded.python)?.ok().map(|dir| (name.clone(), dir))
            }
        });
        // Only a name Python can import is linked into the sandbox: a name from a crafted
        // artifact (`../x`) must not make a link outside it.
        let mut packages: Vec<(String, PathBuf)> =
            modules.chain(path_packages).filter(|(name, _)| is_package_name(name)).collect();
        packages.sort_by(|a, b| a.0.cmp(&b.0));
        packages
    }

    /// The Python bridge's import directories for these modules.
    pub(crate) fn sandboxes(&self) -> &crate::python::Sandboxes {
        &self.inner.sandboxes
    }

    /// Whether the module is loaded from an artifact rather than from its directory.
    pub fn is_embedded(&self, module: &str) -> bool {
        matches!(self.inner.modules.get(module), Some(Backing::Embedded(_)))
    }

    /// The resource types the modules register, without regard to the model: std's own
    /// first, then each module's in module name order, each in the order of its Python
    /// sources; a type registered twice keeps its first registration. Directories are scanned
    /// once, on first use; embedded modules carry their list.
    pub fn registrations(&self) -> &[Registration] {
        self.inner.registrations.get_or_init(|| {
            let mut out = export::std_registrations();
            let mut seen: std::collections::HashSet<String> = out.iter().map(|r| r.name.clone()).collect();
            for (name, backing) in &self.inner.modules {
                // weft's std is compiled in; its registrations are the ones above.
                if name == "std" {
                    continue;
                }
                let found = match backing {
                    Backing::Directory(dir) => export::scan_registrations(name, dir),
                    Backing::Embedded(module) => module.registrations.clone(),
                };
                for registration in found {
                    if seen.insert(registration.name.clone()) {
                        out.push(registration);
                    }
                }
            }
            out
        })
    }

    /// The Python file of a registration as messages name it: its path on disk for a module
    /// read from its directory, else its path relative to the module.
    pub fn source_display(&self, registration: &Registration) -> String {
        match self.dir(&registration.module) {
            Some(dir) if registration.source != export::STD_SOURCE => {
                dir.join(&registration.source).display().to_string()
            }
            _ => registration.source.clone(),
        }
    }

    /// `path` in a module's `kind` directory (`files`, `templates`) as the reference's
    /// `determine_path` joins them; `None` when no module has that name.
    pub(crate) fn locate(&self, module: &str, kind: &str, path: &str) -> Option<ModulePath<'_>> {
        let target = match self.inner.modules.get(module)? {
            Backing::Directory(dir) => {
                // As `os.path.join(dir, kind, path)`: an empty path leaves a trailing `/`.
                let mut full = dir.join(kind);
                full.push(path);
                Target::Disk(full)
            }
            Backing::Embedded(files) => {
                Target::Embedded { files, key: embedded_key(kind, path), raw: format!("{kind}/{path}") }
            }
        };
        Some(ModulePath { module: module.to_string(), target })
    }
}

/// A file or directory a plugin names inside a module.
pub(crate) struct ModulePath<'m> {
    module: String,
    target: Target<'m>,
}

enum Target<'m> {
    Disk(PathBuf),
    /// `key` is the path relative to the module's root, `None` when the path leaves the
    /// module; `raw` is the path as given, for messages about such paths.
    Embedded {
        files: &'m EmbeddedModule,
        key: Option<String>,
        raw: String,
    },
}

impl ModulePath<'_> {
    /// Whether it is a regular file (following symbolic links, as `os.path.isfile`).
    pub(crate) fn is_file(&self) -> bool {
        match &self.target {
            Target::Disk(path) => path.is_file(),
            Target::Embedded { files, key, .. } => key.as_ref().is_some_and(|k| files.files.contains_key(k)),
        }
    }

    /// The file's text as Python's `open(path).read()` gives it: UTF-8 (else an error of
    /// kind `InvalidData`), universal newlines.
    pub(crate) fn read_text(&self) -> io::Result<String> {
        match &self.target {
            Target::Disk(path) => read_text(path),
            Target::Embedded { files, key, .. } => match key.as_ref().and_then(|k| files.files.get(k)) {
                Some(bytes) => decode_text(bytes.clone()),
                None => Err(io::Error::from(io::ErrorKind::NotFound)),
            },
        }
    }

    /// The names of the regular files in the directory, sorted (Python's `os.listdir` order
    /// is the file system's, which is not reproducible).
    pub(crate) fn list_files(&self) -> io::Result<Vec<String>> {
        match &self.target {
            Target::Disk(dir) => {
                let mut names: Vec<String> = std::fs::read_dir(dir)?
                    .filter_map(Result::ok)
                    .filter(|e| e.path().is_file())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                Ok(names)
            }
            Target::Embedded { files, key, .. } => {
                let Some(key) = key else { return Err(io::Error::from(io::ErrorKind::NotFound)) };
                if !files.directories.contains(key) {
                    let kind = if files.files.contains_key(key) {
                        io::ErrorKind::NotADirectory
                    } else {
                        io::ErrorKind::NotFound
                    };
                    return Err(io::Error::from(kind));
                }
                let prefix = format!("{key}/");
                Ok(files
                    .files
                    .range(prefix.clone()..)
                    .map(|(k, _)| k)
                    .take_while(|k| k.starts_with(&prefix))
                    .filter_map(|k| Some(&k[prefix.len()..]).filter(|name| !name.contains('/')))
                    .map(str::to_string)
                    .collect())
            }
        }
    }

    /// The path as messages show it.
    pub(crate) fn display(&self) -> String {
        match &self.target {
            Target::Disk(path) => path.display().to_string(),
            Target::Embedded { key, raw, .. } => embedded_path(&self.module, key.as_deref().unwrap_or(raw)),
        }
    }

    /// `os.path.abspath` of the path, for `std::file`'s marker: absolute, `.` and `..`
    /// resolved lexically. For an embedded module, its path under [`EMBEDDED_ROOT`].
    pub(crate) fn absolute(&self) -> String {
        match &self.target {
            Target::Disk(path) => abspath(path).display().to_string(),
            Target::Embedded { .. } => self.display(),
        }
    }
}

/// Where an embedded module's file appears to be.
fn embedded_path(module: &str, relative: &str) -> String {
    if relative.is_empty() {
        format!("{EMBEDDED_ROOT}/{module}")
    } else {
        format!("{EMBEDDED_ROOT}/{module}/{relative}")
    }
}

/// `kind/path` relative to the module's root, resolved lexically; `None` when it leaves the
/// module.
fn embedded_key(kind: &str, path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut parts = vec![kind];
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// `os.path.abspath`: absolute, `.` and `..` resolved lexically.
fn abspath(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Reads a text file as Python's `open(path).read()` does: UTF-8, universal newlines.
pub(crate) fn read_text(path: &Path) -> io::Result<String> {
    decode_text(weft_ir::fs::read(path)?)
}

/// Text from a file's bytes, as Python's `open(path).read()` decodes it. Invalid UTF-8 is the
/// error `std::fs::read_to_string` gives, so messages are the same for both kinds of module.
fn decode_text(bytes: Vec<u8>) -> io::Result<String> {
    let text = weft_ir::fs::utf8(bytes)?;
    Ok(if text.contains('\r') { text.replace("\r\n", "\n").replace('\r', "\n") } else { text })
}

/// Reads a module directory into its embedded form.
fn embed_dir(module: &str, dir: &Path) -> Result<EmbeddedModule, EmbedError> {
    let root = std::fs::canonicalize(dir).map_err(|e| WalkError::Io(dir.to_path_buf(), e).in_module(module))?;
    let mut walker = Walker { root, out: EmbeddedModule::default(), ancestors: Vec::new() };
    for kind in EMBEDDED_KINDS {
        walker.entry(&dir.join(kind), kind.to_string()).map_err(|e| e.in_module(module))?;
    }
    walker.out.registrations = export::scan_registrations(module, dir);
    let package = package_dir(dir);
    walker.out.python = python_files(module, walker.root.clone(), &package, package == dir)?;
    Ok(walker.out)
}

/// The `.py` files of the plugin package `dir` of a module the model does not load.
fn embed_package(module: &str, dir: &Path) -> Result<EmbeddedPackage, EmbedError> {
    // Links may lead anywhere inside the module, as for a loaded module's package.
    let module_root = dir.parent().unwrap_or(dir);
    let root = std::fs::canonicalize(module_root)
        .map_err(|e| WalkError::Io(module_root.to_path_buf(), e).in_module(module))?;
    Ok(EmbeddedPackage { python: python_files(module, root, dir, false)? })
}

/// The `.py` files of the plugin package `package` of `module`, whose canonical root `root`
/// links must stay under; `data_dirs_at_top` when the package is the module's directory.
fn python_files(
    module: &str,
    root: PathBuf,
    package: &Path,
    data_dirs_at_top: bool,
) -> Result<BTreeMap<String, Vec<u8>>, EmbedError> {
    let mut python = PythonWalker { root, data_dirs_at_top, ..PythonWalker::default() };
    python.walk(package, "", 0).map_err(|e| e.in_module(module))?;
    Ok(python.out)
}

/// Whether `name` is a package name Python imports: an ASCII identifier.
fn is_package_name(name: &str) -> bool {
    name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether Python source `text` may import the plugin package `name`: it mentions
/// `inmanta_plugins`, and `name` as a whole word.
fn mentions_plugin_package(text: &[u8], name: &str) -> bool {
    let contains = |needle: &[u8]| text.windows(needle.len()).any(|w| w == needle);
    if name.is_empty() || !contains(b"inmanta_plugins") {
        return false;
    }
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
    let name = name.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].windows(name.len()).position(|w| w == name) {
        let start = from + at;
        let end = start + name.len();
        let before = start.checked_sub(1).map(|i| text[i]);
        if !before.is_some_and(word) && !text.get(end).copied().is_some_and(word) {
            return true;
        }
        from = start + 1;
    }
    false
}

/// The directory of a module's plugin package: `plugins/` for a v1 module (when it is a
/// package), else the module's directory (a v2 module is its package).
fn package_dir(module_root: &Path) -> PathBuf {
    let plugins = module_root.join("plugins");
    if plugins.join("__init__.py").is_file() { plugins } else { module_root.to_path_buf() }
}

/// Collects the `.py` files of a plugin package.
#[derive(Default)]
struct PythonWalker {
    /// The module's root, canonical: links must stay below it.
    root: PathBuf,
    /// Whether the package is the module's directory (v2), whose `model/`, `templates/` and
    /// `files/` are the module's, not Python code.
    data_dirs_at_top: bool,
    out: BTreeMap<String, Vec<u8>>,
    /// The canonical directories being walked, so a link to one of them is not followed.
    ancestors: Vec<PathBuf>,
}

impl PythonWalker {
    /// Adds the Python files under `dir`, whose path relative to the package is `prefix`
    /// (empty for the package itself), in name order.
    fn walk(&mut self, dir: &Path, prefix: &str, depth: usize) -> Result<(), WalkError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |e: io::Error| WalkError::Io(path, e)
        };
        if depth > PYTHON_DEPTH {
            return Ok(());
        }
        let canonical = match std::fs::canonicalize(dir) {
            Ok(canonical) => canonical,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(dir)(e)),
        };
        if self.ancestors.contains(&canonical) {
            return Ok(());
        }
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            names.push(entry.map_err(io(dir))?.file_name());
        }
        names.sort();
        self.ancestors.push(canonical);
        for name in names {
            let path = dir.join(&name);
            let Some(metadata) = self.followed_metadata(&path)? else { continue };
            let lossy = name.to_string_lossy();
            let embedded = if metadata.is_dir() {
                let data_dir =
                    depth == 0 && self.data_dirs_at_top && matches!(lossy.as_ref(), "model" | "templates" | "files");
                !lossy.starts_with('.') && !SKIPPED_PYTHON_DIRS.contains(&lossy.as_ref()) && !data_dir
            } else {
                metadata.is_file() && lossy.ends_with(".py")
            };
            if !embedded {
                continue;
            }
            let Some(text) = name.to_str() else { return Err(WalkError::NonUtf8(path)) };
            let key = if prefix.is_empty() { text.to_string() } else { format!("{prefix}/{text}") };
            if metadata.is_dir() {
                self.walk(&path, &key, depth + 1)?;
            } else {
                let bytes = weft_ir::fs::read(&path).map_err(io(&path))?;
                self.out.insert(key, bytes);
            }
        }
        self.ancestors.pop();
        Ok(())
    }

    /// What `path` is, following a symbolic link that stays inside the module; `None` for a
    /// link that leaves it or leads nowhere.
    fn followed_metadata(&self, path: &Path) -> Result<Option<std::fs::Metadata>, WalkError> {
        let io = |e: io::Error| WalkError::Io(path.to_path_buf(), e);
        let metadata = std::fs::symlink_metadata(path).map_err(io)?;
        if !metadata.file_type().is_symlink() {
            return Ok(Some(metadata));
        }
        let Ok(real) = std::fs::canonicalize(path) else { return Ok(None) };
        if !real.starts_with(&self.root) {
            return Ok(None);
        }
        Ok(Some(std::fs::metadata(&real).map_err(io)?))
    }
}

/// An embedded module's plugin package written out for the Python bridge; the directory is
/// removed when this is dropped.
#[derive(Debug)]
struct Materialized {
    dir: PathBuf,
}

impl Materialized {
    /// Writes `files` (paths relative to the package) to a new private directory. The files
    /// are written once and never changed afterwards.
    fn write(module: &str, files: &BTreeMap<String, Vec<u8>>) -> Result<Materialized, String> {
        let failed = |e: &dyn fmt::Display| {
            format!("cannot write the Python code of the module {module} to a temporary directory: {e}")
        };
        let prefix = format!("weft-plugins-{}-{}", std::process::id(), crate::python::file_name_part(module));
        let dir = crate::python::private_dir(&prefix).map_err(|e| failed(&e))?;
        // From here on, a failure removes what was written.
        let materialized = Materialized { dir };
        for (key, bytes) in files {
            let Some(relative) = package_relative(key) else {
                return Err(failed(&format!(
                    "the artifact names the Python file {key:?}, which is not a path inside the package"
                )));
            };
            let path = materialized.dir.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| failed(&e))?;
            }
            let mut file =
                std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| failed(&e))?;
            io::Write::write_all(&mut file, bytes).map_err(|e| failed(&e))?;
        }
        Ok(materialized)
    }
}

impl Drop for Materialized {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A path of an embedded Python file as a relative path, when it is one that stays inside the
/// package: `/`-separated names, none of them empty, `.` or `..`.
fn package_relative(key: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for segment in key.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." || segment.contains('\0') {
            return None;
        }
        out.push(segment);
    }
    // A segment such as `C:` would not be relative everywhere.
    out.is_relative().then_some(out)
}

enum WalkError {
    Io(PathBuf, io::Error),
    NonUtf8(PathBuf),
}

impl WalkError {
    /// The error of embedding `module` that this walk error is.
    fn in_module(self, module: &str) -> EmbedError {
        match self {
            WalkError::Io(path, source) => EmbedError::Io { module: module.to_string(), path, source },
            WalkError::NonUtf8(path) => EmbedError::NonUtf8Path { module: module.to_string(), path },
        }
    }
}

struct Walker {
    /// The module's root, canonical: links must stay below it.
    root: PathBuf,
    out: EmbeddedModule,
    /// The canonical directories being walked, so a link to one of them is not followed.
    ancestors: Vec<PathBuf>,
}

impl Walker {
    /// Embeds what `path` is, under `key`; a missing path is nothing.
    fn entry(&mut self, path: &Path, key: String) -> Result<(), WalkError> {
        let io = |e: io::Error| WalkError::Io(path.to_path_buf(), e);
        let metadata = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        let (real, metadata) = if metadata.file_type().is_symlink() {
            // A dangling link is no file, as `os.path.isfile` says.
            let Ok(real) = std::fs::canonicalize(path) else { return Ok(()) };
            if !real.starts_with(&self.root) {
                return Ok(());
            }
            let metadata = std::fs::metadata(&real).map_err(io)?;
            (real, metadata)
        } else {
            (path.to_path_buf(), metadata)
        };
        if metadata.is_file() {
            let bytes = weft_ir::fs::read(&real).map_err(io)?;
            self.out.files.insert(key, bytes);
        } else if metadata.is_dir() {
            let canonical = std::fs::canonicalize(&real).map_err(io)?;
            if self.ancestors.contains(&canonical) {
                return Ok(());
            }
            self.out.directories.insert(key.clone());
            let mut names = Vec::new();
            for entry in std::fs::read_dir(&real).map_err(io)? {
                let entry = entry.map_err(io)?;
                let name = entry.file_name();
                let Some(text) = name.to_str() else {
                    return Err(WalkError::NonUtf8(path.join(&name)));
                };
                names.push(text.to_string());
            }
            names.sort();
            self.ancestors.push(canonical);
            for name in names {
                self.entry(&path.join(&name), format!("{key}/{name}"))?;
            }
            self.ancestors.pop();
        }
        Ok(())
    }
}

/// File contents as serde bytes, so binary codecs store them as one block instead of a
/// sequence of numbers.
mod byte_map {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::ser::{SerializeMap, Serializer};
    use serde::{Deserialize, Serialize};

    struct Bytes<'a>(&'a [u8]);

    impl Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    struct ByteBuf(Vec<u8>);

    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            // `deserialize_byte_buf`, not `deserialize_bytes`: bincode's owned decoder cannot
            // lend bytes, and every format can give owned ones.
            deserializer.deserialize_byte_buf(ByteBufVisitor)
        }
    }

    struct ByteBufVisitor;

    impl<'de> Visitor<'de> for ByteBufVisitor {
        type Value = ByteBuf;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
            Ok(ByteBuf(v.to_vec()))
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
            Ok(ByteBuf(v))
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteBuf, E> {
            Ok(ByteBuf(v.as_bytes().to_vec()))
        }

        /// Text formats (JSON) write bytes as a list of numbers.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ByteBuf, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(ByteBuf(out))
        }
    }

    pub(super) fn serialize<S: Serializer>(map: &BTreeMap<String, Vec<u8>>, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(map.len()))?;
        for (k, v) in map {
            out.serialize_entry(k, &Bytes(v))?;
        }
        out.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, Vec<u8>>, D::Error> {
        let map = BTreeMap::<String, ByteBuf>::deserialize(deserializer)?;
        Ok(map.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, content) in files {
            let file = root.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
    }

    fn encode(embedded: &EmbeddedModules) -> Vec<u8> {
        bincode::serde::encode_to_vec(embedded, bincode::config::standard()).unwrap()
    }

    fn modules(dirs: &[(&str, &Path)]) -> Modules {
        Modules::from_dirs(dirs.iter().map(|(n, d)| (n.to_string(), d.to_path_buf())).collect())
    }

    #[test]
    fn embeds_templates_and_files_only() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("m");
        write(
            &root,
            &[
                ("templates/a.j2", "a"),
                ("templates/sub/b.j2", "b"),
                ("files/x.txt", "x"),
                ("files/empty/.keep", ""),
                ("model/_init.cf", "entity A: end"),
                ("plugins/__init__.py", "@resource('m::R', agent='a', id_attribute='n')\nclass R: pass\n"),
                ("setup.cfg", ""),
            ],
        );
        std::fs::create_dir_all(root.join("files/void")).unwrap();
        let embedded = modules(&[("m", &root)]).embed().unwrap();
        let m = &embedded.modules["m"];
        let files: Vec<&str> = m.files.keys().map(String::as_str).collect();
        assert_eq!(files, ["files/empty/.keep", "files/x.txt", "templates/a.j2", "templates/sub/b.j2"]);
        let dirs: Vec<&str> = m.directories.iter().map(String::as_str).collect();
        assert_eq!(dirs, ["files", "files/empty", "files/void", "templates", "templates/sub"]);
        assert_eq!(
            m.registrations,
            [Registration { name: "m::R".into(), module: "m".into(), source: "plugins/__init__.py".into() }]
        );
    }

    /// Embedding twice gives the same bytes, which never name the build machine's paths.
    #[test]
    fn embedding_is_deterministic_and_host_independent() {
        let scratch = tempfile::tempdir().unwrap();
        let (a, b) = (scratch.path().join("a"), scratch.path().join("b"));
        write(&a, &[("files/z", "z"), ("files/a", "a"), ("templates/t.j2", "{{ x }}")]);
        write(&b, &[("inmanta_plugins/b/__init__.py", "@resource(\"b::R\", agent=\"a\", id_attribute=\"n\")\n")]);
        let first = encode(&modules(&[("a", &a), ("b", &b)]).embed().unwrap());
        let second = encode(&modules(&[("b", &b), ("a", &a)]).embed().unwrap());
        assert_eq!(first, second);
        let scratch_path = scratch.path().as_os_str().as_bytes();
        assert!(!first.windows(scratch_path.len()).any(|w| w == scratch_path));
    }

    /// Of the packages of modules the model does not load, an artifact carries those the
    /// embedded Python code names, in turn, and no other; they are importable, but no module.
    #[test]
    fn path_packages_named_by_embedded_code_are_embedded() {
        let scratch = tempfile::tempdir().unwrap();
        let libs = scratch.path();
        write(
            libs,
            &[
                ("m/plugins/__init__.py", "from inmanta_plugins.direct import f\n"),
                ("direct/plugins/__init__.py", "import inmanta_plugins.indirect.sub as s\n"),
                ("indirect/plugins/__init__.py", ""),
                ("indirect/plugins/sub.py", "x = 1\n"),
                ("unnamed/plugins/__init__.py", "import inmanta_plugins.m\n"),
                ("prefixed/plugins/__init__.py", ""),
                ("loaded/plugins/__init__.py", "# mentions direct, but not the plugins package\n"),
            ],
        );
        let package = |name: &str| (name.to_string(), libs.join(name).join("plugins"));
        let modules = Modules::for_project(
            [("m".to_string(), libs.join("m")), ("loaded".to_string(), libs.join("loaded"))].into(),
            vec![package("direct"), package("indirect"), package("unnamed"), package("prefixed"), package("m")],
        );
        let names: Vec<String> = modules.python_packages().into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["direct", "indirect", "loaded", "m", "prefixed", "unnamed"]);
        let embedded = modules.embed().unwrap();
        assert_eq!(embedded.path_package_summary(), [("direct".to_string(), 1), ("indirect".to_string(), 2)]);
        let names: Vec<&str> = embedded.modules.keys().map(String::as_str).collect();
        assert_eq!(names, ["loaded", "m"]);
        assert!(modules.registrations().iter().all(|r| r.module != "direct"));
        let from_artifact = Modules::from_embedded(embedded.clone());
        let names: Vec<String> = from_artifact.python_packages().into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["direct", "indirect", "loaded", "m"]);
        assert_eq!(from_artifact.embed().unwrap(), embedded);
        assert!(!mentions_plugin_package(b"import inmanta_plugins.directory", "direct"));
        assert!(is_package_name("_a1") && !is_package_name("../x") && !is_package_name("1a") && !is_package_name(""));
        assert!(mentions_plugin_package(b"from inmanta_plugins import (a,\n direct)", "direct"));
    }

    #[test]
    fn links_inside_the_module_are_followed_and_others_skipped() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("m");
        write(&root, &[("files/real.txt", "real"), ("templates/t.j2", "t")]);
        write(scratch.path(), &[("outside.txt", "secret")]);
        let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
        link(&root.join("files/real.txt"), "files/inside.txt");
        link(&root.join("templates"), "files/tpl");
        link(&scratch.path().join("outside.txt"), "files/outside.txt");
        link(&root.join("files"), "files/loop");
        link(&root.join("files/nothing"), "files/dangling");
        let embedded = modules(&[("m", &root)]).embed().unwrap();
        let files: Vec<&str> = embedded.modules["m"].files.keys().map(String::as_str).collect();
        assert_eq!(files, ["files/inside.txt", "files/real.txt", "files/tpl/t.j2", "templates/t.j2"]);
        assert_eq!(embedded.modules["m"].files["files/inside.txt"], b"real");
    }

    #[test]
    fn paths_that_are_not_utf8_are_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("m");
        std::fs::create_dir_all(root.join("files")).unwrap();
        std::fs::write(root.join("files").join(std::ffi::OsStr::from_bytes(b"caf\xe9")), "x").unwrap();
        let error = modules(&[("m", &root)]).embed().unwrap_err();
        assert!(matches!(error, EmbedError::NonUtf8Path { .. }), "{error}");
        let text = error.to_string();
        assert!(
            text.starts_with("cannot embed module m: the path ")
                && text.ends_with("is not valid UTF-8, and an artifact names files by UTF-8 paths"),
            "{text}"
        );
    }

    /// The export's registrations are the same from directories and from the embedded form,
    /// after a round trip through the artifact's codec.
    #[test]
    fn registrations_round_trip() {
        let scratch = tempfile::tempdir().unwrap();
        let (fs, other) = (scratch.path().join("fs"), scratch.path().join("other"));
        write(
            &fs,
            &[
                ("plugins/__init__.py", "@resource(\"fs::File\", agent=\"host.name\", id_attribute=\"path\")\n"),
                (
                    "plugins/a.py",
                    "@inmanta.resources.resource('fs::Directory', agent='host.name', id_attribute='path')\n",
                ),
                ("plugins/a/b.py", "@resource(\"fs::Symlink\", agent=\"host.name\", id_attribute=\"dst\")\n"),
                ("templates/x.py", "@resource(\"fs::NotThis\", agent=\"a\", id_attribute=\"n\")\n"),
            ],
        );
        write(
            &other,
            &[(
                "__init__.py",
                "@resource(\"fs::File\", agent=\"x\", id_attribute=\"y\")\n@resource(\"other::R\", agent=\"x\", id_attribute=\"y\")\n",
            )],
        );
        let dirs = modules(&[("fs", &fs), ("other", &other)]);
        let config = bincode::config::standard();
        let (decoded, _): (EmbeddedModules, usize) =
            bincode::serde::decode_from_slice(&encode(&dirs.embed().unwrap()), config).unwrap();
        let embedded = Modules::from_embedded(decoded);
        let names = |m: &Modules| -> Vec<(String, String, String)> {
            m.registrations().iter().map(|r| (r.name.clone(), r.module.clone(), r.source.clone())).collect()
        };
        assert_eq!(names(&dirs), names(&embedded));
        let expected: Vec<(String, String, String)> = [
            ("std::testing::NullResource", "std", "<std>"),
            ("std::AgentConfig", "std", "<std>"),
            ("fs::File", "fs", "plugins/__init__.py"),
            // Paths sort by component: `a/b.py` before `a.py`.
            ("fs::Symlink", "fs", "plugins/a/b.py"),
            ("fs::Directory", "fs", "plugins/a.py"),
            ("other::R", "other", "__init__.py"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        assert_eq!(names(&dirs), expected);
        let defined = export::registrations(&embedded, |name| name.starts_with("fs::"));
        assert_eq!(defined.len(), 3);
        // Messages name the Python file on disk for a directory, relative to the module once
        // embedded.
        let file = &dirs.registrations()[2];
        assert_eq!(dirs.source_display(file), fs.join("plugins/__init__.py").display().to_string());
        assert_eq!(embedded.source_display(file), "plugins/__init__.py");
        // JSON works too (bytes become lists of numbers).
        let json = serde_json::to_string(&dirs.embed().unwrap()).unwrap();
        let back: EmbeddedModules = serde_json::from_str(&json).unwrap();
        assert_eq!(back, dirs.embed().unwrap());
    }

    /// The `.py` files of a package directory, by path relative to it, as read from disk.
    fn python_files_on_disk(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                let key = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
                if entry.file_type().unwrap().is_dir() {
                    walk(&entry.path(), &key, out);
                } else {
                    out.insert(key, std::fs::read(entry.path()).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(dir, "", &mut out);
        out
    }

    /// A v1 module's `plugins/` and a v2 module's package directory are embedded (their `.py`
    /// files only, without caches, tests, docs, hidden directories and the v2 module's data
    /// directories), survive the artifact's codec, and are written back byte for byte, once,
    /// to a private directory that goes away with the modules.
    #[test]
    fn python_code_is_embedded_and_materialized() {
        use std::os::unix::fs::PermissionsExt;

        let scratch = tempfile::tempdir().unwrap();
        let (v1, v2) = (scratch.path().join("v1"), scratch.path().join("v2"));
        write(
            &v1,
            &[
                ("plugins/__init__.py", "from inmanta.plugins import plugin\n"),
                ("plugins/sub/__init__.py", ""),
                ("plugins/sub/deep.py", "X = 1\r\n"),
                ("plugins/templates/helper.py", "# a subpackage named like a data directory\n"),
                ("plugins/__pycache__/__init__.cpython-311.pyc", "junk"),
                ("plugins/__pycache__/stray.py", "junk"),
                ("plugins/tests/test_x.py", "junk"),
                ("plugins/.hidden/h.py", "junk"),
                ("plugins/notes.txt", "not Python"),
                ("setup.py", "outside the package"),
                ("model/_init.cf", ""),
                ("templates/t.py", "a template"),
            ],
        );
        std::fs::write(v1.join("plugins/latin1.py"), b"# caf\xe9\n").unwrap();
        std::os::unix::fs::symlink(v1.join("plugins/sub/deep.py"), v1.join("plugins/linked.py")).unwrap();
        write(scratch.path(), &[("outside.py", "secret")]);
        std::os::unix::fs::symlink(scratch.path().join("outside.py"), v1.join("plugins/outside.py")).unwrap();
        write(
            &v2,
            &[
                ("__init__.py", "@resource('v2::R', agent='a', id_attribute='n')\nclass R: pass\n"),
                ("util/__init__.py", "def f(): return 1\n"),
                ("model/_init.cf", ""),
                ("templates/t.py", "a template"),
                ("files/f.py", "a file"),
                ("docs/conf.py", "junk"),
            ],
        );
        let dirs = modules(&[("v1", &v1), ("v2", &v2)]);
        let config = bincode::config::standard();
        let (decoded, _): (EmbeddedModules, usize) =
            bincode::serde::decode_from_slice(&encode(&dirs.embed().unwrap()), config).unwrap();
        let keys = |module: &str| -> Vec<String> { decoded.modules[module].python.keys().cloned().collect() };
        assert_eq!(
            keys("v1"),
            ["__init__.py", "latin1.py", "linked.py", "sub/__init__.py", "sub/deep.py", "templates/helper.py"]
        );
        assert_eq!(keys("v2"), ["__init__.py", "util/__init__.py"]);
        assert_eq!(decoded.modules["v1"].python["linked.py"], b"X = 1\r\n");
        // Embedding Python code does not add to the module files plugins read.
        assert_eq!(decoded.modules["v2"].files.keys().collect::<Vec<_>>(), ["files/f.py", "templates/t.py"]);

        let embedded = Modules::from_embedded(decoded.clone());
        for module in ["v1", "v2"] {
            let dir = embedded.python_dir(module).unwrap();
            assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
            assert_eq!(python_files_on_disk(&dir), decoded.modules[module].python);
            // Written once: later calls and clones get the same directory.
            assert_eq!(embedded.python_dir(module).unwrap(), dir);
            assert_eq!(embedded.clone().python_dir(module).unwrap(), dir);
        }
        // From their directories, the bridge gets the packages themselves.
        assert_eq!(dirs.python_dir("v1"), Ok(v1.join("plugins")));
        assert_eq!(dirs.python_dir("v2"), Ok(v2.clone()));
        // The directories go away with the last clone of the modules.
        let written = embedded.python_dir("v1").unwrap();
        drop(embedded);
        assert!(!written.exists());
        // Another set of modules writes its own.
        let expected = decoded.modules["v1"].python.clone();
        let again = Modules::from_embedded(decoded);
        let other = again.python_dir("v1").unwrap();
        assert_ne!(other, written);
        assert_eq!(python_files_on_disk(&other), expected);
    }

    #[test]
    fn materializing_refuses_paths_that_leave_the_package() {
        for key in ["../escape.py", "/abs.py", "a//b.py", "./a.py", ""] {
            let mut module = EmbeddedModule::default();
            module.python.insert("__init__.py".into(), b"".to_vec());
            module.python.insert(key.into(), b"x".to_vec());
            let embedded = Modules::from_embedded(EmbeddedModules {
                modules: [("m".to_string(), module)].into(),
                ..Default::default()
            });
            let error = embedded.python_dir("m").unwrap_err();
            assert!(
                error.starts_with(
                    "cannot write the Python code of the module m to a temporary directory: the artifact \
                                   names the Python file"
                ),
                "{error}"
            );
        }
        assert_eq!(package_relative("a/b.py"), Some(PathBuf::from("a/b.py")));
    }

    #[test]
    fn python_plugins_need_the_module_directory() {
        let scratch = tempfile::tempdir().unwrap();
        let dirs = modules(&[("m", scratch.path())]);
        assert_eq!(dirs.python_dir("m"), Ok(scratch.path().to_path_buf()));
        let embedded = Modules::from_embedded(dirs.embed().unwrap());
        assert!(embedded.inner.modules.values().all(|b| matches!(b, Backing::Embedded(m) if m.python.is_empty())));
        assert_eq!(
            embedded.python_dir("m"),
            Err("the plugin is implemented in Python and this artifact does not carry Python code; run it where the \
                 module m is installed"
                .to_string())
        );
        assert_eq!(embedded.python_dir("x"), Err("the module x has no Python code on disk".to_string()));
    }

    #[test]
    fn embedded_paths_resolve_lexically_inside_the_module() {
        assert_eq!(embedded_key("files", "a/./b//c"), Some("files/a/b/c".into()));
        assert_eq!(embedded_key("files", "a/../b"), Some("files/b".into()));
        assert_eq!(embedded_key("files", "../templates/t.j2"), Some("templates/t.j2".into()));
        assert_eq!(embedded_key("files", ""), Some("files".into()));
        assert_eq!(embedded_key("files", "../.."), None);
        assert_eq!(embedded_key("files", "/etc/passwd"), None);
    }
}
