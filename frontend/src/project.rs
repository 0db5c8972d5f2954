//! Projects and modules: finding and parsing every file a compile needs.
//!
//! A project is a directory with `project.yml` and `main.cf` (namespace `__config__`).
//! Modules are found, by name, in this order:
//!
//! 1. `std` is always weft's own embedded std module (its plugins are implemented natively, so
//!    its model must be the one they were written for);
//! 2. a v2 module installed in the project's Python environment
//!    (`site-packages/inmanta_plugins/<name>/model/_init.cf`), as the reference prefers v2;
//! 3. a v1 module in a directory of the `modulepath` (`<dir>/<name>/module.yml` and
//!    `model/_init.cf`).
//!
//! Namespaces map onto files as in the reference (`mod` is `model/_init.cf`, `mod::x` is
//! `model/x.cf` or, when a directory `model/x/` exists, `model/x/_init.cf`), and imports are
//! followed with the reference's work list, so that blocks come out in the same order the
//! reference executes them: `main.cf` first, then modules grouped by top-level module in the
//! order they were first loaded. Importing `a::b::c` loads `a`, `a::b` and `a::b::c`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use bumpalo::Bump;
use rayon::prelude::*;
use weft_ir::diagnostic::codes;
use weft_ir::plugin::{PluginSignature, PythonDataclass};
use weft_ir::{Diagnostic, ErrorKind, FileId, Interner, Location, SourceFile, SourceMap, Span, Symbol};

use crate::ast;
use crate::parser::parse_file;
use crate::python;
use crate::relocate::Relocator;

/// Where to look for things outside the project directory.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// A Python environment (a virtualenv's root) whose `site-packages` holds v2 modules.
    /// The CLI fills this from `--python-env` or `VIRTUAL_ENV`.
    pub python_env: Option<PathBuf>,
}

/// The parts of `project.yml` weft uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProjectConfig {
    pub name: String,
    /// Module search path, resolved against the project directory.
    pub modulepath: Vec<PathBuf>,
    pub downloadpath: Option<PathBuf>,
    /// `relation_precedence_policy` rules, as written (`a::A.rel before b::B.other`).
    pub relation_precedence_policy: Vec<String>,
    /// Whether `project.yml` was present (a directory with only `main.cf` is accepted too).
    pub has_project_file: bool,
    /// `project.yml` in the source map, when it was present and readable.
    pub project_file: Option<FileId>,
    /// The parameters declared under `weft: parameters:`, in declaration order.
    pub parameters: Vec<DeclaredParameter>,
}

/// A parameter declared in `project.yml`:
///
/// ```yaml
/// weft:
///   parameters:
///     - replicas                                  # a name
///     - region: "the region to deploy to"         # a name with a description
/// ```
///
/// or, as a mapping from names to descriptions (`null` for none):
///
/// ```yaml
/// weft:
///   parameters:
///     replicas: "how many replicas to run"
///     region:
/// ```
///
/// The Inmanta language has no way to declare a parameter, and a project must still compile
/// with the reference compiler, so the declaration lives under a key of its own in
/// `project.yml`: the reference reads that file with pydantic, which ignores unknown keys.
/// Whether the name is a top-level variable of `main.cf` with a constant value is checked
/// after lowering (`lower::parameters`).
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredParameter {
    pub name: String,
    pub description: Option<String>,
    /// The entry in `project.yml` (the name as written).
    pub location: Location,
}

/// How a module was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleOrigin {
    /// weft's own std, compiled into the binary.
    Embedded,
    /// A v1 module: the directory holding `module.yml`.
    V1 { dir: PathBuf },
    /// A v2 module: the package directory `site-packages/inmanta_plugins/<name>`.
    V2 { package_dir: PathBuf },
}

/// A loaded module.
#[derive(Clone, Debug)]
pub struct Module {
    pub name: String,
    pub version: Option<String>,
    pub origin: ModuleOrigin,
    /// Whether the module ships Python plugin sources (a `plugins/` package for v1, any
    /// Python file for v2). Dataclass entities need one.
    pub has_plugin_package: bool,
}

impl Module {
    /// The directory holding `model/`, `templates/` and `files/`, for modules on disk.
    pub fn root(&self) -> Option<&Path> {
        match &self.origin {
            ModuleOrigin::Embedded => None,
            ModuleOrigin::V1 { dir } => Some(dir),
            ModuleOrigin::V2 { package_dir } => Some(package_dir),
        }
    }
}

/// One parsed namespace: a `.cf` file and its tree.
#[derive(Debug)]
pub struct Namespace<'a> {
    /// The full name: `__config__`, `std`, `mod::sub`.
    pub name: String,
    /// Index into [`Program::modules`]; `None` for `__config__`.
    pub module: Option<usize>,
    pub file: FileId,
    pub ast: ast::File<'a>,
}

/// Everything loaded for a compile.
#[derive(Debug)]
pub struct Program<'a> {
    pub dir: PathBuf,
    pub config: ProjectConfig,
    pub sources: SourceMap,
    pub interner: Interner,
    /// In execution order: `__config__` first.
    pub namespaces: Vec<Namespace<'a>>,
    pub modules: Vec<Module>,
    /// Plugins of the loaded namespaces.
    pub plugins: Vec<PluginSignature>,
    /// Python dataclasses of the loaded namespaces.
    pub dataclasses: Vec<PythonDataclass>,
    /// Namespaces that have a Python module in their module's plugins (`inmanta_plugins.mod.x`
    /// exists for `mod::x`), loaded or not.
    pub python_modules: Vec<String>,
    /// The Python files the plugins of loaded namespaces were read from, by the plugins'
    /// namespace and `source_file`, for diagnostics that point into them (the embedded std's
    /// are not here).
    pub plugin_files: HashMap<(String, String), PluginFile>,
    /// The plugin packages of v1 modules on the module path that the model does not load,
    /// by module name (see [`Loader::unloaded_path_packages`]): plugin code may import them.
    pub path_plugin_packages: Vec<(String, PathBuf)>,
}

/// A Python file that plugins were read from: its path as diagnostics show it, and its text.
#[derive(Clone, Debug)]
pub struct PluginFile {
    pub display: String,
    pub text: String,
}

