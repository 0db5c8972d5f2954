//! Artifacts: a compiled project in one file (`model.weft`), built once and run on hosts that
//! have neither the sources nor Python.
//!
//! The container (header, section table, checksum) is [`weft_ir::artifact`]; this module
//! decides what goes in the sections and puts a loaded artifact back together:
//!
//! * `metadata` (through [`codec`], the one place that knows the encoding): the program's
//!   tables (entities, attributes, statements, constructors, plugin signatures, names, the
//!   line tables of the source files), the constants and texts the code refers to, the
//!   inputs the model reads from its host, and provenance (project name, source digest);
//! * `code`: the bytecode ([`weft_vm::bytecode`]), used in place from the mapped file;
//! * `files`: the module files evaluation and export read (templates, `files/`, the resource
//!   type registrations found in the modules' Python sources).
//!
//! Nothing in an artifact depends on the machine that built it: paths are relative to the
//! project or to a module, and there is no timestamp, so the same sources build the same
//! bytes anywhere.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_ir::artifact::{Artifact, ArtifactBuilder, ArtifactError, MAGIC, SectionKind, codec};
use weft_ir::program::Program;
use weft_vm::bytecode::{AlignedBytes, Backing, CodeTables};
use weft_vm::{CodeError, Executable};

/// The version of weft that writes and reads artifacts. The metadata is laid out by this
/// version's types, so an artifact runs only on the weft that built it.
pub const WEFT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where an artifact came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The project's name (from `project.yml`).
    pub project: String,
    /// The digest of the sources the artifact was built from (see the frontend's
    /// `source_digest`), so a host can tell which commit it runs.
    pub source_digest: String,
}

#[derive(Serialize, Deserialize)]
struct Metadata {
    provenance: Provenance,
    program: Program,
    tables: CodeTables,
    inputs: weft_ir::inputs::Inputs,
}

/// Everything a build puts in an artifact.
pub struct BuildInput<'a> {
    pub executable: &'a Executable,
    pub provenance: Provenance,
    pub inputs: weft_ir::inputs::Inputs,
    /// The embedded module files (`Modules::embed`).
    pub files: &'a crate::modules::EmbeddedModules,
}

/// Encodes an artifact.
pub fn build(input: &BuildInput<'_>) -> Vec<u8> {
    let program = &input.executable.program;
    // The instruction table travels as bytecode; the rest of the program as metadata.
    let mut tables_only = Program { exprs: Vec::new(), ..Program::clone(program) };
    for file in &mut tables_only.files {
        file.display = portable_display(&file.display);
    }
    let metadata = Metadata {
        provenance: input.provenance.clone(),
        program: tables_only,
        tables: input.executable.code.tables().clone(),
        inputs: input.inputs.clone(),
    };
    let code = input.executable.code.as_bytes().to_vec();
    ArtifactBuilder::new(WEFT_VERSION)
        .section(SectionKind::Metadata, codec::encode(&metadata))
        .section(SectionKind::Code, code)
        .section(SectionKind::Files, codec::encode(input.files))
        .finish()
}

/// The name an artifact gives a source file in messages. Files of the project and of `libs/`
/// modules are already named relative to the project; a v2 module's file is named by its path
/// in the Python environment the build used, which means nothing on another machine, so the
/// artifact names it from its package directory on: `<python-env>/inmanta_plugins/m/model/x.cf`.
fn portable_display(display: &str) -> String {
    const PACKAGES: &str = "/site-packages/";
    match display.find(PACKAGES) {
        Some(at) => format!("<python-env>/{}", &display[at + PACKAGES.len()..]),
        None => display.to_string(),
    }
}

/// A loaded artifact.
pub struct Loaded {
    pub executable: Executable,
    pub files: crate::modules::EmbeddedModules,
    pub provenance: Provenance,
    pub inputs: weft_ir::inputs::Inputs,
    pub summary: Summary,
}

