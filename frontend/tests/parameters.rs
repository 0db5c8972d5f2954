//! Declared parameters (`weft: parameters:` in `project.yml`), the inputs of a model, and the
//! source digest.
//!
//! Each case of `tests/fixtures/parameters/` is a project (`project.yml`, `main.cf`) and an
//! `expected.txt`: the diagnostics with their positions, or the parameters the program lists
//! with their defaults, followed by what `weft_ir::inputs::inputs` finds. Run with
//! `UPDATE_EXPECT=1` to rewrite the expectation files after a deliberate change, and review
//! the difference.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use weft_frontend::project::LoadOptions;
use weft_ir::inputs::{inputs, model_text};
use weft_ir::program::{ExprId, ExprKind, Program, StmtKind, operands};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/parameters")
}

/// How many places in the program name instruction `id`: operands of instructions, statements,
/// constructors, entity defaults, `implement` conditions, typedef constraints and promises.
fn uses_of(program: &Program, id: ExprId) -> usize {
    let mut uses = program.exprs.iter().map(|e| operands(&e.kind, program).iter().filter(|&&o| o == id).count()).sum();
    for stmt in &program.stmts {
        let named: Vec<ExprId> = match &stmt.kind {
            StmtKind::Assign { value, .. } => vec![*value],
            StmtKind::SetAttr { instance, value, .. } => vec![*instance, *value],
            StmtKind::If { cond, .. } => vec![*cond],
            StmtKind::For { iterable, .. } => vec![*iterable],
            StmtKind::Expr(e) => vec![*e],
        };
        uses += named.iter().filter(|&&e| e == id).count();
    }
    for ctor in &program.ctors {
        let named = ctor.direct.iter().chain(&ctor.indirect).map(|d| d.1).chain(ctor.splats.iter().copied());
        uses += named.chain(ctor.lhs.map(|l| l.0)).filter(|&e| e == id).count();
    }
    for entity in &program.entities {
        uses += entity.defaults.iter().filter(|d| d.1 == id).count();
        uses += entity.implements.iter().filter(|i| i.condition == Some(id)).count();
    }
    for typedef in &program.typedefs {
        uses +=
            usize::from(matches!(typedef.constraint, weft_ir::program::Constraint::Expr { expr, .. } if expr == id));
    }
    for block in &program.blocks {
        uses += block.promises.iter().filter(|p| p.instance == id).count();
    }
    uses
}

/// Compiles a case and describes the outcome.
fn describe(dir: &Path) -> String {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, dir, &LoadOptions::default());
    let sources = &compiled.project.sources;
    let at = |l: weft_ir::Location| {
        let lc = sources.line_col(l);
        format!("{}:{}:{}", sources.get(l.file).name, lc.line, lc.column)
    };
    let mut out = String::new();
    for d in &compiled.diagnostics {
        let primary = d.primary_location().map(at).unwrap_or_else(|| "-".into());
        writeln!(out, "{:?} {} at {primary}: {}", d.severity, d.code.0, d.message).unwrap();
        for label in d.labels.iter().filter(|l| !l.primary) {
            writeln!(out, "  label at {}: {}", at(label.location), label.message).unwrap();
        }
        for note in &d.notes {
            writeln!(out, "  {:?}: {}", note.kind, note.message).unwrap();
        }
    }
    let Some(program) = &compiled.lowered else {
        return out;
    };
    for p in &program.parameters {
        let ExprKind::Const(default) = &program.expr(p.value).kind else {
            panic!("parameter {} does not name a constant", p.name);
        };
        // The host replaces this instruction's constant: nothing but the assignment may use it.
        assert_eq!(uses_of(program, p.value), 1, "the constant of parameter {} is shared", p.name);
        let description = p.description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
        writeln!(
            out,
            "parameter {} = {} at {}{description}",
            p.name,
            model_text(default),
            program.location_text(p.location)
        )
        .unwrap();
    }
    writeln!(out, "--- inputs").unwrap();
    out.push_str(&inputs(program).render_text());
    out
}