impl Program<'_> {
    pub fn namespace(&self, name: &str) -> Option<&Namespace<'_>> {
        self.namespaces.iter().find(|n| n.name == name)
    }

    /// Each loaded module's directory on disk (holding `templates/` and `files/`), by name.
    pub fn module_dirs(&self) -> std::collections::HashMap<String, PathBuf> {
        self.modules.iter().filter_map(|m| m.root().map(|r| (m.name.clone(), r.to_path_buf()))).collect()
    }

    /// The digest of the sources this compile read, for the provenance of an artifact: the
    /// lowercase hex SHA-256 of
    ///
    /// 1. the tag `weft-source-digest-v1`;
    /// 2. `project.yml`: the tag `project.yml` and its contents, or the tag `no project.yml`
    ///    when the project has none;
    /// 3. for every loaded namespace in load order (`main.cf` first, then modules as the
    ///    reference executes them): the tag `cf`, the file's path and its contents.
    ///
    /// The path of `main.cf` is `main.cf`; the path of a module's file is the module's name and
    /// the file's path inside the module (`std/model/_init.cf`, `mymod/model/sub.cf`), so the
    /// digest does not depend on where the project, the module path or the Python environment
    /// is on disk. Every item is framed (its length as a little-endian `u64`, then its bytes),
    /// so no two different sequences of files hash the same input. Nothing else enters:
    /// no absolute paths, modification times, module versions, or plugin (Python) sources.
    /// The same sources give the same digest on any machine; a new weft version whose embedded
    /// `std` model changed gives a different one, as it should.
    pub fn source_digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        let mut item = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        item(b"weft-source-digest-v1");
        match self.config.project_file {
            Some(file) => {
                item(b"project.yml");
                item(self.sources.get(file).text.as_bytes());
            }
            None => item(b"no project.yml"),
        }
        for ns in &self.namespaces {
            item(b"cf");
            item(self.digest_path(ns).as_bytes());
            item(self.sources.get(ns.file).text.as_bytes());
        }
        let digest = hasher.finalize();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The machine-independent path of a namespace's file (see [`Program::source_digest`]).
    fn digest_path(&self, ns: &Namespace<'_>) -> String {
        let Some(module) = ns.module.map(|m| &self.modules[m]) else { return "main.cf".to_string() };
        let shown = &self.sources.get(ns.file).name;
        let inside = match module.root() {
            // Embedded files are shown as `<weft>/std/<path>`.
            None => shown.strip_prefix(&format!("<weft>/{}/", module.name)).map(str::to_string),
            Some(root) => {
                // Files are shown relative to the project when they are inside it.
                let full = if Path::new(shown).is_absolute() { PathBuf::from(shown) } else { self.dir.join(shown) };
                full.strip_prefix(root).ok().map(|rel| rel.to_string_lossy().replace('\\', "/"))
            }
        };
        // A file outside its module cannot happen; the namespace still names it uniquely.
        let inside = inside.unwrap_or_else(|| ns.name.clone());
        format!("{}/{inside}", module.name)
    }
}

/// The embedded std module: paths relative to the module root and their contents.
pub const EMBEDDED_STD: &[(&str, &str)] = &[
    ("model/_init.cf", include_str!("../std/model/_init.cf")),
    ("model/testing.cf", include_str!("../std/model/testing.cf")),
    ("plugins/__init__.py", include_str!("../std/plugins/__init__.py")),
    ("templates/host_uri.j2", include_str!("../std/templates/host_uri.j2")),
];

/// The display name of an embedded std file.
fn embedded_display(rel: &str) -> String {
    format!("<weft>/std/{rel}")
}

/// Loads and parses a project and every module it imports.
///
/// Always returns a program (possibly with missing parts) together with the diagnostics; the
/// caller decides whether errors are fatal.
///
/// Files are parsed in parallel on rayon's current pool when it has more than one thread (see
/// `Loader::walk`); the program and the diagnostics are the same whatever the number of
/// threads, down to the numbering of symbols and files.
pub fn load_project<'a>(arena: &'a Bump, dir: &Path, options: &LoadOptions) -> (Program<'a>, Vec<Diagnostic>) {
    let (program, diagnostics, _) = load(arena, dir, options, rayon::current_num_threads() > 1);
    (program, diagnostics)
}

/// [`load_project`], parsing ahead or not; also returns how many files were parsed ahead.
fn load<'a>(
    arena: &'a Bump,
    dir: &Path,
    options: &LoadOptions,
    parse_ahead: bool,
) -> (Program<'a>, Vec<Diagnostic>, usize) {
    let mut loader = Loader {
        arena,
        dir: dir.to_path_buf(),
        sources: SourceMap::new(),
        interner: Interner::new(),
        diagnostics: Vec::new(),
        modules: Vec::new(),
        module_index: HashMap::new(),
        located: HashMap::new(),
        files: HashMap::new(),
        parse_ahead,
        parsed_ahead: 0,
        site_packages: options.python_env.as_deref().map(site_packages_dirs).unwrap_or_default(),
        first_imports: HashMap::new(),
        plugins: Vec::new(),
        dataclasses: Vec::new(),
        python_modules: Vec::new(),
        plugin_files: HashMap::new(),
        config: ProjectConfig::default(),
    };
    loader.config = loader.read_config();
    let namespaces = loader.load_all();
    let parsed_ahead = loader.parsed_ahead;
    let path_plugin_packages = loader.unloaded_path_packages();
    let Loader {
        sources,
        interner,
        diagnostics,
        modules,
        plugins,
        dataclasses,
        python_modules,
        plugin_files,
        config,
        ..
    } = loader;
    let program = Program {
        dir: dir.to_path_buf(),
        config,
        sources,
        interner,
        namespaces,
        modules,
        plugins,
        dataclasses,
        python_modules,
        plugin_files,
        path_plugin_packages,
    };
    (program, diagnostics, parsed_ahead)
}

/// The `site-packages` directories of a Python environment.
fn site_packages_dirs(env: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for lib in ["lib", "lib64"] {
        if let Ok(entries) = std::fs::read_dir(env.join(lib)) {
            let mut found: Vec<PathBuf> =
                entries.filter_map(Result::ok).map(|e| e.path().join("site-packages")).filter(|p| p.is_dir()).collect();
            found.sort();
            dirs.extend(found);
        }
    }
    let windows = env.join("Lib").join("site-packages");
    if windows.is_dir() {
        dirs.push(windows);
    }
    dirs.dedup();
    dirs
}

struct Loader<'a> {
    arena: &'a Bump,
    dir: PathBuf,
    sources: SourceMap,
    interner: Interner,
    diagnostics: Vec<Diagnostic>,
    modules: Vec<Module>,
    module_index: HashMap<String, Option<usize>>,
    /// Modules looked up ahead of their first import (to parse their files ahead), not yet
    /// registered in `modules`: registration order is import order.
    located: HashMap<String, Option<Module>>,
    /// The file of each namespace looked up so far (`None`: the embedded std has no such
    /// file), by full namespace name.
    files: HashMap<String, Option<NamespaceFile>>,
    /// Whether to parse the files of pending imports ahead, in parallel.
    parse_ahead: bool,
    /// How many files were parsed ahead.
    parsed_ahead: usize,
    site_packages: Vec<PathBuf>,
    /// Where each module was first imported, by module name: where a problem of the module as
    /// a whole (not of one of its files) is reported.
    first_imports: HashMap<String, Location>,
    plugins: Vec<PluginSignature>,
    dataclasses: Vec<PythonDataclass>,
    python_modules: Vec<String>,
    plugin_files: HashMap<(String, String), PluginFile>,
    config: ProjectConfig,
}

/// An import waiting to be loaded, with where it was written.
struct PendingImport {
    name: String,
    at: Option<Location>,
}

/// The state of the reference's import work list (see [`Loader::walk`]).
struct WorkList<'a> {
    /// Imports waiting to be loaded; the reference takes them from the end.
    stack: Vec<PendingImport>,
    /// Namespaces grouped by top-level module, modules in the order they were first loaded:
    /// the order in which the reference emits their blocks.
    groups: Vec<(String, Vec<Namespace<'a>>)>,
    /// The namespaces loaded so far, by top-level module.
    done: HashMap<String, HashSet<String>>,
    /// How many entries at the bottom of `stack` have been planned ([`Loader::plan_ahead`]):
    /// their files are loaded, parsed ahead or missing, so each entry is planned once.
    planned: usize,
}

/// The file of a namespace, before it is read.
#[derive(Clone, Debug)]
struct NamespaceFile {
    /// The name the source map shows for it; unique per file, so it also keys the files
    /// parsed ahead.
    display: String,
    source: FileSource,
}