/// What `weft inspect` shows of the container.
#[derive(Clone, Debug)]
pub struct Summary {
    pub format_version: u32,
    pub weft_version: String,
    pub target: String,
    pub size: u64,
    pub checksum: u64,
    /// Each section's name, offset and size.
    pub sections: Vec<(String, u64, u64)>,
}

/// Why an artifact could not be loaded: one line, naming the check that failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: {error}")]
    Container { path: String, error: ArtifactError },
    #[error("{path}: built by weft {built}, this is weft {WEFT_VERSION}: rebuild it with `weft build`")]
    Version { path: String, built: String },
    #[error("{path}: the artifact has no {section} section")]
    MissingSection { path: String, section: &'static str },
    #[error(
        "{path}: {section} section: {error} (damaged, or written by another build of weft {WEFT_VERSION}: rebuild it)"
    )]
    Decode { path: String, section: &'static str, error: String },
    #[error("{path}: {error}")]
    Code { path: String, error: CodeError },
}

/// A memory-mapped file.
struct Mapped(memmap2::Mmap);

// SAFETY: the map is made once in `load` and never remapped, resized or written while it
// lives, so `bytes` is the same slice every time. (Its contents are the file's; see the
// safety comment in `load` on files changed by other processes.)
unsafe impl Backing for Mapped {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Maps and loads an artifact file.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    let shown = path.display().to_string();
    let io = |error| LoadError::Io { path: shown.clone(), error };
    let file = std::fs::File::open(path).map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        // A pipe (`weft run <(ssh host cat model.weft)`) cannot be mapped: read what it gives,
        // as much as a file may hold and no more.
        if metadata.is_dir() {
            return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "a directory, not an artifact")));
        }
        // The magic comes first, so that a stream of something else (`/dev/zero`) is refused
        // after eight bytes rather than after four gigabytes.
        let mut stream = &file;
        let mut bytes =
            weft_ir::fs::read_bounded((&mut stream).take(MAGIC.len() as u64), MAGIC.len() as u64).map_err(io)?;
        if bytes.len() == MAGIC.len() && bytes[..] == MAGIC[..] {
            bytes.extend(weft_ir::fs::read_bounded(stream, weft_ir::fs::MAX_FILE_LEN).map_err(io)?);
        }
        return load_bytes(&bytes, &shown);
    }
    let backing: Arc<dyn Backing> = if metadata.len() == 0 {
        Arc::new(AlignedBytes::copy_from(&[]))
    } else {
        // SAFETY: the mapping is read-only and private to this process. weft itself never
        // modifies an artifact in place (`weft build` writes a new file and renames it over
        // the old one, which leaves existing mappings intact). Another process truncating
        // or rewriting the file while it is mapped could change the bytes under us; that is
        // the documented contract of deploying artifacts (replace them, never edit them).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let mapped = Arc::new(Mapped(map));
        let loaded = load_from(mapped.clone(), &shown)?;
        mapped.release_decoded(&loaded);
        return Ok(loaded);
    };
    load_from(backing, &shown)
}

impl Mapped {
    /// Gives back the pages of the sections before the code, which loading decoded into the
    /// program and read no more: their bytes stay in the page cache, but not in this process's
    /// resident memory for the whole evaluation (0.8 MB of the 93k-instance benchmark's
    /// artifact). The code section is read in place and stays.
    fn release_decoded(&self, loaded: &Loaded) {
        // A multiple of every page size in use (4, 16 and 64 KiB), so that no page of the code
        // is included.
        const PAGE_MULTIPLE: u64 = 64 << 10;
        let Some(&(_, code_offset, _)) =
            loaded.summary.sections.iter().find(|(name, _, _)| name == SectionKind::Code.name())
        else {
            return;
        };
        let end = (code_offset & !(PAGE_MULTIPLE - 1)) as usize;
        if end == 0 {
            return;
        }
        #[cfg(unix)]
        {
            // SAFETY: the map is private and read-only, so the pages dropped hold no changes:
            // a later read of them (none is made) would fault the file's bytes back in, the
            // same bytes as before. Nothing holds a reference into them past the decoding,
            // which copied what it kept. Failing to advise only keeps the pages.
            let _ = unsafe { self.0.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, end) };
        }
    }
}