/// Compares a case's outcome with its `expected.txt`.
fn check(case: &str) {
    let dir = fixtures().join(case);
    let actual = describe(&dir);
    let expected_path = dir.join("expected.txt");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&expected_path, &actual).expect("writing the expectation");
        return;
    }
    let expected = std::fs::read_to_string(&expected_path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_EXPECT=1 to create it)", expected_path.display()));
    assert_eq!(actual, expected, "case {case} differs from its expected.txt");
}

#[test]
fn valid_types() {
    check("valid_types");
}

#[test]
fn valid_mapping_form() {
    check("valid_mapping_form");
}

#[test]
fn unknown_parameter() {
    check("unknown_parameter");
}

#[test]
fn assigned_twice() {
    check("assigned_twice");
}

#[test]
fn not_constant() {
    check("not_constant");
}

#[test]
fn declared_twice() {
    check("declared_twice");
}

#[test]
fn malformed_section() {
    check("malformed_section");
}

#[test]
fn malformed_entries() {
    check("malformed_entries");
}

#[test]
fn inputs_of_a_model() {
    check("inputs");
}

#[test]
fn every_case_has_a_test() {
    let mut cases: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    let tested = [
        "assigned_twice",
        "declared_twice",
        "inputs",
        "malformed_entries",
        "malformed_section",
        "not_constant",
        "unknown_parameter",
        "valid_mapping_form",
        "valid_types",
    ];
    assert_eq!(cases, tested, "add a test function for each case directory");
}

// ---------------------------------------------------------------------------------------------
// Source digest.

/// A scratch copy of a fixture, at a path of its own.
struct Scratch(PathBuf);

impl Scratch {
    fn copy_of(case: &str, tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("weft-digest-{}-{case}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["project.yml", "main.cf"] {
            std::fs::copy(fixtures().join(case).join(file), dir.join(file)).unwrap();
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn digest(dir: &Path) -> String {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, dir, &LoadOptions::default());
    weft_frontend::source_digest(&compiled)
}

#[test]
fn the_digest_depends_on_the_sources_and_not_on_where_they_are() {
    let original = digest(&fixtures().join("valid_types"));
    assert_eq!(original.len(), 64);
    assert!(original.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));

    // The same files elsewhere (and read again later, with other modification times).
    let copy = Scratch::copy_of("valid_types", "copy");
    assert_eq!(digest(&copy.0), original);

    // One more byte in main.cf, or in project.yml, changes it.
    let edited = Scratch::copy_of("valid_types", "main");
    let main = edited.0.join("main.cf");
    std::fs::write(&main, std::fs::read_to_string(&main).unwrap() + "\n").unwrap();
    assert_ne!(digest(&edited.0), original);

    let edited = Scratch::copy_of("valid_types", "yml");
    let yml = edited.0.join("project.yml");
    std::fs::write(&yml, std::fs::read_to_string(&yml).unwrap() + "\n").unwrap();
    assert_ne!(digest(&edited.0), original);

    // No project.yml is not the same as an empty one.
    let bare = Scratch::copy_of("valid_mapping_form", "bare");
    std::fs::remove_file(bare.0.join("project.yml")).unwrap();
    let without = digest(&bare.0);
    std::fs::write(bare.0.join("project.yml"), "").unwrap();
    assert_ne!(digest(&bare.0), without);
}

#[test]
fn the_text_form_lists_parameters() {
    let arena = bumpalo::Bump::new();
    let compiled = weft_frontend::compile(&arena, &fixtures().join("valid_mapping_form"), &LoadOptions::default());
    let program = compiled.lowered.expect("the case compiles");
    let text = program.text(&|ns| ns == "__config__");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("parameter ")).collect();
    let replicas = program.parameters[0].value;
    let region = program.parameters[1].value;
    assert_eq!(
        lines,
        [
            format!("parameter replicas {replicas} = const 3  ; line 2"),
            format!("parameter region {region} = const 'eu-west'  ; line 1"),
        ]
    );
}