#[derive(Clone, Debug)]
enum FileSource {
    /// A file of the embedded std module, with its text.
    Embedded(&'static str),
    Disk(PathBuf),
}

/// Stands for a file's id in the diagnostics of a file parsed ahead, until the work list
/// reaches the file and registers it in the source map.
const AHEAD_FILE: FileId = FileId(u32::MAX);

/// A file parsed ahead of its turn, on a worker thread, into an arena and an interner of its
/// own.
struct ParsedAhead<'s> {
    source: SourceFile,
    /// Where the first invalid UTF-8 byte was, if any.
    invalid_utf8_at: Option<usize>,
    tree: ast::File<'s>,
    /// The file's names, numbered in the order the parser met them.
    interner: Interner,
    /// Located in [`AHEAD_FILE`].
    diagnostics: Vec<Diagnostic>,
}

/// Files parsed ahead and not taken by the work list yet, by display name; the read error for a
/// file that could not be read.
type Ahead<'s> = HashMap<String, std::io::Result<ParsedAhead<'s>>>;

/// Reads the texts that [`SourceFile::release_text`] let go of again, from the files they were
/// read from, as loading read them. Returns whether every file of the map has its text; a
/// file that changed since stays without it.
pub fn restore_sources(sources: &mut SourceMap) -> bool {
    let mut complete = true;
    for file in sources.files_mut().filter(|f| f.is_released()) {
        let text = file.origin.as_deref().and_then(|path| read_source(path).ok()).map(|(text, _)| text);
        complete &= text.is_some_and(|text| file.restore_text(text));
    }
    complete
}

/// Reads a file as UTF-8, reporting where invalid bytes start (they are replaced, to go on).
fn read_source(path: &Path) -> std::io::Result<(String, Option<usize>)> {
    let bytes = weft_ir::fs::read(path)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok((text, None)),
        Err(e) => {
            let valid_up_to = e.utf8_error().valid_up_to();
            Ok((String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(valid_up_to)))
        }
    }
}

/// Reads and parses one file into `arena` with an interner of its own: the part of loading a
/// file that does not need the project's arena, interner or source map, so that it can run
/// on any thread. The read error when the file cannot be read.
fn parse_ahead<'s>(arena: &'s Bump, file: &NamespaceFile) -> std::io::Result<ParsedAhead<'s>> {
    let (text, invalid_utf8_at) = match &file.source {
        FileSource::Embedded(text) => (text.to_string(), None),
        FileSource::Disk(path) => read_source(path)?,
    };
    let mut source = SourceFile::new(file.display.clone(), text.as_str());
    if let FileSource::Disk(path) = &file.source {
        source = source.with_origin(path);
    }
    let text: &'s str = arena.alloc_str(&text);
    let mut interner = Interner::new();
    let out = parse_file(arena, text, AHEAD_FILE, &mut interner);
    Ok(ParsedAhead { source, invalid_utf8_at, tree: out.file, interner, diagnostics: out.diagnostics })
}

impl<'a> Loader<'a> {
    fn project_error(&mut self, message: String, file: Option<FileId>) {
        let mut d = Diagnostic::error(ErrorKind::CompilerException, codes::PROJECT_INVALID, message);
        if let Some(file) = file {
            d = d.at(Location::new(file, Span::new(0, 0)), "in this file");
        }
        self.diagnostics.push(d);
    }