/// Loads an artifact from bytes in memory (`shown` names it in errors).
pub fn load_bytes(bytes: &[u8], shown: &str) -> Result<Loaded, LoadError> {
    load_from(Arc::new(AlignedBytes::copy_from(bytes)), shown)
}

fn load_from(backing: Arc<dyn Backing>, shown: &str) -> Result<Loaded, LoadError> {
    let path = shown.to_string();
    let bytes = backing.bytes();
    let artifact = Artifact::parse(bytes).map_err(|error| LoadError::Container { path: path.clone(), error })?;
    let header = artifact.header();
    if header.weft_version != WEFT_VERSION {
        return Err(LoadError::Version { path, built: header.weft_version.clone() });
    }
    let section = |kind: SectionKind, name: &'static str| {
        artifact.section(kind).ok_or(LoadError::MissingSection { path: path.clone(), section: name })
    };
    let decode_error = |section: &'static str, error: String| LoadError::Decode { path: path.clone(), section, error };
    let metadata: Metadata = codec::decode(section(SectionKind::Metadata, "metadata")?)
        .map_err(|e| decode_error("metadata", e.to_string()))?;
    let files: crate::modules::EmbeddedModules =
        codec::decode(section(SectionKind::Files, "files")?).map_err(|e| decode_error("files", e.to_string()))?;
    let code_range = artifact
        .section_range(SectionKind::Code)
        .ok_or(LoadError::MissingSection { path: path.clone(), section: "code" })?;
    let summary = Summary {
        format_version: header.format_version,
        weft_version: header.weft_version.clone(),
        target: header.target.clone(),
        size: bytes.len() as u64,
        checksum: header.checksum,
        sections: artifact.sections().iter().map(|s| (s.kind.name().to_string(), s.offset, s.len)).collect(),
    };
    let executable = Executable::load(metadata.program, backing.clone(), code_range, metadata.tables)
        .map_err(|error| LoadError::Code { path: path.clone(), error })?;
    Ok(Loaded { executable, files, provenance: metadata.provenance, inputs: metadata.inputs, summary })
}