    fn display_path(&self, path: &Path) -> String {
        match path.strip_prefix(&self.dir) {
            Ok(rel) => rel.to_string_lossy().replace('\\', "/"),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    fn read_config(&mut self) -> ProjectConfig {
        let name_default = self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = self.dir.join("project.yml");
        let mut config = ProjectConfig { name: name_default, ..ProjectConfig::default() };
        let text = match weft_ir::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A bare directory with a main.cf is a project with default settings, as the
                // conformance corpus uses them: modules live in `libs/`.
                config.modulepath = vec![self.dir.join("libs")];
                return config;
            }
            Err(e) => {
                self.project_error(format!("cannot read {}: {e}", path.display()), None);
                return config;
            }
        };
        config.has_project_file = true;
        let file = self.sources.add(SourceFile::new(self.display_path(&path), text.as_str()).with_origin(&path));
        config.project_file = Some(file);
        let value: serde_norway::Value = match serde_norway::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                let offset = e.location().map(|l| l.index() as u32).unwrap_or(0);
                self.diagnostics.push(
                    Diagnostic::error(
                        ErrorKind::CompilerException,
                        codes::PROJECT_INVALID,
                        format!("invalid project.yml: {e}"),
                    )
                    .at(Location::new(file, Span::new(offset, offset)), "not valid YAML"),
                );
                return config;
            }
        };
        let get_str = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_string);
        if let Some(name) = get_str("name") {
            config.name = name;
        }
        config.modulepath = match value.get("modulepath") {
            None | Some(serde_norway::Value::Null) => Vec::new(),
            Some(serde_norway::Value::String(s)) => vec![self.dir.join(s)],
            Some(serde_norway::Value::Sequence(items)) => {
                items.iter().filter_map(|i| i.as_str()).map(|s| self.dir.join(s)).collect()
            }
            Some(_) => {
                self.project_error(
                    "project.yml: `modulepath` must be a string or a list of strings".into(),
                    Some(file),
                );
                Vec::new()
            }
        };
        config.downloadpath = get_str("downloadpath").map(|p| self.dir.join(p));
        if let Some(serde_norway::Value::Sequence(rules)) = value.get("relation_precedence_policy") {
            config.relation_precedence_policy = rules.iter().filter_map(|r| r.as_str().map(str::to_string)).collect();
        }
        if let Some(weft) = value.get("weft") {
            config.parameters = self.read_weft_section(weft, &text, file);
        }
        config
    }

    /// Reads the weft-specific section of `project.yml` (see [`DeclaredParameter`]).
    ///
    /// The YAML library gives values without positions, so entries are located in the text by
    /// [`YamlLocator`]; a diagnostic that cannot be placed precisely points at `weft:`.
    fn read_weft_section(&mut self, weft: &serde_norway::Value, text: &str, file: FileId) -> Vec<DeclaredParameter> {
        use serde_norway::Value as Y;
        let mut locator = YamlLocator::new(text);
        let section_at = Location::new(file, locator.section);
        let error = |message: String, at: Location, label: &str| {
            Diagnostic::error(ErrorKind::CompilerException, codes::PROJECT_INVALID, message).at(at, label.to_string())
        };
        let entries = match weft {
            Y::Null => return Vec::new(),
            Y::Mapping(entries) => entries,
            _ => {
                self.diagnostics.push(error(
                    "project.yml: `weft` must be a mapping (`weft:` followed by indented keys)".into(),
                    section_at,
                    "not a mapping",
                ));
                return Vec::new();
            }
        };
        let mut parameters: Vec<DeclaredParameter> = Vec::new();
        for (key, value) in entries {
            match key.as_str() {
                Some("parameters") => {}
                other => {
                    // Strict, because `weft:` is weft's own namespace: a misspelt key would
                    // otherwise silently declare nothing.
                    let shown = other.map(str::to_string).unwrap_or_else(|| format!("{key:?}"));
                    let at = other.map_or(section_at, |k| Location::new(file, locator.key_in_section(k)));
                    self.diagnostics.push(
                        error(format!("project.yml: unknown key `weft.{shown}`"), at, "unknown key")
                            .with_note("the keys weft reads under `weft:` are: parameters"),
                    );
                    continue;
                }
            }
            locator.enter_parameters();
            let mut add = |this: &mut Self, name: Option<&str>, description: Option<&Y>| {
                let Some(name) = name else {
                    this.diagnostics.push(
                        error(
                            "project.yml: a parameter name under `weft.parameters` must be a string".into(),
                            Location::new(file, locator.parameters),
                            "in this list",
                        )
                        .with_help("write `- name` or `- name: \"description\"`"),
                    );
                    return;
                };
                let description = match description {
                    None | Some(Y::Null) => None,
                    Some(Y::String(d)) => Some(d.clone()),
                    Some(_) => {
                        let at = Location::new(file, locator.entry(name, true));
                        this.diagnostics.push(error(
                            format!("project.yml: the description of parameter `{name}` must be a string"),
                            at,
                            "not a string",
                        ));
                        return;
                    }
                };
                let at = Location::new(file, locator.entry(name, description.is_some()));
                if let Some(first) = parameters.iter().find(|p| p.name == name) {
                    this.diagnostics.push(
                        error(format!("project.yml: parameter `{name}` is declared twice"), at, "declared again here")
                            .with_label(first.location, "first declared here"),
                    );
                    return;
                }
                parameters.push(DeclaredParameter { name: name.to_string(), description, location: at });
            };
            match value {
                Y::Null => {}
                Y::Sequence(items) => {
                    for item in items {
                        match item {
                            Y::String(name) => add(self, Some(name), None),
                            // `- name: "description"`: a mapping with one entry.
                            Y::Mapping(m)
                                if m.len() == 1
                                    && let Some((k, d)) = m.iter().next() =>
                            {
                                add(self, k.as_str(), Some(d));
                            }
                            _ => add(self, None, None),
                        }
                    }
                }
                Y::Mapping(m) => {
                    for (k, d) in m {
                        add(self, k.as_str(), Some(d));
                    }
                }
                _ => self.diagnostics.push(error(
                    "project.yml: `weft.parameters` must be a list of names or a mapping from names to descriptions"
                        .into(),
                    Location::new(file, locator.parameters),
                    "not a list or mapping",
                )),
            }
        }
        parameters
    }

    /// Parses one file into the arena, registering it in the source map.
    fn parse(&mut self, path: &Path, display: String) -> std::io::Result<(FileId, ast::File<'a>)> {
        let (text, invalid_at) = read_source(path)?;
        Ok(self.parse_text(&text, display, invalid_at, Some(path)))
    }

    /// Parses a text read from `origin` (or embedded, without one).
    fn parse_text(
        &mut self,
        text: &str,
        display: String,
        invalid_utf8_at: Option<usize>,
        origin: Option<&Path>,
    ) -> (FileId, ast::File<'a>) {
        let mut source = SourceFile::new(display, text);
        if let Some(path) = origin {
            source = source.with_origin(path);
        }
        let file = self.sources.add(source);
        self.report_invalid_utf8(file, invalid_utf8_at);
        // The tree borrows its text: keep a copy in the arena, which outlives the tree.
        let text: &'a str = self.arena.alloc_str(text);
        let out = parse_file(self.arena, text, file, &mut self.interner);
        self.diagnostics.extend(out.diagnostics);
        (file, out.file)
    }

    fn report_invalid_utf8(&mut self, file: FileId, invalid_utf8_at: Option<usize>) {
        if let Some(offset) = invalid_utf8_at {
            // The invalid bytes were replaced by U+FFFD: point at the whole replacement, so the
            // span ends on a character boundary of the text diagnostics are rendered from.
            let end = offset + char::REPLACEMENT_CHARACTER.len_utf8();
            let at = Location::new(file, Span::new(offset as u32, end as u32));
            self.diagnostics.push(
                Diagnostic::error(ErrorKind::ParserException, codes::INVALID_UTF8, "this file is not valid UTF-8")
                    .at(at, "invalid byte sequence here")
                    .with_note("invalid bytes were replaced by U+FFFD to go on checking"),
            );
        }
    }

    /// Takes a file parsed ahead into the program, exactly as [`Loader::parse_text`] would
    /// have parsed it at this point: the file gets the next id, and the file's names are
    /// interned in the order its parser met them, which numbers new names as parsing them
    /// here would have. The tree is then copied into the project's arena with the project's
    /// symbols.
    fn adopt(&mut self, parsed: ParsedAhead<'_>) -> (FileId, ast::File<'a>) {
        let ParsedAhead { source, invalid_utf8_at, tree, interner, mut diagnostics } = parsed;
        let file = self.sources.add(source);
        self.report_invalid_utf8(file, invalid_utf8_at);
        let symbols: Vec<Symbol> =
            (0..interner.len() as u32).map(|i| self.interner.intern(interner.resolve(Symbol::from_u32(i)))).collect();
        let tree = Relocator::new(self.arena, &symbols).file(&tree);
        for label in diagnostics.iter_mut().flat_map(|d| d.labels.iter_mut()) {
            if label.location.file == AHEAD_FILE {
                label.location.file = file;
            }
        }
        self.diagnostics.extend(diagnostics);
        (file, tree)
    }

    fn load_all(&mut self) -> Vec<Namespace<'a>> {
        let main_path = self.dir.join("main.cf");
        let (main_file, main_ast) = match self.parse(&main_path, "main.cf".to_string()) {
            Ok(parsed) => parsed,
            Err(e) => {
                let what = if !self.dir.is_dir() {
                    format!("{} is not a directory", self.dir.display())
                } else if e.kind() != std::io::ErrorKind::NotFound {
                    format!("cannot read {}: {e}", main_path.display())
                } else {
                    format!("{} contains no main.cf", self.dir.display())
                };
                self.diagnostics.push(
                    Diagnostic::error(
                        ErrorKind::CompilerException,
                        codes::PROJECT_INVALID,
                        format!("not an Inmanta project: {what}"),
                    )
                    .with_help("a project is a directory with a main.cf file and, usually, a project.yml"),
                );
                return Vec::new();
            }
        };
        let stack = self.imports_of(&main_ast, main_file, true);
        let main = Namespace { name: "__config__".to_string(), module: None, file: main_file, ast: main_ast };
        let mut work = WorkList { stack, groups: Vec::new(), done: HashMap::new(), planned: 0 };
        self.walk(&mut work, Ahead::new());
        let mut namespaces = vec![main];
        namespaces.extend(work.groups.into_iter().flat_map(|(_, ns)| ns));
        self.load_plugins(&namespaces);
        namespaces
    }

    /// Runs the reference's import work list: takes imports from the end of the stack, loads
    /// each namespace of an import's path (`a`, `a::b`, `a::b::c`) that is not loaded yet,
    /// and pushes the imports of every file it loads.
    ///
    /// Which files are loaded is only known by parsing, so the walk itself is sequential;
    /// what runs in parallel is parsing. When an import needs a file that has not been
    /// parsed, the files of every pending import (the whole stack; [`Loader::plan_ahead`])
    /// are parsed ahead at once, each on a worker thread into an arena and an interner of its
    /// own, and the walk goes on, taking ([`Loader::adopt`]) each file when its turn comes.
    /// A file that is never taken (after a namespace that does not exist) is dropped with its
    /// diagnostics, as a sequential load never reads it. Files are registered,
    /// names interned and diagnostics reported in the walk's order, so the program is the one
    /// a sequential load builds: numbering and diagnostics do not depend on the threads.
    ///
    /// The trees parsed ahead live in arenas owned by the call that parsed them, and files of
    /// one batch are taken while later batches are parsed, so every batch continues the walk
    /// in a nested call ([`Loader::walk_after_parsing`]): the arenas of earlier batches stay
    /// alive until the walk ends (the trees are copied into the project's arena when taken,
    /// so a load briefly holds both copies). The nesting depth is the number of batches.
    fn walk<'s>(&mut self, work: &mut WorkList<'a>, mut ahead: Ahead<'s>)
    where
        'a: 's,
    {
        while let Some(import) = work.stack.pop() {
            work.planned = work.planned.min(work.stack.len());
            if self.parse_ahead {
                let plan = self.plan_ahead(&import, work, &ahead);
                // Parsing a single file ahead would only add the copy into the project's arena.
                if plan.len() > 1 {
                    work.stack.push(import);
                    return self.walk_after_parsing(work, ahead, plan);
                }
            }
            self.load_import(import, work, &mut ahead);
        }
    }

    /// Parses `plan` in parallel, then continues the walk with those files ahead.
    fn walk_after_parsing<'s>(&mut self, work: &mut WorkList<'a>, ahead: Ahead<'s>, plan: Vec<NamespaceFile>)
    where
        'a: 's,
    {
        self.parsed_ahead += plan.len();
        // One arena per file: an arena serves one thread at a time.
        let mut arenas: Vec<Bump> = plan.iter().map(|_| Bump::new()).collect();
        let parsed: Vec<(String, std::io::Result<ParsedAhead<'_>>)> = arenas
            .par_iter_mut()
            .zip(plan.into_par_iter())
            .map(|(arena, file)| {
                let parsed = parse_ahead(arena, &file);
                (file.display, parsed)
            })
            .collect();
        // The trees of earlier batches outlive this call's arenas, so they fit in one map.
        let mut ahead: Ahead<'_> = ahead;
        ahead.extend(parsed);
        crate::with_stack(|| self.walk(work, ahead));
    }

    /// The files to parse ahead before `import` is loaded: none when every file `import` needs
    /// is loaded or parsed ahead already; otherwise those files, then the files of the pending
    /// imports not planned before, the next to be taken first.
    fn plan_ahead(&mut self, import: &PendingImport, work: &mut WorkList<'a>, ahead: &Ahead<'_>) -> Vec<NamespaceFile> {
        let mut plan = Vec::new();
        let mut planned = HashSet::new();
        self.plan_import(import, work, ahead, &mut plan, &mut planned);
        if !plan.is_empty() {
            for pending in work.stack[work.planned..].iter().rev() {
                self.plan_import(pending, work, ahead, &mut plan, &mut planned);
            }
            work.planned = work.stack.len();
        }
        plan
    }

    /// Adds the files of `import`'s namespaces that are neither loaded nor parsed ahead.
    fn plan_import(
        &mut self,
        import: &PendingImport,
        work: &WorkList<'a>,
        ahead: &Ahead<'_>,
        plan: &mut Vec<NamespaceFile>,
        planned: &mut HashSet<String>,
    ) {
        let parts: Vec<&str> = import.name.split("::").collect();
        let done = work.done.get(parts[0]);
        if done.is_some_and(|d| d.contains(&import.name)) {
            return;
        }
        for depth in 1..=parts.len() {
            let name = parts[..depth].join("::");
            if done.is_some_and(|d| d.contains(&name)) {
                continue;
            }
            if !self.files.contains_key(&name) {
                let Some(module) = self.peek_module(parts[0]) else { return };
                self.namespace_file(&module, &parts[1..depth]);
            }
            // A namespace the embedded std lacks: the walk stops there too.
            let Some(file) = self.files.get(&name).and_then(Option::as_ref) else { return };
            if !ahead.contains_key(&file.display) && planned.insert(file.display.clone()) {
                plan.push(file.clone());
            }
        }
    }

    /// Loads the namespaces of one import that are not loaded yet.
    fn load_import(&mut self, import: PendingImport, work: &mut WorkList<'a>, ahead: &mut Ahead<'_>) {
        let parts: Vec<&str> = import.name.split("::").collect();
        let module_name = parts[0].to_string();
        if work.done.get(&module_name).is_some_and(|d| d.contains(&import.name)) {
            return;
        }
        let Some(module) = self.find_module(&module_name) else {
            self.module_not_found(&import, &module_name);
            return;
        };
        if let Some(at) = import.at {
            self.first_imports.entry(module_name.clone()).or_insert(at);
        }
        for depth in 1..=parts.len() {
            let sub = parts[..depth].join("::");
            if work.done.get(&module_name).is_some_and(|d| d.contains(&sub)) {
                continue;
            }
            let (file, tree) = match self.load_namespace(module, &parts[1..depth], ahead) {
                Ok(loaded) => loaded,
                Err(read_error) => {
                    self.namespace_not_found(&import, &sub, module, read_error);
                    break;
                }
            };
            work.done.entry(module_name.clone()).or_default().insert(sub.clone());
            work.stack.extend(self.imports_of(&tree, file, module_name != "std"));
            let group = match work.groups.iter().position(|(m, _)| *m == module_name) {
                Some(i) => i,
                None => {
                    work.groups.push((module_name.clone(), Vec::new()));
                    work.groups.len() - 1
                }
            };
            work.groups[group].1.push(Namespace { name: sub, module: Some(module), file, ast: tree });
        }
    }

    /// The imports of a file, with the implicit `import std` first as the reference adds it.
    fn imports_of(&self, tree: &ast::File<'a>, file: FileId, implicit_std: bool) -> Vec<PendingImport> {
        let mut imports = Vec::new();
        if implicit_std {
            imports.push(PendingImport { name: "std".to_string(), at: None });
        }
        for item in tree.items {
            if let ast::Item::Import(import) = item {
                let name =
                    import.path.parts.iter().map(|p| self.interner.resolve(p.name)).collect::<Vec<_>>().join("::");
                imports.push(PendingImport { name, at: Some(Location::new(file, import.span)) });
            }
        }
        imports
    }

    fn module_not_found(&mut self, import: &PendingImport, module_name: &str) {
        let mut searched: Vec<String> =
            self.site_packages.iter().map(|p| format!("{} (v2 modules)", p.display())).collect();
        searched.extend(self.config.modulepath.iter().map(|p| format!("{} (v1 modules)", p.display())));
        let mut d = Diagnostic::error(
            ErrorKind::ModuleLoadingException,
            codes::MODULE_NOT_FOUND,
            format!("Failed to load module {}: could not find module {module_name}", import.name),
        );
        if let Some(at) = import.at {
            d = d.at(at, format!("module `{module_name}` is not installed"));
        }
        d = if searched.is_empty() {
            d.with_note("no module path is configured and no Python environment was given")
        } else {
            d.with_note(format!("searched: {}", searched.join(", ")))
        };
        self.diagnostics.push(d.with_help(
            "install the module as a v2 module in the Python environment (`--python-env` or `VIRTUAL_ENV`) or put it in a `modulepath` directory",
        ));
    }

    /// Reports a namespace that could not be loaded; `read_error` is why its file could not be
    /// read, when there is a file.
    fn namespace_not_found(
        &mut self,
        import: &PendingImport,
        sub: &str,
        module: usize,
        read_error: Option<std::io::Error>,
    ) {
        let module_name = self.modules[module].name.clone();
        let mut d = Diagnostic::error(
            ErrorKind::ModuleLoadingException,
            codes::NAMESPACE_NOT_FOUND,
            format!("Failed to load module {}: could not locate module with name: {sub}", import.name),
        );
        if let Some(at) = import.at {
            d = d.at(at, format!("module `{module_name}` has no namespace `{sub}`"));
        }
        // The file exists but could not be read (a named pipe, no permission): say so. The
        // namespace's file is in the cache `load_namespace` filled.
        if let Some(e) = read_error.filter(|e| e.kind() != std::io::ErrorKind::NotFound)
            && let Some(Some(file)) = self.files.get(sub)
        {
            let note = format!("cannot read {}: {e}", file.display);
            self.diagnostics.push(d.with_note(note));
            return;
        }
        let path: Vec<&str> = sub.split("::").skip(1).collect();
        let expected = if path.is_empty() {
            "model/_init.cf".to_string()
        } else {
            let rel = path.join("/");
            format!("model/{rel}.cf or model/{rel}/_init.cf")
        };
        self.diagnostics.push(d.with_note(format!("expected {expected} in module `{module_name}`")));
    }

    /// Finds a module by name, registering it on first use. `None` when it cannot be found (the
    /// failure is remembered, so each import reports it without searching again).
    fn find_module(&mut self, name: &str) -> Option<usize> {
        if let Some(found) = self.module_index.get(name) {
            return *found;
        }
        let module = match self.located.remove(name) {
            Some(located) => located,
            None => self.locate_module(name),
        };
        let index = module.map(|m| {
            self.modules.push(m);
            self.modules.len() - 1
        });
        self.module_index.insert(name.to_string(), index);
        index
    }

    /// Finds a module by name without registering it, for parsing its files ahead.
    fn peek_module(&mut self, name: &str) -> Option<Module> {
        if let Some(found) = self.module_index.get(name) {
            return found.map(|index| self.modules[index].clone());
        }
        if let Some(located) = self.located.get(name) {
            return located.clone();
        }
        let module = self.locate_module(name);
        self.located.insert(name.to_string(), module.clone());
        module
    }

    /// The plugin packages (`<dir>/<name>/plugins/` with an `__init__.py`) of the v1 modules
    /// on the module path that the model did not load, in name order. The reference's plugin
    /// finder imports `inmanta_plugins.<name>` from the first module path directory that has
    /// such a package, whether the model imports the module or not, after Python's own
    /// finders: a v2 module of the same name in the environment comes first, and then it is
    /// not listed here.
    fn unloaded_path_packages(&self) -> Vec<(String, PathBuf)> {
        let loaded: HashSet<&str> = self.modules.iter().map(|m| m.name.as_str()).collect();
        let v2_installed = |name: &str| self.v2_package_dirs(name).any(|(_, package)| package.is_dir());
        let mut found: std::collections::BTreeMap<String, PathBuf> = std::collections::BTreeMap::new();
        for dir in &self.config.modulepath {
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for entry in entries.filter_map(Result::ok) {
                // A name that is not UTF-8, or not a Python identifier, cannot be imported.
                let Ok(name) = entry.file_name().into_string() else { continue };
                if name == "std" || loaded.contains(name.as_str()) || found.contains_key(&name) {
                    continue;
                }
                if !name.bytes().next().is_some_and(crate::lexer::is_ident_start)
                    || !name.bytes().all(crate::lexer::is_ident_continue)
                {
                    continue;
                }
                let package = entry.path().join("plugins");
                if package.join("__init__.py").is_file() && !v2_installed(&name) {
                    found.insert(name, package);
                }
            }
        }
        found.into_iter().collect()
    }

    /// Where a v2 module `name` of the Python environment would be, in the order Python looks:
    /// each `site-packages` directory and its editable installs, with the `site-packages`
    /// directory each one belongs to.
    fn v2_package_dirs<'s>(&'s self, name: &'s str) -> impl Iterator<Item = (&'s Path, PathBuf)> + 's {
        self.site_packages.iter().flat_map(move |site| {
            std::iter::once(site.clone())
                .chain(editable_roots(site))
                .map(move |base| (site.as_path(), base.join("inmanta_plugins").join(name)))
        })
    }

    fn locate_module(&self, name: &str) -> Option<Module> {
        if name == "std" {
            return Some(Module {
                name: "std".into(),
                version: Some("8.7.5".into()),
                origin: ModuleOrigin::Embedded,
                has_plugin_package: true,
            });
        }
        for (site, package_dir) in self.v2_package_dirs(name) {
            if package_dir.join("model").join("_init.cf").is_file() {
                let version = v2_version(site, name);
                let has_plugin_package = package_dir.join("__init__.py").is_file();
                return Some(Module {
                    name: name.into(),
                    version,
                    origin: ModuleOrigin::V2 { package_dir },
                    has_plugin_package,
                });
            }
        }
        for dir in self.config.modulepath.clone() {
            let module_dir = dir.join(name);
            let yml = module_dir.join("module.yml");
            if yml.is_file() {
                let version = weft_ir::fs::read_to_string(&yml)
                    .ok()
                    .and_then(|t| serde_norway::from_str::<serde_norway::Value>(&t).ok())
                    .and_then(|v| match v.get("version") {
                        Some(serde_norway::Value::String(s)) => Some(s.clone()),
                        Some(serde_norway::Value::Number(n)) => Some(n.to_string()),
                        _ => None,
                    });
                let has_plugin_package = module_dir.join("plugins").join("__init__.py").is_file();
                return Some(Module {
                    name: name.into(),
                    version,
                    origin: ModuleOrigin::V1 { dir: module_dir },
                    has_plugin_package,
                });
            }
        }
        None
    }

    /// Loads the file of namespace `module::path...` (`path` is empty for the module itself),
    /// taking it from the files parsed ahead when it is there. Fails with the read error, or
    /// with none when the module has no such file at all.
    fn load_namespace(
        &mut self,
        module: usize,
        path: &[&str],
        ahead: &mut Ahead<'_>,
    ) -> Result<(FileId, ast::File<'a>), Option<std::io::Error>> {
        let file = self.namespace_file(&self.modules[module].clone(), path).ok_or(None)?;
        if let Some(parsed) = ahead.remove(&file.display) {
            return parsed.map(|parsed| self.adopt(parsed)).map_err(Some);
        }
        match file.source {
            FileSource::Embedded(text) => Ok(self.parse_text(text, file.display, None, None)),
            FileSource::Disk(full) => self.parse(&full, file.display).map_err(Some),
        }
    }

    /// The file of namespace `module::path...`; `None` when the module is the embedded std and
    /// has no such file. (A file on disk may still turn out not to exist when it is read.)
    fn namespace_file(&mut self, module: &Module, path: &[&str]) -> Option<NamespaceFile> {
        let name = std::iter::once(module.name.as_str()).chain(path.iter().copied()).collect::<Vec<_>>().join("::");
        if let Some(found) = self.files.get(&name) {
            return found.clone();
        }
        let rel = namespace_file(path, |rel| module_has_dir(module, rel));
        let file = match &module.origin {
            ModuleOrigin::Embedded => EMBEDDED_STD
                .iter()
                .find(|(p, _)| *p == rel)
                .map(|(_, text)| NamespaceFile { display: embedded_display(&rel), source: FileSource::Embedded(text) }),
            ModuleOrigin::V1 { dir } | ModuleOrigin::V2 { package_dir: dir } => {
                let full = dir.join(&rel);
                Some(NamespaceFile { display: self.display_path(&full), source: FileSource::Disk(full) })
            }
        };
        self.files.insert(name, file.clone());
        file
    }

    /// Reads the plugin signatures and dataclasses of every loaded module and keeps those of
    /// loaded namespaces: the reference registers a plugin only in a namespace it loaded.
    ///
    /// A v1 module whose `plugins/` directory is not a package (no `__init__.py`) fails as
    /// the reference's plugin loading fails, after everything has been parsed; the reference
    /// names no place, weft the import that loaded the module.
    fn load_plugins(&mut self, namespaces: &[Namespace<'a>]) {
        let loaded: std::collections::HashSet<&str> = namespaces.iter().map(|n| n.name.as_str()).collect();
        for index in 0..self.modules.len() {
            let module = self.modules[index].clone();
            if let ModuleOrigin::V1 { dir } = &module.origin {
                let plugins = dir.join("plugins");
                if plugins.is_dir() && !plugins.join("__init__.py").is_file() {
                    // Named as the reference names it: below the project directory, `./`
                    // and the path from there.
                    let display = match plugins.strip_prefix(&self.dir) {
                        Ok(_) => format!("./{}", self.display_path(&plugins)),
                        Err(_) => plugins.display().to_string(),
                    };
                    let mut d = Diagnostic::error(
                        ErrorKind::InvalidModuleException,
                        codes::MODULE_INVALID,
                        format!("Directory {display} should be a valid python package with a __init__.py file"),
                    );
                    // The reference names no place; the import that loaded the module is
                    // where the user can act.
                    if let Some(&at) = self.first_imports.get(&module.name) {
                        d = d.at(at, format!("`{}` has a plugins directory without __init__.py", module.name));
                    }
                    self.diagnostics
                        .push(d.with_help(format!("add an empty {display}/__init__.py, or remove the directory")));
                    continue;
                }
            }
            for (rel, text) in self.plugin_sources(&module) {
                let Some(namespace) = python::namespace_for(&module.name, &rel) else { continue };
                if !self.python_modules.contains(&namespace) {
                    self.python_modules.push(namespace.clone());
                }
                if !loaded.contains(namespace.as_str()) {
                    continue;
                }
                let (label, full) = match &module.origin {
                    ModuleOrigin::Embedded => (embedded_display(&format!("plugins/{rel}")), None),
                    ModuleOrigin::V1 { dir } => (rel.clone(), Some(dir.join("plugins").join(&rel))),
                    ModuleOrigin::V2 { package_dir } => (rel.clone(), Some(package_dir.join(&rel))),
                };
                let extract = python::extract(&text, &namespace, &label);
                if let Some(full) = full
                    && !extract.plugins.is_empty()
                {
                    let display = self.display_path(&full);
                    self.plugin_files.insert((namespace.clone(), label.clone()), PluginFile { display, text });
                }
                for problem in extract.problems {
                    self.diagnostics.push(
                        Diagnostic::warning(
                            ErrorKind::CompilerRuntimeWarning,
                            codes::PLUGIN_SOURCE,
                            format!(
                                "could not read a plugin declaration in {label} line {}: {}",
                                problem.line, problem.message
                            ),
                        )
                        .with_note("weft reads plugin signatures from Python sources without running them"),
                    );
                }
                self.plugins.extend(extract.plugins);
                self.dataclasses.extend(extract.dataclasses);
            }
        }
    }

    /// The Python files of a module's plugin package, as (path relative to the package root,
    /// text) pairs, sorted by path.
    fn plugin_sources(&self, module: &Module) -> Vec<(String, String)> {
        let (root, skip): (PathBuf, &[&str]) = match &module.origin {
            ModuleOrigin::Embedded => {
                return EMBEDDED_STD
                    .iter()
                    .filter_map(|(p, t)| p.strip_prefix("plugins/").map(|rel| (rel.to_string(), t.to_string())))
                    .collect();
            }
            ModuleOrigin::V1 { dir } => (dir.join("plugins"), &[]),
            ModuleOrigin::V2 { package_dir } => (package_dir.clone(), &["model", "templates", "files"]),
        };
        let mut out = Vec::new();
        collect_python_files(&root, &root, skip, &mut out);
        out.sort();
        out
    }
}

/// Finds where things of the `weft:` section are written in the text of `project.yml`.
///
/// The YAML library reports values without positions, and diagnostics about declared parameters
/// should point at the entry they are about. The section is small and written by hand, so a
/// textual search is enough: `weft:` is a key at the start of a line and its section runs to
/// the next line that starts with another key; inside it, names are found as whole words
/// outside comments, in declaration order (each search starts after the previous entry). When a
/// search fails, the position falls back to the enclosing key, which is still the right line
/// to look at.
struct YamlLocator<'t> {
    text: &'t str,
    /// The `weft` key, or the start of the file.
    section: Span,
    /// Where the section ends: the start of the next top-level key, or the end of the text.
    section_end: usize,
    /// The `parameters` key, or `section`.
    parameters: Span,
    /// Where the search for the next entry starts.
    cursor: usize,
}

impl<'t> YamlLocator<'t> {
    fn new(text: &'t str) -> Self {
        let mut section: Option<Span> = None;
        let mut section_end = text.len();
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            let start = offset;
            offset += line.len();
            match section {
                None => {
                    if let Some(rest) = line.strip_prefix("weft")
                        && rest.trim_start_matches([' ', '\t']).starts_with(':')
                    {
                        section = Some(Span::new(start as u32, start as u32 + 4));
                    }
                }
                Some(_) => {
                    if line.starts_with(|c: char| !c.is_whitespace() && c != '#' && c != '-') {
                        section_end = start;
                        break;
                    }
                }
            }
        }
        let section = section.unwrap_or_default();
        YamlLocator { text, section, section_end, parameters: section, cursor: section.end as usize }
    }

    /// The first whole-word occurrence of `word` in `from..section_end`, outside comments.
    fn find_word(&self, word: &str, from: usize) -> Option<Span> {
        let is_name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
        let region = self.text.get(from..self.section_end)?;
        let mut search = 0;
        while let Some(found) = region[search..].find(word) {
            let start = from + search + found;
            let end = start + word.len();
            search += found + word.len();
            let before = self.text[..start].chars().next_back();
            let after = self.text[end..].chars().next();
            if before.is_some_and(is_name_char) || after.is_some_and(is_name_char) {
                continue;
            }
            let line_start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
            if self.text[line_start..start].contains('#') {
                continue;
            }
            return Some(Span::new(start as u32, end as u32));
        }
        None
    }

    /// The key `key` directly in the section (followed by a colon).
    fn key_in_section(&self, key: &str) -> Span {
        let mut from = self.section.end as usize;
        while let Some(span) = self.find_word(key, from) {
            if self.text[span.end as usize..].trim_start_matches([' ', '\t']).starts_with(':') {
                return span;
            }
            from = span.end as usize;
        }
        self.section
    }

    /// Moves to the `parameters` key: entries are searched after it.
    fn enter_parameters(&mut self) {
        self.parameters = self.key_in_section("parameters");
        self.cursor = self.parameters.end as usize;
    }

    /// The next entry named `name`. An entry with a description is followed by text that may
    /// mention other names, so the next search starts on the following line.
    fn entry(&mut self, name: &str, has_description: bool) -> Span {
        match self.find_word(name, self.cursor) {
            Some(span) => {
                self.cursor = if has_description {
                    self.text[span.end as usize..].find('\n').map_or(self.section_end, |i| span.end as usize + i)
                } else {
                    span.end as usize
                };
                span
            }
            None => self.parameters,
        }
    }
}