/// What `weft inspect` shows: the container, the provenance, and the inputs the model reads.
#[derive(Clone, Debug, Serialize)]
pub struct Description {
    pub format_version: u32,
    pub weft_version: String,
    pub target: String,
    pub size: u64,
    pub checksum: String,
    pub sections: Vec<SectionDescription>,
    pub project: String,
    pub source_digest: String,
    pub instructions: usize,
    pub entities: usize,
    pub inputs: weft_ir::inputs::Inputs,
    /// The embedded modules and how many files each carries.
    pub modules: Vec<(String, usize)>,
    /// The embedded plugin packages of modules the model does not load, and how many Python
    /// files each carries.
    pub plugin_packages: Vec<(String, usize)>,
    /// Plugins the code calls that have no native implementation: they need the module's
    /// Python code on the host.
    pub python_plugins: Vec<String>,
    /// Resource types of the model that the modules' Python classes export (no native
    /// mapping): exporting or applying the artifact needs Python on the host for them.
    pub python_resource_types: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SectionDescription {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

/// Describes a loaded artifact.
pub fn describe(loaded: &Loaded) -> Description {
    let program = &loaded.executable.program;
    let code = &loaded.executable.code;
    let mut python_plugins: Vec<String> = (0..code.len())
        .filter_map(|i| match code.expr(weft_ir::program::ExprId(i as u32)).kind {
            weft_vm::bytecode::Op::Call { callee: weft_ir::program::Callee::Plugin(plugin), .. } => {
                let signature = &program.plugins[plugin.index()];
                let name = signature.qualified_name();
                (signature.namespace != "std" && !crate::plugins::has_native(&name)).then_some(name)
            }
            _ => None,
        })
        .collect();
    python_plugins.sort();
    python_plugins.dedup();
    let mut python_resource_types: Vec<String> = loaded
        .files
        .modules
        .values()
        .flat_map(|module| &module.registrations)
        .filter(|r| program.entity_by_name(&r.name).is_some() && crate::export::native(&r.name).is_none())
        .map(|r| r.name.clone())
        .collect();
    python_resource_types.sort();
    python_resource_types.dedup();
    let summary = &loaded.summary;
    Description {
        format_version: summary.format_version,
        weft_version: summary.weft_version.clone(),
        target: summary.target.clone(),
        size: summary.size,
        checksum: format!("{:016x}", summary.checksum),
        sections: summary
            .sections
            .iter()
            .map(|(name, offset, size)| SectionDescription { name: name.clone(), offset: *offset, size: *size })
            .collect(),
        project: loaded.provenance.project.clone(),
        source_digest: loaded.provenance.source_digest.clone(),
        instructions: code.len(),
        entities: program.entities.len(),
        inputs: loaded.inputs.clone(),
        modules: loaded.files.summary(),
        plugin_packages: loaded.files.path_package_summary(),
        python_plugins,
        python_resource_types,
    }
}

impl Description {
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "artifact format {}, built by weft {} for {}",
            self.format_version, self.weft_version, self.target
        );
        let _ = writeln!(out, "size: {} bytes, checksum {}", self.size, self.checksum);
        let _ = writeln!(out, "project: {}", if self.project.is_empty() { "(unnamed)" } else { &self.project });
        let _ = writeln!(out, "source digest: sha256:{}", self.source_digest);
        let _ = writeln!(out, "code: {} instructions, {} entity types", self.instructions, self.entities);
        let _ = writeln!(out, "sections:");
        for s in &self.sections {
            let _ = writeln!(out, "  {:<10} at {:>10}  {:>10} bytes", s.name, s.offset, s.size);
        }
        let _ = writeln!(out, "modules:");
        for (name, files) in &self.modules {
            let _ = writeln!(out, "  {name} ({files} files)");
        }
        if !self.plugin_packages.is_empty() {
            let _ = writeln!(out, "plugin packages of modules the model does not load:");
            for (name, files) in &self.plugin_packages {
                let _ = writeln!(out, "  {name} ({files} Python files)");
            }
        }
        let _ = writeln!(out, "inputs:");
        for line in self.inputs.render_text().lines() {
            let _ = writeln!(out, "  {line}");
        }
        if !self.python_plugins.is_empty() {
            let _ = writeln!(out, "needs Python on the host for: {}", self.python_plugins.join(", "));
        }
        if !self.python_resource_types.is_empty() {
            let _ = writeln!(out, "needs Python on the host to export: {}", self.python_resource_types.join(", "));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    /// A v2 module's file is named from its package directory on, so the artifact holds no
    /// path of the build machine; other names are kept.
    #[test]
    fn source_names_in_artifacts_are_portable() {
        for (display, portable) in [
            ("./main.cf", "./main.cf"),
            ("./libs/m/model/_init.cf", "./libs/m/model/_init.cf"),
            ("<weft>/std/_init.cf", "<weft>/std/_init.cf"),
            (
                "/home/ci/venv/lib/python3.12/site-packages/inmanta_plugins/apt/model/_init.cf",
                "<python-env>/inmanta_plugins/apt/model/_init.cf",
            ),
            (
                "./venv/lib/python3.12/site-packages/inmanta_plugins/fs/model/_init.cf",
                "<python-env>/inmanta_plugins/fs/model/_init.cf",
            ),
        ] {
            assert_eq!(super::portable_display(display), portable, "{display}");
        }
    }
}