/// The file of a namespace inside a module: `model/_init.cf` for the module itself, then for
/// `a::b`, `model/b/_init.cf` if the directory `model/b` exists, else `model/b.cf`.
fn namespace_file(path: &[&str], is_dir: impl Fn(&str) -> bool) -> String {
    if path.is_empty() {
        return "model/_init.cf".to_string();
    }
    let joined = format!("model/{}", path.join("/"));
    if is_dir(&joined) { format!("{joined}/_init.cf") } else { format!("{joined}.cf") }
}

/// Whether `rel` is a directory of `module`.
fn module_has_dir(module: &Module, rel: &str) -> bool {
    match &module.origin {
        ModuleOrigin::Embedded => EMBEDDED_STD.iter().any(|(p, _)| p.starts_with(&format!("{rel}/"))),
        ModuleOrigin::V1 { dir } | ModuleOrigin::V2 { package_dir: dir } => dir.join(rel).is_dir(),
    }
}

fn collect_python_files(root: &Path, dir: &Path, skip: &[&str], out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else { continue };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if path.is_dir() {
            let top = rel.split('/').next().unwrap_or("");
            if skip.contains(&top) || rel.ends_with("__pycache__") {
                continue;
            }
            collect_python_files(root, &path, skip, out);
        } else if rel.ends_with(".py")
            && let Ok(text) = weft_ir::fs::read_to_string(&path)
        {
            out.push((rel, text));
        }
    }
}

/// Directories added to `sys.path` by `.pth` files: where editable installs of v2 modules
/// live.
fn editable_roots(site: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site) else { return Vec::new() };
    let mut roots = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "pth")
            && let Ok(text) = weft_ir::fs::read_to_string(&path)
        {
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') || line.starts_with("import ") {
                    continue;
                }
                // Lines are relative to the site directory, or absolute; resolve `..` so paths in
                // messages are readable.
                if let Ok(dir) = std::fs::canonicalize(site.join(line))
                    && dir.is_dir()
                {
                    roots.push(dir);
                }
            }
        }
    }
    roots.sort();
    roots
}

/// The version of an installed v2 module, from its `.dist-info` directory name.
fn v2_version(site: &Path, name: &str) -> Option<String> {
    let prefix = format!("inmanta_module_{}-", name.replace('-', "_"));
    let entries = std::fs::read_dir(site).ok()?;
    entries.filter_map(Result::ok).find_map(|e| {
        let file_name = e.file_name().to_string_lossy().into_owned();
        file_name.strip_prefix(&prefix)?.strip_suffix(".dist-info").map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts released for an evaluation are read back from their files, as loading read
    /// them (invalid UTF-8 replaced alike); a file that changed in between keeps none, and the
    /// map says so.
    #[test]
    fn released_sources_come_back_from_unchanged_files() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let main = dir.path().join("main.cf");
        let other = dir.path().join("other.cf");
        std::fs::write(&main, b"a = \"caf\xe9\"\n").expect("written");
        std::fs::write(&other, "b = 2\n").expect("written");
        let mut map = SourceMap::new();
        for path in [&main, &other] {
            let (text, _) = read_source(path).expect("readable");
            map.add(SourceFile::new(path.display().to_string(), text).with_origin(path));
        }
        map.add(SourceFile::new("<weft>/std/_init.cf", "x = 1\n"));
        let texts: Vec<String> = map.files().map(|(_, f)| f.text.to_string()).collect();
        map.files_mut().for_each(SourceFile::release_text);
        let released = |map: &SourceMap| map.files().map(|(_, f)| f.is_released()).collect::<Vec<_>>();
        assert_eq!(released(&map), [true, true, false]);
        assert!(restore_sources(&mut map));
        assert_eq!(released(&map), [false, false, false]);
        assert!(map.files().map(|(_, f)| f.text.to_string()).eq(texts));
        map.files_mut().for_each(SourceFile::release_text);
        std::fs::write(&other, "b = 3\n").expect("written");
        assert!(!restore_sources(&mut map));
        assert_eq!(released(&map), [false, true, false]);
    }

    #[test]
    fn namespaces_map_to_files_like_the_reference() {
        let no_dirs = |_: &str| false;
        assert_eq!(namespace_file(&[], no_dirs), "model/_init.cf");
        assert_eq!(namespace_file(&["x"], no_dirs), "model/x.cf");
        assert_eq!(namespace_file(&["d", "y"], no_dirs), "model/d/y.cf");
        assert_eq!(namespace_file(&["d"], |p: &str| p == "model/d"), "model/d/_init.cf");
    }

    /// Everything a load produces that later stages or users can see: the names in symbol
    /// order, the files in id order, every namespace's tree, the modules and the diagnostics.
    fn fingerprint(program: &Program<'_>, diagnostics: &[Diagnostic]) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for i in 0..program.interner.len() as u32 {
            writeln!(out, "symbol {i} {}", program.interner.resolve(Symbol::from_u32(i))).unwrap();
        }
        for (id, file) in program.sources.files() {
            writeln!(out, "file {id:?} {}", file.name).unwrap();
        }
        for ns in &program.namespaces {
            let file = program.sources.get(ns.file);
            writeln!(out, "namespace {} module {:?} file {:?}", ns.name, ns.module, ns.file).unwrap();
            out.push_str(&crate::dump::dump_file(&ns.ast, &file.text, &program.interner));
        }
        for module in &program.modules {
            writeln!(out, "module {} {:?}", module.name, module.origin).unwrap();
        }
        for d in diagnostics {
            writeln!(out, "{d:?}").unwrap();
        }
        out
    }

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// A project whose modules import each other several levels deep, with the problems a
    /// load reports (a missing module, a missing namespace, a syntax error, invalid UTF-8)
    /// spread over files that are parsed ahead.
    fn sample_project(root: &Path) {
        write(root, "project.yml", b"name: sample\nmodulepath: libs\n");
        write(
            root,
            "main.cf",
            b"import alpha\nimport beta::deep::inner\nimport gamma\nimport missing_mod\nimport std::testing\n\
              main_only = alpha::value\n",
        );
        for module in ["alpha", "beta", "gamma", "delta"] {
            write(root, &format!("libs/{module}/module.yml"), format!("name: {module}\nversion: 1.0.0\n").as_bytes());
        }
        write(
            root,
            "libs/alpha/model/_init.cf",
            b"import beta\nimport alpha::sub\nimport delta\nvalue = 1\nentity Alpha:\n    string alpha_name\nend\n",
        );
        write(root, "libs/alpha/model/sub.cf", b"import gamma::nope\nsub_text = \"sub {{ value }}\"\n");
        write(root, "libs/beta/model/_init.cf", b"entity Beta:\n    string = \nend\nbeta_value = 2\n");
        write(root, "libs/beta/model/deep/_init.cf", b"import delta::leaf\ndeep_value = [1, 2]\n");
        write(root, "libs/beta/model/deep/inner.cf", b"inner_value = {\"k\": deep_value}\n");
        write(root, "libs/gamma/model/_init.cf", b"gamma_value = \"caf\xe9\"\nentity Gamma:\nend\n");
        write(root, "libs/delta/model/_init.cf", b"delta_value = std::len([1])\n");
        write(root, "libs/delta/model/leaf.cf", b"import alpha\nleaf_value = alpha::value\n");
    }

    #[test]
    fn parsing_ahead_in_parallel_loads_the_same_program() {
        let dir = tempfile::tempdir().unwrap();
        sample_project(dir.path());
        let options = LoadOptions::default();

        let arena = Bump::new();
        let (program, diagnostics, ahead) = load(&arena, dir.path(), &options, false);
        assert_eq!(ahead, 0);
        let sequential = fingerprint(&program, &diagnostics);
        for code in [codes::MODULE_NOT_FOUND, codes::NAMESPACE_NOT_FOUND, codes::INVALID_UTF8] {
            assert!(diagnostics.iter().any(|d| d.code == code), "the sample reports {code:?}");
        }
        assert!(diagnostics.iter().any(|d| d.kind == ErrorKind::ParserException && d.code != codes::INVALID_UTF8));

        for threads in [1, 2, 4] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let (parallel, ahead) = pool.install(|| {
                let arena = Bump::new();
                let (program, diagnostics, ahead) = load(&arena, dir.path(), &options, true);
                (fingerprint(&program, &diagnostics), ahead)
            });
            assert!(ahead >= 5, "{ahead} files parsed ahead");
            assert_eq!(parallel, sequential, "with {threads} threads");
        }
    }
}
